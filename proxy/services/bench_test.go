package services

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// benchObjects makes n ClusterIP Services with eps ready endpoints each (10.96.x.y ->
// 10.244.0.0 upwards, every address distinct and valid, so every Service has all its endpoints).
func benchObjects(n, eps int) ([]*v1.Service, []*discoveryv1.EndpointSlice) {
	svcs := make([]*v1.Service, 0, n)
	slices := make([]*discoveryv1.EndpointSlice, 0, n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%05d", i)
		svcs = append(svcs, mkSvc(name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), 80))
		var es []ep
		for j := 0; j < eps; j++ {
			k := i*eps + j
			es = append(es, readyEP(fmt.Sprintf("10.%d.%d.%d", 244+k>>16, (k>>8)&255, k&255), "n1"))
		}
		slices = append(slices, mkSlice(name+"-1", name, 8080, es...))
	}
	return svcs, slices
}

// benchCaches holds the objects in informer caches, so that a sync lists them as the agent's
// loop does (desiredFrom).
type benchCaches struct {
	svcs, eps, nodes cache.Indexer
}

func newBenchCaches(b *testing.B, svcs []*v1.Service, slices []*discoveryv1.EndpointSlice, node *v1.Node) *benchCaches {
	c := &benchCaches{
		svcs:  cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		eps:   cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		nodes: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
	}
	for _, s := range svcs {
		if err := c.svcs.Add(s); err != nil {
			b.Fatal(err)
		}
	}
	for _, s := range slices {
		if err := c.eps.Add(s); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.nodes.Add(node); err != nil {
		b.Fatal(err)
	}
	return c
}

func (c *benchCaches) desired(b *testing.B, comp *Compiler, node string) DesiredState {
	ds, err := desiredFrom(comp, corelisters.NewServiceLister(c.svcs), discoverylisters.NewEndpointSliceLister(c.eps), corelisters.NewNodeLister(c.nodes), node)
	if err != nil {
		b.Fatal(err)
	}
	return ds
}

// syncer is the agent's sync loop over the caches, its change index filled as the informers'
// handlers fill it.
func (c *benchCaches) syncer(be syncBackend, node string) *syncer {
	sy := &syncer{backend: be, compiler: &Compiler{}, svcs: corelisters.NewServiceLister(c.svcs),
		eps: discoverylisters.NewEndpointSliceLister(c.eps), nodes: corelisters.NewNodeLister(c.nodes), nodeName: node, changes: newChanges(func() {})}
	for _, s := range c.eps.List() {
		sy.changes.slice(nil, s)
	}
	sy.changes.take()
	return sy
}

// oneChange returns the i-th version of the changed EndpointSlice: the middle Service's
// endpoints alternate between two others and its original ones.
func oneChange(slices []*discoveryv1.EndpointSlice, n, i int) *discoveryv1.EndpointSlice {
	orig := slices[n/2]
	if i%2 == 1 {
		return orig
	}
	return mkSlice(orig.Name, orig.Labels[discoveryv1.LabelServiceName], 8080, readyEP("10.250.0.1", "n1"), readyEP("10.250.0.2", "n1"))
}

// BenchmarkNftablesSync measures, inside a test network namespace, for 1,000 and 10,000
// Services x 10 endpoints, what the agent does:
//
//   - full: a start (new Compiler and backend): list the informer caches, compile, render and
//     rebuild the table in one transaction (the table of the previous round is replaced, as
//     after a restart). Reported as ms/full-sync.
//
//   - one-change: one EndpointSlice changes in the cache and its event is recorded as the
//     informer's handler does, then the agent's sync (syncer): compile the changed Service,
//     render and send only what changed. Reported as ms/one-change.
//
//     go test -run '^$' -bench NftablesSync -benchtime 3x ./proxy/services/
func BenchmarkNftablesSync(b *testing.B) {
	requireNetAdmin(b)
	ns := "flt-s" + randSuffix() + "bench"
	newNetns(b, ns)
	f, err := os.Open("/run/netns/" + ns)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	log := logrus.NewEntry(logrus.New())
	node := mkNode("n1", "10.213.0.1")
	for _, n := range []int{1000, 10000} {
		svcs, slices := benchObjects(n, 10)
		caches := newBenchCaches(b, svcs, slices, node)
		b.Run(fmt.Sprintf("services=%d/full", n), func(b *testing.B) {
			b.Cleanup(func() { _ = NewNftables(NftablesOptions{NetNSFd: int(f.Fd()), Log: log}).Cleanup() })
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				be := NewNftables(NftablesOptions{NetNSFd: int(f.Fd()), Log: log})
				if err := be.Apply(caches.desired(b, &Compiler{}, node.Name)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				be.release()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/full-sync")
		})
		b.Run(fmt.Sprintf("services=%d/one-change", n), func(b *testing.B) {
			be := NewNftables(NftablesOptions{NetNSFd: int(f.Fd()), Log: log})
			b.Cleanup(func() { _ = be.Cleanup() })
			sy := caches.syncer(be, node.Name)
			if _, _, err := sy.sync(false); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cur := oneChange(slices, n, i)
				old, _, _ := caches.eps.Get(cur)
				if err := caches.eps.Update(cur); err != nil {
					b.Fatal(err)
				}
				sy.changes.slice(old, cur)
				if _, _, err := sy.sync(false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/one-change")
			b.StopTimer()
			if err := caches.eps.Update(slices[n/2]); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkIPVSCompile measures the IPVS backend's computation for 1,000 and 10,000 Services x
// 10 endpoints, without the kernel (this machine's kernel may have no ip_vs): list the caches,
// compile, compile the virtual servers and the companion table's content.
//
//   - full: a start, new Compiler and IPVSCompiler. Reported as ms/full-sync.
//
//   - one-change: one EndpointSlice changes and its event is recorded, then what the IPVS
//     backend's ApplyChanged computes, with the compilers of the previous round as the agent's
//     loop keeps them: the changed Service's ports, their virtual servers, and the companion
//     table's element changes. Reported as ms/one-change.
//
//     go test -run '^$' -bench IPVSCompile -benchtime 3x ./proxy/services/
func BenchmarkIPVSCompile(b *testing.B) {
	node := mkNode("n1", "10.213.0.1")
	serviceCIDR, clusterCIDR := netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("10.244.0.0/16")
	for _, n := range []int{1000, 10000} {
		svcs, slices := benchObjects(n, 10)
		caches := newBenchCaches(b, svcs, slices, node)
		b.Run(fmt.Sprintf("services=%d/full", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				ic := IPVSCompiler{serviceCIDR: serviceCIDR}
				_ = ic.Compile(caches.desired(b, &Compiler{}, node.Name))
				_ = ic.nftState(clusterCIDR)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/full-sync")
		})
		b.Run(fmt.Sprintf("services=%d/one-change", n), func(b *testing.B) {
			sy, ic := caches.syncer(nil, node.Name), &IPVSCompiler{serviceCIDR: serviceCIDR}
			_ = ic.Compile(caches.desired(b, sy.compiler, node.Name))
			_ = ic.nftState(clusterCIDR)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cur := oneChange(slices, n, i)
				old, _, _ := caches.eps.Get(cur)
				if err := caches.eps.Update(cur); err != nil {
					b.Fatal(err)
				}
				sy.changes.slice(old, cur)
				ds, keys, ok := sy.compiler.compileChanged(sy.changes.take(), sy.get, sy.node())
				if !ok {
					b.Fatal("compileChanged refused")
				}
				if ch, ok := ic.CompileChanged(ds, keys); !ok || len(ch.Sync) != 1 {
					b.Fatalf("CompileChanged: ok %v, %d virtual servers to sync, want 1", ok, len(ch.Sync))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/one-change")
			b.StopTimer()
			if err := caches.eps.Update(slices[n/2]); err != nil {
				b.Fatal(err)
			}
		})
	}
}
