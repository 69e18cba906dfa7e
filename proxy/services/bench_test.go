package services

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// benchObjects makes n ClusterIP Services with eps ready endpoints each (10.96.x.y -> 10.244.x.y).
func benchObjects(n, eps int) ([]*v1.Service, []*discoveryv1.EndpointSlice) {
	svcs := make([]*v1.Service, 0, n)
	slices := make([]*discoveryv1.EndpointSlice, 0, n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%05d", i)
		svcs = append(svcs, mkSvc(name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), 80))
		var es []ep
		for j := 0; j < eps; j++ {
			k := i*eps + j
			es = append(es, readyEP(fmt.Sprintf("10.244.%d.%d", k/250, k%250+1), "n1"))
		}
		slices = append(slices, mkSlice(name+"-1", name, 8080, es...))
	}
	return svcs, slices
}

// BenchmarkNftablesSync measures, inside a test network namespace, a full sync (compile +
// one-transaction table rebuild) and a single-Service update (compile everything, diff, apply
// the one changed chain) for 1,000 and 10,000 Services x 10 endpoints.
//
//	go test -run '^$' -bench NftablesSync -benchtime 3x ./proxy/services/
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
		b.Run(fmt.Sprintf("services=%d/full", n), func(b *testing.B) {
			be := NewNftables(NftablesOptions{NetNSFd: int(f.Fd()), Log: log})
			b.Cleanup(func() { _ = be.Cleanup() })
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				be.applied = nil // force the full rebuild every time
				if err := be.Apply(Compile(svcs, slices, node)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/full-sync")
		})
		b.Run(fmt.Sprintf("services=%d/update-one", n), func(b *testing.B) {
			be := NewNftables(NftablesOptions{NetNSFd: int(f.Fd()), Log: log})
			b.Cleanup(func() { _ = be.Cleanup() })
			if err := be.Apply(Compile(svcs, slices, node)); err != nil {
				b.Fatal(err)
			}
			orig := slices[n/2]
			moved := mkSlice(orig.Name, orig.Labels[discoveryv1.LabelServiceName], 8080, readyEP("10.244.250.1", "n1"), readyEP("10.244.250.2", "n1"))
			cur := make([]*discoveryv1.EndpointSlice, len(slices))
			copy(cur, slices)
			b.ResetTimer()
			var applyOnly time.Duration
			for i := 0; i < b.N; i++ {
				if i%2 == 0 {
					cur[n/2] = moved
				} else {
					cur[n/2] = orig
				}
				ds := Compile(svcs, cur, node)
				start := time.Now()
				if err := be.Apply(ds); err != nil {
					b.Fatal(err)
				}
				applyOnly += time.Since(start)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/update")
			b.ReportMetric(float64(applyOnly.Microseconds())/1000/float64(b.N), "ms/update-apply")
		})
	}
}
