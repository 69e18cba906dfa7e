package services

import (
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// conformanceBackend is one dataplane backend under the shared conformance table, with the
// backend-specific ways to look at and damage its kernel state.
type conformanceBackend struct {
	be interface {
		Backend
		Resyncer
	}
	// dump shows the kernel state in failure messages.
	dump func(t *testing.T) string
	// sabotage removes the backend's kernel state behind its back (someone ran nft delete
	// table / ipvsadm -C).
	sabotage func(t *testing.T)
	// leftovers describes what Cleanup left behind, "" when nothing.
	leftovers func(t *testing.T) string
}

// runConformance holds a backend to the behaviour every backend shares: the cases of
// TestNftablesDataplane that do not depend on how the rules are written. Backend-specific
// behaviour (nftables answering host and pods under externalTrafficPolicy Local without a local
// endpoint, IPVS schedulers and draining) stays in each backend's own tests.
func runConformance(t *testing.T, tp *topo, cb conformanceBackend) {
	serve(t, tp.podA, podAIP+":8080", "a")
	serve(t, tp.podB, podBIP+":8080", "b")
	node := mkNode("n1", hostIP)
	apply := func(t *testing.T, svcs []*v1.Service, slices ...*discoveryv1.EndpointSlice) {
		t.Helper()
		if err := cb.be.Apply(Compile(svcs, slices, node)); err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
	want := func(t *testing.T, ns, addr, wantLine string) {
		t.Helper()
		got, err := dial(t, ns, addr, 2*time.Second)
		if err != nil || got != wantLine {
			t.Fatalf("dial %s from %s: got %q, %v; want %q\n%s", addr, ns, got, err, wantLine, cb.dump(t))
		}
	}
	refused := func(t *testing.T, ns, addr string) {
		t.Helper()
		start := time.Now()
		_, err := dial(t, ns, addr, 3*time.Second)
		if err == nil || !strings.Contains(err.Error(), "refused") || time.Since(start) > time.Second {
			t.Fatalf("dial %s from %s: got %v after %v, want connection refused at once\n%s", addr, ns, err, time.Since(start), cb.dump(t))
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
		refused(t, tp.host, "10.96.0.50:81")
	})
	t.Run("no endpoints: connection refused quickly", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080))})
		refused(t, tp.host, "10.96.0.50:80")
		refused(t, tp.podB, "10.96.0.50:80")
		refused(t, tp.client, hostIP+":30080")
	})
	t.Run("NodePort and externalIP, externalTrafficPolicy Cluster: answers, source masqueraded", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080), externalIP("10.213.1.100"))}, oneA)
		want(t, tp.client, hostIP+":30080", "a 10.244.1.1")
		want(t, tp.client, "10.213.1.100:80", "a 10.244.1.1")
		want(t, tp.host, hostIP+":30080", "a 10.244.1.1")
		want(t, tp.host, "10.96.0.50:80", "a 10.244.1.1")
	})
	t.Run("NodePort, externalTrafficPolicy Local: client address preserved", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, nodePort(30080), etpLocal)}, oneA)
		want(t, tp.client, hostIP+":30080", "a "+clientIP)
	})
	t.Run("internalTrafficPolicy Local without a local endpoint: no answer", func(t *testing.T) {
		remote := mkSlice("web-1", "web", 8080, readyEP(podAIP, "n2"))
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, itpLocal)}, remote)
		if got, err := dial(t, tp.podB, "10.96.0.50:80", 700*time.Millisecond); err == nil {
			t.Fatalf("got %q, want no answer", got)
		}
	})

	both := mkSlice("web-1", "web", 8080, readyEP(podAIP, "n1"), readyEP(podBIP, "n1"))
	t.Run("two endpoints: both receive connections", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80)}, both)
		seen := map[string]int{}
		for i := 0; i < 40; i++ {
			got, err := dial(t, tp.host, "10.96.0.50:80", 2*time.Second)
			if err != nil {
				t.Fatalf("%v\n%s", err, cb.dump(t))
			}
			seen[strings.Fields(got)[0]]++
		}
		if seen["a"] < 4 || seen["b"] < 4 {
			t.Fatalf("40 connections split %v, want both backends used\n%s", seen, cb.dump(t))
		}
	})
	t.Run("sessionAffinity ClientIP keeps one backend of two", func(t *testing.T) {
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80, affinity(60))}, both)
		for _, ns := range []string{tp.host, tp.podA, tp.podB} {
			first := ""
			for i := 0; i < 20; i++ {
				got, err := dial(t, ns, "10.96.0.50:80", 2*time.Second)
				if err != nil {
					t.Fatalf("from %s: %v\n%s", ns, err, cb.dump(t))
				}
				b := strings.Fields(got)[0]
				if first == "" {
					first = b
				} else if b != first {
					t.Fatalf("from %s: connection %d went to %s after %s\n%s", ns, i, b, first, cb.dump(t))
				}
			}
		}
	})
	t.Run("incremental update moves traffic to the new endpoint", func(t *testing.T) {
		onlyB := mkSlice("web-1", "web", 8080, readyEP(podBIP, "n1"))
		apply(t, []*v1.Service{mkSvc("web", "10.96.0.50", 80), mkSvc("other", "10.96.0.51", 80)}, onlyB, mkSlice("other-1", "other", 8080, readyEP(podAIP, "n1")))
		// A backend that drains removed servers may still send a connection or two to a
		// (in the test: still listening) old endpoint; the new one must take over at once.
		want(t, tp.host, "10.96.0.51:80", "a 10.244.1.1")
		for i := 0; i < 5; i++ {
			want(t, tp.host, "10.96.0.50:80", "b 10.244.1.1")
		}
	})
	t.Run("UDP ClusterIP", func(t *testing.T) {
		serveUDP(t, tp.podA, podAIP+":5353", "a")
		dns := mkSvc("dns", "10.96.0.53", 53)
		dns.Spec.Ports[0].Protocol = v1.ProtocolUDP
		sl := mkSlice("dns-1", "dns", 5353, readyEP(podAIP, "n1"))
		sl.Ports[0].Protocol = ptr.To(v1.ProtocolUDP)
		apply(t, []*v1.Service{dns}, sl)
		if got, err := askUDP(t, tp.podB, "10.96.0.53:53", 2*time.Second); err != nil || got != "a "+podBIP {
			t.Fatalf("got %q, %v\n%s", got, err, cb.dump(t))
		}
		if _, err := dial(t, tp.host, "10.96.0.53:53", 2*time.Second); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("TCP to a UDP-only Service port: %v", err)
		}
	})
	t.Run("state deleted behind the backend's back is restored by Resync", func(t *testing.T) {
		svcs := []*v1.Service{mkSvc("web", "10.96.0.50", 80), mkSvc("other", "10.96.0.51", 80)}
		slices := []*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080, readyEP(podBIP, "n1")), mkSlice("other-1", "other", 8080, readyEP(podAIP, "n1"))}
		apply(t, svcs, slices...)
		want(t, tp.host, "10.96.0.51:80", "a 10.244.1.1")
		cb.sabotage(t)
		if got, err := dial(t, tp.host, "10.96.0.51:80", 500*time.Millisecond); err == nil {
			t.Fatalf("Service still answers (%q) after its state was deleted", got)
		}
		if err := cb.be.Resync(Compile(svcs, slices, node)); err != nil {
			t.Fatal(err)
		}
		want(t, tp.host, "10.96.0.51:80", "a 10.244.1.1")
	})
	t.Run("Cleanup removes everything", func(t *testing.T) {
		if err := cb.be.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if left := cb.leftovers(t); left != "" {
			t.Fatalf("left behind: %s", left)
		}
	})
}

// TestNftablesConformance runs the shared conformance table against the nftables backend (the
// IPVS backend runs it inside the ipvsvm virtual machine: TestIPVSConformance).
func TestNftablesConformance(t *testing.T) {
	tp := setupTopo(t)
	be := NewNftables(NftablesOptions{Table: "flotilla", NetNSFd: tp.hostFd, Log: logrus.NewEntry(logrus.New())})
	t.Cleanup(func() { _ = be.Cleanup() })
	runConformance(t, tp, conformanceBackend{
		be:       be,
		dump:     func(t *testing.T) string { return inNS(t, tp.host, "nft", "list", "table", "ip", "flotilla") },
		sabotage: func(t *testing.T) { inNS(t, tp.host, "nft", "delete", "table", "ip", "flotilla") },
		leftovers: func(t *testing.T) string {
			if out := inNS(t, tp.host, "nft", "list", "tables"); strings.Contains(out, "flotilla") {
				return out
			}
			return ""
		},
	})
}
