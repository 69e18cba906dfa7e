//go:build ipvsvm

// These tests need a kernel with ip_vs. This project's machines have none: test/ipvsvm builds
// this package's test binary with -tags ipvsvm and runs it inside a small virtual machine.

package services

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/ipvs"
	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// ipvsDump lists the IPVS table of the namespace like `ipvsadm -Ln`, plus the companion table.
func ipvsDump(t *testing.T, ns string) string {
	t.Helper()
	h, err := ipvs.New("/run/netns/" + ns)
	if err != nil {
		return fmt.Sprintf("ipvs handle: %v", err)
	}
	defer h.Close()
	svcs, err := h.GetServices()
	if err != nil {
		return fmt.Sprintf("list services: %v", err)
	}
	var lines []string
	for _, s := range svcs {
		line := fmt.Sprintf("%d %s:%d %s flags=%#x timeout=%d", s.Protocol, s.Address, s.Port, s.SchedName, s.Flags, s.Timeout)
		ds, _ := h.GetDestinations(s)
		for _, d := range ds {
			line += fmt.Sprintf("\n  -> %s:%d w=%d act=%d inact=%d", d.Address, d.Port, d.Weight, d.ActiveConnections, d.InactiveConnections)
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	out := "IPVS:\n" + strings.Join(lines, "\n")
	if nft, err := execOut("nsenter", "--net=/run/netns/"+ns, "nft", "list", "table", "ip", "flotilla-ipvs"); err == nil {
		out += "\nnftables:\n" + nft
	}
	return out
}

// kernelVS is a virtual server as read back from the kernel, in a comparable form.
type kernelVS struct {
	sched   string
	flags   uint32
	timeout uint32
	dests   map[string]int // ip:port -> weight
	conns   map[string]int // ip:port -> active+inactive
}

func ipvsServices(t *testing.T, ns string) map[string]kernelVS {
	t.Helper()
	h, err := ipvs.New("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	svcs, err := h.GetServices()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]kernelVS{}
	for _, s := range svcs {
		k := kernelVS{sched: s.SchedName, flags: s.Flags & ipvsSvcFlagPersistent, timeout: s.Timeout, dests: map[string]int{}, conns: map[string]int{}}
		ds, err := h.GetDestinations(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			ap := fmt.Sprintf("%s:%d", d.Address, d.Port)
			k.dests[ap] = d.Weight
			k.conns[ap] = d.ActiveConnections + d.InactiveConnections
		}
		proto := "tcp"
		if s.Protocol == 17 {
			proto = "udp"
		}
		out[fmt.Sprintf("%s %s:%d", proto, s.Address, s.Port)] = k
	}
	return out
}

// newIPVSTopo sets up the namespaces and an IPVS backend programming the host namespace.
func newIPVSTopo(t *testing.T, now func() time.Time) (*topo, *IPVS) {
	tp := setupTopo(t)
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	log.SetFormatter(&logrus.TextFormatter{DisableColors: true})
	be := NewIPVS(IPVSOptions{NetNS: "/run/netns/" + tp.host, GracePeriod: 20 * time.Second, Log: logrus.NewEntry(log), now: now})
	t.Cleanup(func() { _ = be.Cleanup() })
	return tp, be
}

// TestIPVSConformance runs the table every backend passes (runConformance) against IPVS.
func TestIPVSConformance(t *testing.T) {
	tp, be := newIPVSTopo(t, nil)
	runConformance(t, tp, conformanceBackend{
		be:   be,
		dump: func(t *testing.T) string { return ipvsDump(t, tp.host) },
		sabotage: func(t *testing.T) {
			h, err := ipvs.New("/run/netns/" + tp.host)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if err := h.Flush(); err != nil {
				t.Fatal(err)
			}
		},
		leftovers: func(t *testing.T) string {
			var left []string
			if svcs := ipvsServices(t, tp.host); len(svcs) > 0 {
				left = append(left, fmt.Sprintf("IPVS services %v", svcs))
			}
			if out, err := execOut("ip", "-n", tp.host, "link", "show", DefaultIPVSInterface); err == nil {
				left = append(left, out)
			}
			if out := inNS(t, tp.host, "nft", "list", "tables"); strings.Contains(out, "flotilla-ipvs") {
				left = append(left, out)
			}
			return strings.Join(left, "; ")
		},
	})
}

// fakeClock is a settable clock for the grace period.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// serveHold answers "<name> <client ip>\n" and keeps the connection open until the client
// closes it, so draining can be observed.
func serveHold(t *testing.T, ns, addr, name string) {
	t.Helper()
	var l net.Listener
	withNetns(t, ns, func() {
		var err error
		if l, err = net.Listen("tcp", addr); err != nil {
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
			go func() {
				defer c.Close()
				ip, _, _ := net.SplitHostPort(c.RemoteAddr().String())
				fmt.Fprintf(c, "%s %s\n", name, ip)
				_, _ = bufio.NewReader(c).ReadString('\n')
			}()
		}
	}()
}

// TestIPVSKernel checks what only IPVS has: the virtual servers as the kernel holds them,
// every scheduler, persistence, endpoint changes, graceful removal, drift repair, and that a
// virtual server we do not own survives.
func TestIPVSKernel(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	tp, be := newIPVSTopo(t, clock.Now)
	serveHold(t, tp.podA, podAIP+":8080", "a")
	serveHold(t, tp.podB, podBIP+":8080", "b")
	node := mkNode("n1", hostIP)
	// apply goes through ApplyChanged, naming every port before and after, as the agent's
	// loop does after an event: the first call applies everything, the later ones only the
	// ports that differ (IPVSCompiler.CompileChanged), which the kernel must then show.
	var prev DesiredState
	apply := func(t *testing.T, svcs []*v1.Service, slices ...*discoveryv1.EndpointSlice) {
		t.Helper()
		ds := Compile(svcs, slices, node)
		var keys []string
		for _, sps := range [][]ServicePort{prev.Services, ds.Services} {
			for _, sp := range sps {
				keys = append(keys, sp.Key)
			}
		}
		if err := be.ApplyChanged(ds, keys); err != nil {
			t.Fatalf("apply: %v", err)
		}
		prev = ds
	}
	both := mkSlice("web-1", "web", 8080, readyEP(podAIP, "n1"), readyEP(podBIP, "n1"))
	a, b := podAIP+":8080", podBIP+":8080"
	holdDial := func(t *testing.T, ns, addr string) (string, net.Conn) {
		t.Helper()
		var c net.Conn
		var line string
		var err error
		withNetns(t, ns, func() {
			c, err = net.DialTimeout("tcp", addr, 2*time.Second)
			if err == nil {
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				line, err = bufio.NewReader(c).ReadString('\n')
			}
		})
		if err != nil {
			t.Fatalf("dial %s from %s: %v\n%s", addr, ns, err, ipvsDump(t, tp.host))
		}
		return strings.Fields(line)[0], c
	}
	oneShot := func(t *testing.T, ns, addr string) string {
		t.Helper()
		name, c := holdDial(t, ns, addr)
		c.Close()
		return name
	}

	t.Run("the kernel has IPVS and auto mode picks it", func(t *testing.T) {
		if err := CheckIPVS(); err != nil {
			t.Fatal(err)
		}
		if mode, _, err := chooseMode(ModeAuto, CheckIPVS() == nil); err != nil || mode != ModeIPVS {
			t.Fatalf("auto chose %q, %v", mode, err)
		}
	})

	t.Run("ClusterIP and NodePort virtual servers", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080))}, both)
		got := ipvsServices(t, tp.host)
		for _, k := range []string{"tcp 10.96.0.50:80", "tcp " + hostIP + ":30080"} {
			vs, ok := got[k]
			if !ok || vs.sched != "rr" || len(vs.dests) != 2 || vs.dests[a] != 1 || vs.dests[b] != 1 {
				t.Fatalf("%s: got %+v\n%s", k, vs, ipvsDump(t, tp.host))
			}
		}
		if len(got) != 2 {
			t.Fatalf("want exactly 2 virtual servers\n%s", ipvsDump(t, tp.host))
		}
		addrs, err := execOut("ip", "-n", tp.host, "-4", "addr", "show", DefaultIPVSInterface)
		if err != nil || !strings.Contains(addrs, "10.96.0.50/32") {
			t.Fatalf("ClusterIP not bound on %s: %v\n%s", DefaultIPVSInterface, err, addrs)
		}
		// Round robin over two servers alternates exactly.
		seen := map[string]int{}
		for i := 0; i < 10; i++ {
			seen[oneShot(t, tp.client, hostIP+":30080")]++
		}
		if seen["a"] != 5 || seen["b"] != 5 {
			t.Fatalf("rr over 10 NodePort connections: %v", seen)
		}
		// Applying the same state again changes nothing (idempotent).
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080))}, both)
		shape := func(m map[string]kernelVS) string {
			var out []string
			for k, vs := range m {
				out = append(out, fmt.Sprintf("%s %s %d %d %v", k, vs.sched, vs.flags, vs.timeout, vs.dests))
			}
			sort.Strings(out)
			return strings.Join(out, "; ")
		}
		if again := ipvsServices(t, tp.host); shape(again) != shape(got) {
			t.Fatalf("second apply changed the kernel: %v -> %v", got, again)
		}
	})

	t.Run("LoadBalancer source ranges: the companion table drops other sources before IPVS", func(t *testing.T) {
		blocked := func(t *testing.T, ns, addr string) {
			t.Helper()
			var err error
			withNetns(t, ns, func() {
				var c net.Conn
				if c, err = net.DialTimeout("tcp", addr, 700*time.Millisecond); err == nil {
					c.Close()
				}
			})
			if err == nil || strings.Contains(err.Error(), "refused") {
				t.Fatalf("dial %s from %s: %v, want no answer\n%s", addr, ns, err, ipvsDump(t, tp.host))
			}
		}
		lb := func(ranges ...string) []*v1.Service {
			return []*v1.Service{mkSvc("web", "10.96.0.50", 8088, nodePort(30088), loadBalancer(hostIP, ranges...))}
		}
		apply(t, lb(clientIP+"/32"), both)
		oneShot(t, tp.client, hostIP+":8088")
		blocked(t, tp.podB, hostIP+":8088")
		oneShot(t, tp.podB, hostIP+":30088") // the NodePort stays open
		apply(t, lb("10.244.0.0/16"), both)
		oneShot(t, tp.podB, hostIP+":8088")
		blocked(t, tp.client, hostIP+":8088")
		apply(t, lb(), both)
		oneShot(t, tp.client, hostIP+":8088")
	})

	t.Run("every scheduler", func(t *testing.T) {
		var names []string
		for s := range IPVSSchedulers {
			names = append(names, s)
		}
		sort.Strings(names)
		for _, s := range names {
			svc := mkSvc("web", "10.96.0.50", 80, func(sv *v1.Service) { sv.Annotations = map[string]string{AnnotationIPVSScheduler: s} })
			apply(t, []*v1.Service{svc}, both)
			if got := ipvsServices(t, tp.host)["tcp 10.96.0.50:80"]; got.sched != s || len(got.dests) != 2 {
				t.Fatalf("scheduler %s: kernel has %+v", s, got)
			}
			seen := map[string]bool{}
			for i := 0; i < 4; i++ {
				seen[oneShot(t, tp.podB, "10.96.0.50:80")] = true
			}
			if len(seen) == 0 {
				t.Fatalf("scheduler %s: no answer", s)
			}
		}
	})

	t.Run("sessionAffinity ClientIP is a persistent service with its timeout", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, affinity(45))}, both)
		got := ipvsServices(t, tp.host)["tcp 10.96.0.50:80"]
		if got.flags&ipvsSvcFlagPersistent == 0 || got.timeout != 45 {
			t.Fatalf("kernel has %+v, want persistent with timeout 45", got)
		}
		first := oneShot(t, tp.client, "10.96.0.50:80")
		for i := 0; i < 6; i++ {
			if n := oneShot(t, tp.client, "10.96.0.50:80"); n != first {
				t.Fatalf("connection %d went to %s after %s", i, n, first)
			}
		}
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, both)
		if got := ipvsServices(t, tp.host)["tcp 10.96.0.50:80"]; got.flags&ipvsSvcFlagPersistent != 0 {
			t.Fatalf("affinity off: kernel still has %+v", got)
		}
	})

	t.Run("endpoint add and remove", func(t *testing.T) {
		onlyA := mkSlice("web-1", "web", 8080, readyEP(podAIP, "n1"))
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, both)
		if got := ipvsServices(t, tp.host)["tcp 10.96.0.50:80"]; len(got.dests) != 2 || got.dests[a] != 1 || got.dests[b] != 1 {
			t.Fatalf("two endpoints: %+v", got)
		}
		// b still has (TIME_WAIT) connections from earlier subtests, so it drains (weight 0)
		// rather than disappearing; either way no new connection may reach it.
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, onlyA)
		got := ipvsServices(t, tp.host)["tcp 10.96.0.50:80"]
		if w, ok := got.dests[b]; got.dests[a] != 1 || (ok && w != 0) {
			t.Fatalf("b removed: %+v", got)
		}
		for i := 0; i < 6; i++ {
			if n := oneShot(t, tp.podB, "10.96.0.50:80"); n != "a" {
				t.Fatalf("connection %d after removing b went to %s\n%s", i, n, ipvsDump(t, tp.host))
			}
		}
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, both)
		if got := ipvsServices(t, tp.host)["tcp 10.96.0.50:80"]; got.dests[b] != 1 {
			t.Fatalf("b added back: %+v", got)
		}
		seen := map[string]bool{}
		for i := 0; i < 6; i++ {
			seen[oneShot(t, tp.podB, "10.96.0.50:80")] = true
		}
		if !seen["a"] || !seen["b"] {
			t.Fatalf("after adding b back only %v answered", seen)
		}
	})

	t.Run("graceful removal: weight 0 while connections last, deleted after the grace period", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, both)
		var held net.Conn
		for i := 0; i < 4 && held == nil; i++ {
			n, c := holdDial(t, tp.podB, "10.96.0.50:80")
			if n == "a" {
				held = c
			} else {
				c.Close()
			}
		}
		if held == nil {
			t.Fatal("no connection reached a")
		}
		defer held.Close()
		onlyB := mkSlice("web-1", "web", 8080, readyEP(podBIP, "n1"))
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, onlyB)
		got := ipvsServices(t, tp.host)["tcp 10.96.0.50:80"]
		if w, ok := got.dests[a]; !ok || w != 0 || got.conns[a] == 0 || got.dests[b] != 1 {
			t.Fatalf("after removing a with an open connection: %+v, want a kept with weight 0\n%s", got, ipvsDump(t, tp.host))
		}
		for i := 0; i < 6; i++ {
			if n := oneShot(t, tp.podB, "10.96.0.50:80"); n != "b" {
				t.Fatalf("new connection %d reached draining server %s", i, n)
			}
		}
		// The held connection still works through the draining server.
		if _, err := held.Write([]byte("bye\n")); err != nil {
			t.Fatalf("held connection broke while draining: %v", err)
		}
		clock.Add(10 * time.Second)
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, onlyB)
		if _, ok := ipvsServices(t, tp.host)["tcp 10.96.0.50:80"].dests[a]; !ok {
			t.Fatalf("a deleted before the grace period ended")
		}
		clock.Add(11 * time.Second)
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, onlyB)
		if got := ipvsServices(t, tp.host)["tcp 10.96.0.50:80"]; len(got.dests) != 1 || got.dests[b] != 1 {
			t.Fatalf("after the grace period: %+v, want only b", got)
		}
	})

	t.Run("deleted virtual servers come back on Resync; foreign ones are left alone", func(t *testing.T) {
		h, err := ipvs.New("/run/netns/" + tp.host)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		foreign := &ipvs.Service{Address: net.ParseIP("10.213.5.5").To4(), Protocol: 6, Port: 80, SchedName: "rr", AddressFamily: 2, Netmask: 0xffffffff}
		if err := h.NewService(foreign); err != nil {
			t.Fatal(err)
		}
		svcs := []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080))}
		ds := Compile(svcs, []*discoveryv1.EndpointSlice{both}, node)
		if err := be.Apply(ds); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"tcp 10.96.0.50:80", "tcp " + hostIP + ":30080"} {
			ap := netip.MustParseAddrPort(strings.Fields(k)[1])
			if err := h.DelService(&ipvs.Service{Address: net.IP(ap.Addr().AsSlice()), Protocol: 6, Port: ap.Port(), AddressFamily: 2}); err != nil {
				t.Fatalf("delete %s: %v", k, err)
			}
		}
		if _, err := dial(t, tp.client, hostIP+":30080", 500*time.Millisecond); err == nil {
			t.Fatal("NodePort still answers without its virtual server")
		}
		if err := be.Resync(ds); err != nil {
			t.Fatal(err)
		}
		got := ipvsServices(t, tp.host)
		for _, k := range []string{"tcp 10.96.0.50:80", "tcp " + hostIP + ":30080", "tcp 10.213.5.5:80"} {
			if _, ok := got[k]; !ok {
				t.Fatalf("%s missing after Resync\n%s", k, ipvsDump(t, tp.host))
			}
		}
		if n := oneShot(t, tp.client, hostIP+":30080"); n != "a" && n != "b" {
			t.Fatalf("answer %q", n)
		}
		// Removing the Service removes ours but not the foreign virtual server.
		if err := be.Apply(Compile(nil, nil, node)); err != nil {
			t.Fatal(err)
		}
		got = ipvsServices(t, tp.host)
		if len(got) != 1 {
			t.Fatalf("after removing every Service: %v, want only the foreign one", got)
		}
		if err := h.DelService(foreign); err != nil {
			t.Fatal(err)
		}
	})
}

