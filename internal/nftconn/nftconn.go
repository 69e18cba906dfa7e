// Package nftconn opens nftables netlink connections sized for large transactions.
package nftconn

import (
	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Big batches (10,000 Services, thousands of policies) carry tens of thousands of messages,
// each acknowledged: the default socket buffers would truncate the batch (EMSGSIZE) or drop
// acks (ENOBUFS). The FORCE variants need CAP_NET_ADMIN, which programming nftables needs
// anyway; these are limits, the kernel only uses what a batch needs.
const (
	sendBuf = 1 << 30
	recvBuf = 1 << 28
)

// New opens a connection to the network namespace netnsFd (the caller's when it is 0).
func New(netnsFd int) (*nftables.Conn, error) {
	opts := []nftables.ConnOption{nftables.WithSockOptions(func(c *netlink.Conn) error {
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sendBuf); e != nil {
				serr = e
				return
			}
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, recvBuf)
		}); err != nil {
			return err
		}
		return serr
	})}
	if netnsFd > 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	return nftables.New(opts...)
}
