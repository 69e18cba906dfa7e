package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/test/framework"
	mdns "github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testNetns creates a named network namespace with lo up, deleted when the test ends.
func testNetns(t *testing.T) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	missing := func(why string) {
		if framework.InCI() {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	if os.Geteuid() != 0 {
		missing("needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) to create a network namespace")
	}
	name := fmt.Sprintf("flt-dns-%d", os.Getpid())
	ch := make(chan error, 1)
	var ns netns.NsHandle
	go func() {
		// NewNamed moves the calling thread into the new namespace: keep it locked, and let
		// it die with the goroutine instead of returning it to the scheduler.
		runtime.LockOSThread()
		var err error
		ns, err = netns.NewNamed(name)
		ch <- err
	}()
	if err := <-ch; err != nil {
		missing(fmt.Sprintf("create network namespace %s: %v", name, err))
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", name, err)
	}
	t.Cleanup(h.Close)
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("lo up in %s: %v", name, err)
	}
	return ns, h
}

// inNetns runs fn on a thread inside ns (sockets fn opens live there).
func inNetns(ns netns.NsHandle, fn func()) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := netns.Set(ns); err != nil {
			ch <- err
			return
		}
		fn()
		ch <- nil
	}()
	return <-ch
}

// TestRunAddsDNSAddressInNetns runs the server with the default address 10.96.0.10:53 in a
// namespace of its own: the address goes on the dummy interface flotilla-dns, answers come
// from it, and both are gone when Run returns. An address that is already local is used as is.
func TestRunAddsDNSAddressInNetns(t *testing.T) {
	ns, h := testNetns(t)
	_, rootErr := netlink.LinkByName(InterfaceName)
	a := framework.StartAgent(t, framework.AgentOptions{})
	c := a.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := EnsureService(ctx, c, DefaultListenIP); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.80", Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	up := fakeUpstream(t) // never queried here; keeps Run away from the host's resolv.conf

	run := func(ip net.IP, check func()) {
		t.Helper()
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // Run binds and cleans up on this thread, inside ns
			if err := netns.Set(ns); err != nil {
				done <- err
				return
			}
			done <- Run(runCtx, c, Config{ListenIP: ip, Upstreams: []string{up}})
		}()
		addr := net.JoinHostPort(ip.String(), "53")
		var got string
		var runErr error
		ended := false
		if !waitFor(30*time.Second, func() bool {
			select {
			case runErr = <-done:
				ended = true
				return true
			default:
			}
			_ = inNetns(ns, func() { got = firstA(ask(addr, "udp", "web.default.svc.cluster.local.", mdns.TypeA)) })
			return got == "10.96.0.80"
		}) || ended {
			t.Fatalf("no answer from %s inside the namespace (last %q, Run ended: %v %v)", addr, got, ended, runErr)
		}
		_ = inNetns(ns, func() { got = firstA(ask(addr, "tcp", "kube-dns.kube-system.svc.cluster.local.", mdns.TypeA)) })
		if got != "10.96.0.10" {
			t.Errorf("kube-dns over TCP at %s: %q", addr, got)
		}
		check()
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return within 10s of ctx ending")
		}
	}

	// This machine's kernel may lack the dummy driver; Run then uses lo.
	holder := InterfaceName
	if err := h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "flt-probe0"}}); errors.Is(err, syscall.EOPNOTSUPP) {
		holder = "lo"
		t.Log("kernel without dummy interfaces: expecting the address on lo")
	} else if err == nil {
		probe, _ := h.LinkByName("flt-probe0")
		_ = h.LinkDel(probe)
	}
	hasDNSAddr := func(link netlink.Link) bool {
		addrs, _ := h.AddrList(link, netlink.FAMILY_V4)
		return slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IPNet.String() == "10.96.0.10/32" })
	}
	run(DefaultListenIP, func() {
		link, err := h.LinkByName(holder)
		if err != nil {
			t.Fatalf("interface %s in the namespace: %v", holder, err)
		}
		if holder == InterfaceName && link.Type() != "dummy" {
			t.Errorf("%s is a %s, want dummy", InterfaceName, link.Type())
		}
		if !hasDNSAddr(link) {
			t.Errorf("10.96.0.10/32 not on %s", holder)
		}
	})
	if _, err := h.LinkByName(InterfaceName); !errors.As(err, &netlink.LinkNotFoundError{}) {
		t.Errorf("%s still in the namespace after Run returned (err %v)", InterfaceName, err)
	}
	if lo, _ := h.LinkByName("lo"); hasDNSAddr(lo) {
		t.Error("10.96.0.10 still on lo after Run returned")
	}

	// Already local (here on a veth the test owns): used as is, nothing added or removed.
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "flt-own0"}, PeerName: "flt-own1"}); err != nil {
		t.Fatal(err)
	}
	own, _ := h.LinkByName("flt-own0")
	ownIP := net.ParseIP("10.213.0.53")
	if err := h.LinkSetUp(own); err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(own, &netlink.Addr{IPNet: &net.IPNet{IP: ownIP, Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	run(ownIP, func() {
		if _, err := h.LinkByName(InterfaceName); err == nil {
			t.Errorf("%s created although %s was already local", InterfaceName, ownIP)
		}
		lo, _ := h.LinkByName("lo")
		if addrs, _ := h.AddrList(lo, netlink.FAMILY_V4); len(addrs) != 1 {
			t.Errorf("lo got addresses although %s was already local: %v", ownIP, addrs)
		}
	})
	if addrs, _ := h.AddrList(own, netlink.FAMILY_V4); len(addrs) != 1 {
		t.Errorf("the test's own address was touched: %v", addrs)
	}

	if _, err := netlink.LinkByName(InterfaceName); err == nil && rootErr != nil {
		t.Errorf("%s appeared in the root namespace", InterfaceName)
	}
}
