// Package netnstest holds what tests need to build hosts and pods out of network namespaces.
package netnstest

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// RequireNetAdmin skips (or fails in CI) when the test cannot create network namespaces and
// program nftables.
func RequireNetAdmin(t testing.TB) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root"
	}
	for _, bin := range []string{"ip", "nft", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing += " " + bin
		}
	}
	if missing == "" {
		return
	}
	msg := "needs root, iproute2 (ip), nftables (nft) and util-linux (nsenter); missing:" + missing
	if framework.InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Sh runs a command and returns its output, failing the test when it fails.
func Sh(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// New creates /run/netns/<name> with lo up and deletes it when the test ends.
func New(t testing.TB, name string) {
	t.Helper()
	Sh(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	Sh(t, "ip", "-n", name, "link", "set", "lo", "up")
}

// In runs fn on a thread of its own switched into the network namespace at path
// (/run/netns/<name>); sockets fn makes stay in that namespace. The thread is never switched
// back: the runtime ends it with its goroutine.
func In(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		target, err := netns.GetFromPath(path)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}
