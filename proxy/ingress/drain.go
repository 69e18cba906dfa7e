package ingress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/flotilla-dev/flotilla/internal/nftconn"
)

// Draining. Closing a listener resets the connections the kernel completed but the server
// had not accepted yet: a client that sent its request on one gets "connection reset" in the
// middle of every restart, more often the busier the host is as it stops. Before the proxy
// closes its listeners it first has new connection attempts to its ports refused with a TCP
// reset (a client that knows other hosts goes to the next one without having sent anything,
// as it does once the port is closed), accepts what the kernel had queued, and serves it;
// only then does it close the listeners and remove the rule.

// DrainTablePrefix starts the name of the nftables table (family inet) that refuses new
// connections to the Ingress ports while the proxy drains: flotilla-drain-<HTTP port>, one
// per proxy of a network namespace. It exists only during a shutdown; one left by a crash in
// the middle of one is removed at the next start.
const DrainTablePrefix = "flotilla-drain-"

func drainTable(httpPort int) *nftables.Table {
	return &nftables.Table{Name: fmt.Sprintf("%s%d", DrainTablePrefix, httpPort), Family: nftables.TableFamilyINet}
}

// refuseNewConnections installs the drain table of ports[0]: TCP SYNs to ports (on addr,
// when it is a specific address) are answered with a reset. netnsFd is the network namespace
// (0: this process's).
func refuseNewConnections(netnsFd int, addr netip.Addr, ports []int) error {
	c, err := nftconn.New(netnsFd)
	if err != nil {
		return err
	}
	tbl := drainTable(ports[0])
	c.AddTable(tbl)
	c.DelTable(tbl)
	c.AddTable(tbl)
	prio := nftables.ChainPriority(-300)
	ch := c.AddChain(&nftables.Chain{Name: "input", Table: tbl, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: &prio})
	for _, p := range ports {
		var exprs []expr.Any
		if addr.Is4() && !addr.IsUnspecified() {
			exprs = append(exprs,
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr.AsSlice()})
		}
		port := make([]byte, 2)
		binary.BigEndian.PutUint16(port, uint16(p))
		exprs = append(exprs,
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port},
			// SYN without ACK: a new connection, never a packet of an established one.
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x12}, Xor: []byte{0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x02}},
			&expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
		c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: exprs})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables table inet %s: %w", tbl.Name, err)
	}
	return nil
}

// removeDrainTable deletes the drain table of httpPort if it exists.
func removeDrainTable(netnsFd, httpPort int) error {
	c, err := nftconn.New(netnsFd)
	if err != nil {
		return err
	}
	tbl := drainTable(httpPort)
	c.AddTable(tbl)
	c.DelTable(tbl)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("remove nftables table inet %s: %w", tbl.Name, err)
	}
	return nil
}

// acceptQueue is how many connections the kernel completed on the listening socket l that
// were not accepted yet (TCP_INFO's tcpi_unacked, for a listener).
func acceptQueue(l net.Listener) (int, error) {
	sc, ok := l.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("listener %s (%T) has no socket", l.Addr(), l)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			serr = err
			return
		}
		n = int(info.Unacked)
	}); err != nil {
		return 0, err
	}
	return n, serr
}

// waitAccepted waits (at most until deadline) until the server accepted what the listeners
// had queued.
func waitAccepted(deadline time.Time, ls ...net.Listener) error {
	var errs []error
	for _, l := range ls {
		if l == nil {
			continue
		}
		for {
			n, err := acceptQueue(l)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("%s: %d connections still queued", l.Addr(), n))
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// countConns is a ConnState hook keeping n at the number of the server's open connections.
func countConns(n *atomic.Int64) func(net.Conn, http.ConnState) {
	return func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			n.Add(1)
		case http.StateClosed, http.StateHijacked:
			n.Add(-1)
		}
	}
}

// closeServers closes the servers once their connections are done, at most timeout later,
// and returns how many were still open then. net/http's Shutdown does not do it alone: a
// request it reads after Shutdown began is dropped unanswered (the connection just closes),
// which a client that had connected a moment before sees as an EOF. So keep-alives are
// turned off first (idle connections close now, busy ones after their answer, and a
// connection accepted but not read yet is still answered), the listeners are closed, and
// Shutdown comes only once no connection is left (or at the timeout: what remains is cut).
func closeServers(servers []*http.Server, open []*atomic.Int64, timeout time.Duration, ls ...net.Listener) int64 {
	deadline := time.Now().Add(timeout)
	// Before the listeners close: a client that sees its connect refused may already have
	// sent a request on a connection accepted earlier, and that answer must end keep-alive.
	for _, s := range servers {
		s.SetKeepAlivesEnabled(false)
	}
	for _, l := range ls {
		if l != nil {
			_ = l.Close()
		}
	}
	var busy int64
	for {
		busy = 0
		for _, s := range servers {
			// Closes the connections that became idle since the last round (an HTTP/2
			// one is idle between its streams).
			s.SetKeepAlivesEnabled(false)
		}
		for _, n := range open {
			busy += n.Load()
		}
		if busy == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
	return busy
}
