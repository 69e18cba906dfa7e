package services

import (
	"bufio"
	"fmt"
	"math/rand"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/test/netnstest"
	"github.com/vishvananda/netns"
)

func requireNetAdmin(t testing.TB)           { netnstest.RequireNetAdmin(t) }
func sh(t testing.TB, args ...string) string { t.Helper(); return netnstest.Sh(t, args...) }

// inNS runs a command inside the named network namespace.
func inNS(t testing.TB, ns string, args ...string) string {
	t.Helper()
	return sh(t, append([]string{"nsenter", "--net=/run/netns/" + ns}, args...)...)
}

func newNetns(t testing.TB, name string) { t.Helper(); netnstest.New(t, name) }

func randSuffix() string { return fmt.Sprintf("%05d", rand.Intn(100000)) }

// withNetns runs fn on a thread switched into ns. Sockets created there stay in ns.
func withNetns(t testing.TB, ns string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("current netns: %v", err)
	}
	defer orig.Close()
	target, err := netns.GetFromPath("/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("open netns %s: %v", ns, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("enter netns %s: %v", ns, err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime then discards it instead of reusing a
			// thread that sits in the wrong namespace.
			t.Errorf("restore netns: %v", err)
			return
		}
		runtime.UnlockOSThread()
	}()
	fn()
}

// topo is a host namespace with two "pods" and one outside client, all routed (no bridge):
//
//	pod-a 10.244.1.2 --vha-- host --vhb-- pod-b 10.244.1.3
//	                           |  10.213.0.1/24
//	                         vhc
//	                           |  10.213.0.2/24
//	                        client
type topo struct {
	host, podA, podB, client string
	hostFd                   int
}

const (
	podAIP   = "10.244.1.2"
	podBIP   = "10.244.1.3"
	hostIP   = "10.213.0.1"
	clientIP = "10.213.0.2"
)

func setupTopo(t testing.TB) *topo {
	t.Helper()
	requireNetAdmin(t)
	s := randSuffix()
	tp := &topo{host: "flt-s" + s, podA: "flt-s" + s + "a", podB: "flt-s" + s + "b", client: "flt-s" + s + "c"}
	for _, ns := range []string{tp.host, tp.podA, tp.podB, tp.client} {
		newNetns(t, ns)
	}
	h := tp.host
	inNS(t, h, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	for _, p := range []struct{ ns, dev, ip string }{{tp.podA, "vha", podAIP}, {tp.podB, "vhb", podBIP}} {
		sh(t, "ip", "-n", h, "link", "add", p.dev, "type", "veth", "peer", "name", "eth0", "netns", p.ns)
		sh(t, "ip", "-n", h, "addr", "add", "10.244.1.1/32", "dev", p.dev)
		sh(t, "ip", "-n", h, "link", "set", p.dev, "up")
		sh(t, "ip", "-n", h, "route", "add", p.ip+"/32", "dev", p.dev)
		sh(t, "ip", "-n", p.ns, "addr", "add", p.ip+"/32", "dev", "eth0")
		sh(t, "ip", "-n", p.ns, "link", "set", "eth0", "up")
		sh(t, "ip", "-n", p.ns, "route", "add", "10.244.1.1/32", "dev", "eth0")
		sh(t, "ip", "-n", p.ns, "route", "add", "default", "via", "10.244.1.1", "dev", "eth0")
	}
	sh(t, "ip", "-n", h, "link", "add", "vhc", "type", "veth", "peer", "name", "eth0", "netns", tp.client)
	sh(t, "ip", "-n", h, "addr", "add", hostIP+"/24", "dev", "vhc")
	sh(t, "ip", "-n", h, "link", "set", "vhc", "up")
	sh(t, "ip", "-n", tp.client, "addr", "add", clientIP+"/24", "dev", "eth0")
	sh(t, "ip", "-n", tp.client, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", tp.client, "route", "add", "default", "via", hostIP)
	// Like a real host, this one has a default gateway (the client namespace, which does not
	// forward): its own connections to Service addresses need a route to reach the output hook.
	sh(t, "ip", "-n", h, "route", "add", "default", "via", clientIP)
	f, err := os.Open("/run/netns/" + h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	tp.hostFd = int(f.Fd())
	return tp
}

// serve starts a TCP server in ns on addr that answers "<name> <client ip>\n" and closes.
func serve(t testing.TB, ns, addr, name string) {
	t.Helper()
	var l net.Listener
	withNetns(t, ns, func() {
		var err error
		l, err = net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen %s in %s: %v", addr, ns, err)
		}
	})
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ip, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "%s %s\n", name, ip)
			c.Close()
		}
	}()
}

// dial connects from ns to addr and returns the server's line, or the error.
func dial(t testing.TB, ns, addr string, timeout time.Duration) (string, error) {
	t.Helper()
	var line string
	var err error
	withNetns(t, ns, func() {
		var c net.Conn
		c, err = net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		line, err = bufio.NewReader(c).ReadString('\n')
		line = strings.TrimSpace(line)
	})
	return line, err
}

// serveUDP answers each datagram on addr in ns with "<name> <client ip>".
func serveUDP(t testing.TB, ns, addr, name string) {
	t.Helper()
	var pc net.PacketConn
	withNetns(t, ns, func() {
		var err error
		pc, err = net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatalf("listen udp %s in %s: %v", addr, ns, err)
		}
	})
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			ip, _, _ := net.SplitHostPort(from.String())
			_, _ = pc.WriteTo([]byte(name+" "+ip), from)
		}
	}()
}

// askUDP sends one datagram from ns to addr and returns the answer.
func askUDP(t testing.TB, ns, addr string, timeout time.Duration) (string, error) {
	t.Helper()
	var line string
	var err error
	withNetns(t, ns, func() {
		var c net.Conn
		c, err = net.DialTimeout("udp", addr, timeout)
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		if _, err = c.Write([]byte("?")); err != nil {
			return
		}
		buf := make([]byte, 512)
		var n int
		n, err = c.Read(buf)
		line = string(buf[:n])
	})
	return line, err
}
