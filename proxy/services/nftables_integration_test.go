package services

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// TestNftablesDataplane programs real nftables in a test network namespace and sends real TCP
// connections through it: ClusterIP from the host and from a pod, hairpin, NodePort and
// externalIP from an outside client with both traffic policies, rejection without endpoints,
// session affinity, incremental updates, drift repair and cleanup.
func TestNftablesDataplane(t *testing.T) {
	tp := setupTopo(t)
	serve(t, tp.podA, podAIP+":8080", "a")
	serve(t, tp.podB, podBIP+":8080", "b")
	log := logrus.NewEntry(logrus.New())
	be := NewNftables(NftablesOptions{Table: "flotilla", NetNSFd: tp.hostFd, Log: log})
	t.Cleanup(func() { _ = be.Cleanup() })
	node := mkNode("n1", hostIP)
	apply := func(t *testing.T, svcs []*v1.Service, slices ...*discoveryv1.EndpointSlice) {
		t.Helper()
		if err := be.Apply(Compile(svcs, slices, node)); err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
	want := func(t *testing.T, ns, addr, wantLine string) {
		t.Helper()
		got, err := dial(t, ns, addr, 2*time.Second)
		if err != nil || got != wantLine {
			t.Fatalf("dial %s from %s: got %q, %v; want %q\n%s", addr, ns, got, err, wantLine, inNS(t, tp.host, "nft", "list", "table", "ip", "flotilla"))
		}
	}

	oneA := mkSlice("web-1", "web", 8080, readyEP(podAIP, "n1"))
	apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, oneA)

	t.Run("ClusterIP from the host is masqueraded", func(t *testing.T) {
		want(t, tp.host, "10.96.0.50:80", "a 10.244.1.1")
	})
	t.Run("ClusterIP from a pod keeps the pod's address", func(t *testing.T) {
		want(t, tp.podB, "10.96.0.50:80", "a "+podBIP)
	})
	t.Run("hairpin: a pod reaches itself through its Service", func(t *testing.T) {
		want(t, tp.podA, "10.96.0.50:80", "a 10.244.1.1")
	})
	t.Run("unknown port of a ClusterIP is refused", func(t *testing.T) {
		start := time.Now()
		_, err := dial(t, tp.host, "10.96.0.50:81", 3*time.Second)
		if err == nil || !strings.Contains(err.Error(), "refused") || time.Since(start) > time.Second {
			t.Fatalf("got %v after %v, want connection refused at once", err, time.Since(start))
		}
	})

	t.Run("no endpoints: connection refused quickly", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080))})
		for _, c := range []struct{ ns, addr string }{{tp.host, "10.96.0.50:80"}, {tp.podB, "10.96.0.50:80"}, {tp.client, hostIP + ":30080"}} {
			start := time.Now()
			_, err := dial(t, c.ns, c.addr, 3*time.Second)
			if err == nil || !strings.Contains(err.Error(), "refused") || time.Since(start) > time.Second {
				t.Fatalf("dial %s from %s: got %v after %v, want connection refused at once", c.addr, c.ns, err, time.Since(start))
			}
		}
	})

	t.Run("NodePort, externalTrafficPolicy Cluster: answers, source masqueraded", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080), externalIP("10.213.1.100"))}, oneA)
		want(t, tp.client, hostIP+":30080", "a 10.244.1.1")
		want(t, tp.client, "10.213.1.100:80", "a 10.244.1.1")
		want(t, tp.host, hostIP+":30080", "a 10.244.1.1")
		want(t, tp.host, "10.96.0.50:80", "a 10.244.1.1")
	})

	t.Run("LoadBalancer source ranges: the address answers only them, the NodePort everyone", func(t *testing.T) {
		// As servicelb writes it: the host's own address is the load-balancer address.
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080), loadBalancer(hostIP, clientIP+"/32"))}, oneA)
		want(t, tp.client, hostIP+":80", "a 10.244.1.1")
		if got, err := dial(t, tp.podB, hostIP+":80", 700*time.Millisecond); err == nil {
			t.Fatalf("a pod outside the source ranges got %q from the load-balancer address", got)
		}
		want(t, tp.podB, hostIP+":30080", "a 10.244.1.1") // policy Cluster: masqueraded
		want(t, tp.podB, "10.96.0.50:80", "a "+podBIP)
		// Changed in place: now the pods may, the outside client may not.
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080), loadBalancer(hostIP, "10.244.0.0/16"))}, oneA)
		want(t, tp.podB, hostIP+":80", "a 10.244.1.1")
		if got, err := dial(t, tp.client, hostIP+":80", 700*time.Millisecond); err == nil {
			t.Fatalf("a client outside the source ranges got %q from the load-balancer address", got)
		}
		want(t, tp.client, hostIP+":30080", "a 10.244.1.1")
		// Without endpoints, as kube-proxy: a source in the ranges is refused at once, any other
		// gets no answer (the firewall comes first).
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080), loadBalancer(hostIP, clientIP+"/32"))})
		start := time.Now()
		if _, err := dial(t, tp.client, hostIP+":80", 3*time.Second); err == nil || !strings.Contains(err.Error(), "refused") || time.Since(start) > time.Second {
			t.Fatalf("a client in the source ranges, no endpoints: %v after %v, want connection refused at once", err, time.Since(start))
		}
		if _, err := dial(t, tp.podB, hostIP+":80", 700*time.Millisecond); err == nil || strings.Contains(err.Error(), "refused") {
			t.Fatalf("a pod outside the source ranges, no endpoints: %v, want no answer at all", err)
		}
		// Without ranges, everyone again.
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080), loadBalancer(hostIP))}, oneA)
		want(t, tp.client, hostIP+":80", "a 10.244.1.1")
	})

	t.Run("NodePort, externalTrafficPolicy Local: client address preserved", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080), etpLocal)}, oneA)
		want(t, tp.client, hostIP+":30080", "a "+clientIP)
	})

	t.Run("externalTrafficPolicy Local without a local endpoint: outside dropped, host and pods served", func(t *testing.T) {
		remote := mkSlice("web-1", "web", 8080, readyEP(podAIP, "n2"))
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080), etpLocal)}, remote)
		if got, err := dial(t, tp.client, hostIP+":30080", 700*time.Millisecond); err == nil {
			t.Fatalf("outside client got %q through a node without local endpoints", got)
		}
		want(t, tp.host, hostIP+":30080", "a 10.244.1.1")
		want(t, tp.podB, hostIP+":30080", "a "+podBIP)
		want(t, tp.podB, "10.96.0.50:80", "a "+podBIP)
	})

	t.Run("internalTrafficPolicy Local without a local endpoint drops ClusterIP traffic", func(t *testing.T) {
		remote := mkSlice("web-1", "web", 8080, readyEP(podAIP, "n2"))
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, itpLocal)}, remote)
		if got, err := dial(t, tp.podB, "10.96.0.50:80", 700*time.Millisecond); err == nil {
			t.Fatalf("got %q, want no answer", got)
		}
	})

	both := mkSlice("web-1", "web", 8080, readyEP(podAIP, "n1"), readyEP(podBIP, "n1"))
	t.Run("two endpoints: both receive connections", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, both)
		seen := map[string]bool{}
		for i := 0; i < 60 && len(seen) < 2; i++ {
			got, err := dial(t, tp.host, "10.96.0.50:80", 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			seen[strings.Fields(got)[0]] = true
		}
		if len(seen) != 2 {
			t.Fatalf("60 connections reached only %v", seen)
		}
	})

	t.Run("sessionAffinity ClientIP keeps one backend of two", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, affinity(60))}, both)
		for _, ns := range []string{tp.host, tp.podA, tp.podB} {
			first := ""
			for i := 0; i < 30; i++ {
				got, err := dial(t, ns, "10.96.0.50:80", 2*time.Second)
				if err != nil {
					t.Fatalf("from %s: %v", ns, err)
				}
				b := strings.Fields(got)[0]
				if first == "" {
					first = b
				} else if b != first {
					t.Fatalf("from %s: connection %d went to %s after %s", ns, i, b, first)
				}
			}
		}
		t.Logf("ruleset with affinity:\n%s", inNS(t, tp.host, "nft", "list", "table", "ip", "flotilla"))
		// Turning affinity off spreads connections again (the sets and endpoint chains go).
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, both)
		out := inNS(t, tp.host, "nft", "list", "table", "ip", "flotilla")
		if strings.Contains(out, "aff-") || strings.Contains(out, "chain ep-") {
			t.Fatalf("affinity objects left behind:\n%s", out)
		}
	})

	t.Run("incremental update moves traffic to the new endpoint", func(t *testing.T) {
		onlyB := mkSlice("web-1", "web", 8080, readyEP(podBIP, "n1"))
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80), mkSvc("other", "10.96.0.51", 80)}, onlyB, mkSlice("other-1", "other", 8080, readyEP(podAIP, "n1")))
		want(t, tp.host, "10.96.0.50:80", "b 10.244.1.1")
		want(t, tp.host, "10.96.0.51:80", "a 10.244.1.1")
	})

	t.Run("UDP ClusterIP", func(t *testing.T) {
		serveUDP(t, tp.podA, podAIP+":5353", "a")
		dns := mkSvc("dns", "10.96.0.53", 53)
		dns.Spec.Ports[0].Protocol = v1.ProtocolUDP
		sl := mkSlice("dns-1", "dns", 5353, readyEP(podAIP, "n1"))
		sl.Ports[0].Protocol = ptr.To(v1.ProtocolUDP)
		apply(t, []*v1.Service{dns}, sl)
		if got, err := askUDP(t, tp.podB, "10.96.0.53:53", 2*time.Second); err != nil || got != "a "+podBIP {
			t.Fatalf("got %q, %v", got, err)
		}
		// The TCP port of the same address is not served: refused, not leaked.
		if _, err := dial(t, tp.host, "10.96.0.53:53", 2*time.Second); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("TCP to a UDP-only Service port: %v", err)
		}
	})

	t.Run("deleted table is restored by Resync", func(t *testing.T) {
		inNS(t, tp.host, "nft", "delete", "table", "ip", "flotilla")
		if _, err := dial(t, tp.host, "10.96.0.51:80", 500*time.Millisecond); err == nil {
			t.Fatal("Service still answers without our table")
		}
		ds := Compile([]*v1.Service{mkSvc("web", "10.96.0.50", 80), mkSvc("other", "10.96.0.51", 80)},
			[]*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080, readyEP(podBIP, "n1")), mkSlice("other-1", "other", 8080, readyEP(podAIP, "n1"))}, node)
		if err := be.Resync(ds); err != nil {
			t.Fatal(err)
		}
		want(t, tp.host, "10.96.0.51:80", "a 10.244.1.1")
	})

	t.Run("flushed services chain is restored by Resync", func(t *testing.T) {
		inNS(t, tp.host, "nft", "flush", "chain", "ip", "flotilla", "services")
		if _, err := dial(t, tp.host, "10.96.0.51:80", 500*time.Millisecond); err == nil {
			t.Fatal("Service still answers with its dispatch chain flushed")
		}
		ds := Compile([]*v1.Service{mkSvc("web", "10.96.0.50", 80), mkSvc("other", "10.96.0.51", 80)},
			[]*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080, readyEP(podBIP, "n1")), mkSlice("other-1", "other", 8080, readyEP(podAIP, "n1"))}, node)
		if err := be.Resync(ds); err != nil {
			t.Fatal(err)
		}
		want(t, tp.host, "10.96.0.51:80", "a 10.244.1.1")
	})

	t.Run("Cleanup removes the table", func(t *testing.T) {
		if err := be.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if out := inNS(t, tp.host, "nft", "list", "tables"); strings.Contains(out, "flotilla") {
			t.Fatalf("table left: %s", out)
		}
	})
}

