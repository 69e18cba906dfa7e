package ingress

import (
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flotilla-dev/flotilla/test/netnstest"
)

// TestDrainRefusesNewKeepsQueued, in a network namespace of its own: while the drain table
// is in place a new connection is refused at once (a reset: the client moves on without
// having sent anything), the connections the kernel had queued are still there to accept,
// and removing the table leaves nothing behind.
func TestDrainRefusesNewKeepsQueued(t *testing.T) {
	netnstest.RequireNetAdmin(t)
	ns := fmt.Sprintf("fldrain%05d", rand.Intn(100000))
	netnstest.New(t, ns)
	nsFd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nsFd)

	var l net.Listener
	var queued []net.Conn
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp", l.Addr().String(), 2*time.Second) }
	if err := netnstest.In("/run/netns/"+ns, func() error {
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
		for range 2 {
			c, err := dial()
			if err != nil {
				return err
			}
			queued = append(queued, c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	waitQueue(t, l, 2)
	port := l.Addr().(*net.TCPAddr).Port
	if err := refuseNewConnections(nsFd, netip.MustParseAddr("127.0.0.1"), []int{port}); err != nil {
		t.Fatal(err)
	}
	if err := netnstest.In("/run/netns/"+ns, func() error {
		start := time.Now()
		c, err := dial()
		if err == nil {
			c.Close()
			return errors.New("a new connection completed while the listener drains")
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
			return fmt.Errorf("a new connection while draining: %v after %s, want connection refused at once", err, time.Since(start))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitQueue(t, l, 2)
	for _, c := range queued {
		// The queued connections are intact: accept each and exchange a byte.
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := s.Read(b); err != nil || b[0] != 'x' {
			t.Fatalf("read from a queued connection: %q %v", b, err)
		}
		s.Close()
		c.Close()
	}
	if err := waitAccepted(time.Now().Add(5*time.Second), l); err != nil {
		t.Fatal(err)
	}
	if err := removeDrainTable(nsFd, port); err != nil {
		t.Fatal(err)
	}
	if out := netnstest.Sh(t, "ip", "netns", "exec", ns, "nft", "list", "tables"); strings.Contains(out, DrainTablePrefix) {
		t.Fatalf("drain table left behind:\n%s", out)
	}
	// Removing it again (a start after a clean stop) is no error.
	if err := removeDrainTable(nsFd, port); err != nil {
		t.Fatal(err)
	}
}

func waitQueue(t *testing.T, l net.Listener, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := acceptQueue(l)
		if err != nil {
			t.Fatal(err)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("accept queue: %d, want %d", n, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