// execOut runs a command and returns its combined output.
func execOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// TestIPVSRunAutoMode drives Run in auto mode on this kernel: it must choose IPVS (not be
// fooled into nftables, nor nftables into IPVS) and keep virtual servers in step with the
// Services and EndpointSlices it watches. The API is client-go's fake clientset: the guest has
// no room for a real API server, which TestRunAgainstAPIServer covers on the host.
func TestIPVSRunAutoMode(t *testing.T) {
	tp := setupTopo(t)
	serve(t, tp.podA, podAIP+":8080", "a")
	serve(t, tp.podB, podBIP+":8080", "b")
	node := mkNode("n1", hostIP)
	svc := mkSvc("web", "10.96.0.50", 80, nodePort(30080))
	client := fake.NewSimpleClientset(node, svc, mkSlice("web-1", "web", 8080, readyEP(podAIP, "n1")))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := logrus.New()
	log.SetFormatter(&logrus.TextFormatter{DisableColors: true})
	go func() {
		done <- Run(ctx, client, Config{NodeName: "n1", Mode: ModeAuto, ResyncPeriod: time.Second, NetNS: "/run/netns/" + tp.host, Log: logrus.NewEntry(log)})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = NewIPVS(IPVSOptions{NetNS: "/run/netns/" + tp.host}).Cleanup()
	})
	eventually := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s\n%s", what, ipvsDump(t, tp.host))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	eventually("virtual servers for the ClusterIP and the NodePort", func() bool {
		got := ipvsServices(t, tp.host)
		return len(got["tcp 10.96.0.50:80"].dests) == 1 && len(got["tcp "+hostIP+":30080"].dests) == 1
	})
	if out, err := execOut("nsenter", "--net=/run/netns/"+tp.host, "nft", "list", "tables"); err != nil || strings.Contains(out, "table ip flotilla\n") {
		t.Fatalf("auto mode on an IPVS kernel must not program the nftables backend: %v\n%s", err, out)
	}
	if got, err := dial(t, tp.client, hostIP+":30080", 2*time.Second); err != nil || got != "a 10.244.1.1" {
		t.Fatalf("NodePort through Run: %q, %v\n%s", got, err, ipvsDump(t, tp.host))
	}
	both := mkSlice("web-1", "web", 8080, readyEP(podAIP, "n1"), readyEP(podBIP, "n1"))
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, both, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("second endpoint", func() bool { return len(ipvsServices(t, tp.host)["tcp 10.96.0.50:80"].dests) == 2 })
	if err := client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("virtual servers removed with the Service", func() bool { return len(ipvsServices(t, tp.host)) == 0 })
}
