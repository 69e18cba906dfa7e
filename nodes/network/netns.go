package network

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// inNetNS runs fn on an OS thread switched into ns. The thread is never unlocked, so the Go
// runtime throws it away when fn returns instead of handing a goroutine a thread in the wrong
// namespace. Callers may be on any goroutine, in any namespace.
func inNetNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// createNetNS makes a new network namespace and pins it with a bind mount at path, so that it
// outlives the thread that made it and the agent process: a restarted agent finds it there.
// The mount is in the agent's mount namespace, which `nsenter --net` does not change.
func createNetNS(path string) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: this thread ends up in the new namespace and must die with the goroutine.
		runtime.LockOSThread()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
		if err != nil {
			errc <- fmt.Errorf("create netns mount point %s: %w", path, err)
			return
		}
		f.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			_ = os.Remove(path)
			errc <- fmt.Errorf("create network namespace: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			_ = os.Remove(path)
			errc <- fmt.Errorf("bind-mount network namespace at %s: %w", path, err)
			return
		}
		errc <- nil
	}()
	return <-errc
}

// isNetNS reports whether path is a mounted network namespace (not a leftover file whose
// mount went away, as after a reboot).
func isNetNS(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// removeNetNS unmounts and removes the namespace pinned at path; the kernel frees the
// namespace (and the veth inside) once nothing else holds it. Missing is fine.
func removeNetNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove network namespace %s: %w", path, err)
	}
	return nil
}

// DialInNetNS connects to addr from inside the network namespace pinned at nsPath (a pod's
// sandbox): the socket is made in that namespace and keeps it after the thread leaves, so
// 127.0.0.1 is the pod's own loopback (kubectl port-forward).
func DialInNetNS(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %s: %w", nsPath, err)
	}
	defer ns.Close()
	var conn net.Conn
	err = inNetNS(ns, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}