// TestNftablesFlatPath sends real connections through ClusterIP Services on the flat path
// (no session affinity, a few endpoints: set and map elements, no per-Service chain): new
// connections spread over every endpoint, an endpoint change moves them at once, sources
// outside the pod CIDR are masqueraded and pods keep theirs, and a Service moving to the chain
// path (session affinity) and back keeps answering.
func TestNftablesFlatPath(t *testing.T) {
	tp := setupTopo(t)
	serve(t, tp.podA, podAIP+":8080", "a")
	serve(t, tp.podA, podAIP+":8081", "a2")
	serve(t, tp.podB, podBIP+":8080", "b")
	be := NewNftables(NftablesOptions{Table: "flotilla", NetNSFd: tp.hostFd, Log: logrus.NewEntry(logrus.New())})
	t.Cleanup(func() { _ = be.Cleanup() })
	node := mkNode("n1", hostIP)
	apply := func(t *testing.T, svc *v1.Service, eps ...ep) {
		t.Helper()
		var ports []*discoveryv1.EndpointSlice
		// One slice per target port: a2 listens on 8081.
		byPort := map[int32][]ep{}
		for _, e := range eps {
			port := int32(8080)
			if e.ip == "a2" {
				port, e.ip = 8081, podAIP
			}
			byPort[port] = append(byPort[port], e)
		}
		for port, es := range byPort {
			ports = append(ports, mkSlice(fmt.Sprintf("web-%d", port), "web", port, es...))
		}
		if err := be.Apply(Compile([]*v1.Service{svc}, ports, node)); err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
	// spread dials addr from ns until every endpoint of want answered (at most 40 connections
	// per endpoint: missing one of three by chance has a probability below 1e-7) and checks
	// that no other answered and that each saw the expected source address (by endpoint).
	spread := func(t *testing.T, ns string, want map[string]string) {
		t.Helper()
		seen := map[string]bool{}
		for i := 0; i < 40*len(want) && len(seen) < len(want); i++ {
			got, err := dial(t, ns, "10.96.0.60:80", 2*time.Second)
			if err != nil {
				t.Fatalf("dial from %s: %v\n%s", ns, err, inNS(t, tp.host, "nft", "list", "table", "ip", "flotilla"))
			}
			f := strings.Fields(got)
			src, ok := want[f[0]]
			if !ok || f[1] != src {
				t.Fatalf("from %s: %q answered, want one of %v (endpoint: source)", ns, got, want)
			}
			seen[f[0]] = true
		}
		if len(seen) != len(want) {
			t.Fatalf("from %s: %d connections reached only %v of %v", ns, 40*len(want), seen, want)
		}
	}
	web := mkSvc("web", "10.96.0.60", 80)
	const masq = "10.244.1.1" // the host's address towards the pods

	apply(t, web, readyEP(podAIP, "n1"), readyEP("a2", "n1"), readyEP(podBIP, "n1"))
	t.Run("served by the flat maps, not a chain", func(t *testing.T) {
		out := inNS(t, tp.host, "nft", "list", "table", "ip", "flotilla")
		if !strings.Contains(out, "10.96.0.60 . tcp . 80") || strings.Contains(out, "chain svc-") {
			t.Fatalf("want the frontend in the flat maps and no svc chain:\n%s", out)
		}
	})
	t.Run("three endpoints: the host's connections reach all, masqueraded", func(t *testing.T) {
		spread(t, tp.host, map[string]string{"a": masq, "a2": masq, "b": masq})
	})
	t.Run("from outside the pod CIDR: masqueraded", func(t *testing.T) {
		spread(t, tp.client, map[string]string{"a": masq, "a2": masq, "b": masq})
	})
	t.Run("from a pod: its address is kept, except towards itself (hairpin)", func(t *testing.T) {
		spread(t, tp.podB, map[string]string{"a": podBIP, "a2": podBIP, "b": masq})
	})
	t.Run("one endpoint left: every connection goes to it", func(t *testing.T) {
		apply(t, web, readyEP(podBIP, "n1"))
		for i := 0; i < 10; i++ {
			if got, err := dial(t, tp.podA, "10.96.0.60:80", 2*time.Second); err != nil || got != "b "+podAIP {
				t.Fatalf("connection %d: got %q, %v; want %q", i, got, err, "b "+podAIP)
			}
		}
	})
	t.Run("two endpoints: connections spread over those two only", func(t *testing.T) {
		apply(t, web, readyEP("a2", "n1"), readyEP(podBIP, "n1"))
		spread(t, tp.host, map[string]string{"a2": masq, "b": masq})
	})
	t.Run("to session affinity (chain path) and back", func(t *testing.T) {
		apply(t, mkSvc("web", "10.96.0.60", 80, affinity(60)), readyEP(podAIP, "n1"), readyEP(podBIP, "n1"))
		first, err := dial(t, tp.host, "10.96.0.60:80", 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ {
			if got, err := dial(t, tp.host, "10.96.0.60:80", 2*time.Second); err != nil || got != first {
				t.Fatalf("with affinity, connection %d: got %q, %v; want %q", i, got, err, first)
			}
		}
		apply(t, web, readyEP(podAIP, "n1"), readyEP(podBIP, "n1"))
		if out := inNS(t, tp.host, "nft", "list", "table", "ip", "flotilla"); strings.Contains(out, "chain svc-") || strings.Contains(out, "aff-") {
			t.Fatalf("chain path left behind:\n%s", out)
		}
		spread(t, tp.host, map[string]string{"a": masq, "b": masq})
	})
}
