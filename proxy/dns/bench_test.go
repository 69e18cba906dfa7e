package dns

import (
	"context"
	"fmt"
	"testing"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// BenchmarkResolve measures one lookup against caches holding 10,000 Services, half of them
// headless with 10 endpoints each.
func BenchmarkResolve(b *testing.B) {
	c := NewCaches()
	for i := range 10000 {
		ns := fmt.Sprintf("ns-%d", i%100)
		if i%2 == 0 {
			_ = c.Services.Add(svc(ns, fmt.Sprintf("s-%d", i), fmt.Sprintf("10.96.%d.%d", 1+i/250, 1+i%250), port("http", corev1.ProtocolTCP, 80)))
			continue
		}
		s := svc(ns, fmt.Sprintf("s-%d", i), "None", port("web", corev1.ProtocolTCP, 80))
		s.Spec.ClusterIPs = nil
		_ = c.Services.Add(s)
		var eps []ep
		for j := range 10 {
			eps = append(eps, ep{ip: fmt.Sprintf("10.244.%d.%d", i/25, 10*(i%25)+j), host: fmt.Sprintf("s-%d-%d", i, j)})
		}
		_ = c.EndpointSlices.Add(slice(ns, s.Name, s.Name+"-x", []discoveryv1.EndpointPort{epPort("web", 8080)}, eps...))
	}
	h := NewHandler(Config{}, c)
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"s-5000.ns-0.svc.cluster.local.", mdns.TypeA},
		{"s-5001.ns-1.svc.cluster.local.", mdns.TypeA},
		{"_web._tcp.s-5001.ns-1.svc.cluster.local.", mdns.TypeSRV},
		{"s-5001-3.s-5001.ns-1.svc.cluster.local.", mdns.TypeA},
		{"nope.ns-1.svc.cluster.local.", mdns.TypeA},
		{"1.1.96.10.in-addr.arpa.", mdns.TypePTR},
	} {
		b.Run(mdns.TypeToString[q.qtype]+"/"+q.name, func(b *testing.B) {
			req := query(q.name, q.qtype)
			if r := h.resolve(context.Background(), req, "udp"); r.Rcode == mdns.RcodeServerFailure {
				b.Fatalf("SERVFAIL for %s", q.name)
			}
			for b.Loop() {
				h.resolve(context.Background(), req, "udp")
			}
		})
	}
}
