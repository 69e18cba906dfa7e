package dns

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func svc(ns, name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: clusterIP, Ports: ports}}
	if clusterIP != "" {
		s.Spec.ClusterIPs = []string{clusterIP}
	}
	return s
}

func port(name string, proto corev1.Protocol, p int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: proto, Port: p}
}

type ep struct {
	ip, host string
	ready    *bool
}

func slice(ns, svcName, name string, ports []discoveryv1.EndpointPort, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: ports,
	}
	if strings.Contains(eps[0].ip, ":") {
		s.AddressType = discoveryv1.AddressTypeIPv6
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.host != "" {
			x.Hostname = ptr.To(e.host)
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

func epPort(name string, p int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(p), Protocol: ptr.To(corev1.ProtocolTCP)}
}

func pod(ns, name, ip, hostname, subdomain string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:   corev1.PodSpec{Hostname: hostname, Subdomain: subdomain},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	return p
}

// fixtureCaches holds examples of the Kubernetes DNS documentation (a multi-port Service, an
// ExternalName Service, a headless Service with hostname/subdomain pods, Services and pods in
// two namespaces) plus a StatefulSet-style headless Service.
func fixtureCaches(t *testing.T) Caches {
	t.Helper()
	c := NewCaches()
	headless := func(s *corev1.Service) *corev1.Service { s.Spec.ClusterIPs = nil; return s }
	pnr := headless(svc("default", "pnr", "None", port("web", corev1.ProtocolTCP, 80)))
	pnr.Spec.PublishNotReadyAddresses = true
	dual := svc("default", "dual", "10.96.0.60")
	dual.Spec.ClusterIPs = []string{"10.96.0.60", "fd00:10:96::60"}
	ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "my-service"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "my.database.example.com"}}
	alias := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "alias"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "my-service.default.svc.cluster.local"}}
	for _, o := range []any{
		svc("default", "my-service", "10.96.0.50", port("http", corev1.ProtocolTCP, 80), port("https", corev1.ProtocolTCP, 443)),
		svc("default", "unnamed", "10.96.0.51", port("", corev1.ProtocolTCP, 80)),
		svc("default", "pending", ""),
		svc("prod", "data", "10.96.0.70", port("dns", corev1.ProtocolUDP, 53)),
		headless(svc("default", "nginx", "None", port("web", corev1.ProtocolTCP, 80))),
		headless(svc("my-namespace", "busybox-subdomain", "None", port("foo", corev1.ProtocolTCP, 1234))),
		headless(svc("default", "empty", "None", port("web", corev1.ProtocolTCP, 80))),
		pnr, dual, ext, alias,
	} {
		if err := c.Services.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	web := []discoveryv1.EndpointPort{epPort("web", 8080)}
	for _, o := range []any{
		slice("default", "nginx", "nginx-a", web, ep{"10.244.2.10", "web-0", ptr.To(true)}, ep{"10.244.2.11", "web-1", nil},
			ep{"10.244.2.12", "web-2", ptr.To(false)}),
		// The same endpoint in a second slice: published once.
		slice("default", "nginx", "nginx-b", web, ep{"10.244.2.10", "web-0", ptr.To(true)}),
		slice("default", "pnr", "pnr-a", web, ep{"10.244.3.5", "", ptr.To(false)}),
		// The EndpointSlice controller publishes busybox-1's hostname; busybox-2 is found from
		// its pod only.
		slice("my-namespace", "busybox-subdomain", "bb", []discoveryv1.EndpointPort{epPort("foo", 1234)},
			ep{"10.244.1.11", "busybox-1", ptr.To(true)}, ep{"10.244.1.12", "", ptr.To(true)}),
		slice("default", "my-service", "ms", []discoveryv1.EndpointPort{epPort("http", 9376)}, ep{"10.244.4.4", "", ptr.To(true)}),
	} {
		if err := c.EndpointSlices.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []any{
		pod("my-namespace", "busybox1", "10.244.1.11", "busybox-1", "busybox-subdomain", true),
		pod("my-namespace", "busybox2", "10.244.1.12", "busybox-2", "busybox-subdomain", true),
		pod("my-namespace", "busybox3", "10.244.1.13", "busybox-3", "busybox-subdomain", false), // not ready
		pod("my-namespace", "busybox4", "10.244.1.14", "", "busybox-subdomain", true),           // hostname defaults to the name
		pod("default", "plain", "172.17.0.3", "", "", true),
		pod("default", "v6", "fd00:10:244::5", "", "", true),
		pod("default", "sub-of-clusterip", "10.244.5.5", "x", "my-service", true), // not headless: no record
	} {
		if err := c.Pods.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// summary renders a reply as comparable strings: "RCODE", then answers and, after "|", extras.
// Records owned by the query name omit it; TTLs are checked separately.
func summary(t *testing.T, qname string, m *mdns.Msg) []string {
	t.Helper()
	out := []string{mdns.RcodeToString[m.Rcode]}
	render := func(rrs []mdns.RR) []string {
		var s []string
		for _, rr := range rrs {
			if rr.Header().Ttl < 5 || rr.Header().Ttl > 30 {
				t.Errorf("%s: TTL %d outside 5-30s", rr, rr.Header().Ttl)
			}
			f := strings.Fields(rr.String())
			line := strings.Join(f[3:], " ")
			if !strings.EqualFold(f[0], qname) {
				line = f[0] + " " + line
			}
			s = append(s, line)
		}
		slices.Sort(s)
		return s
	}
	out = append(out, render(m.Answer)...)
	if len(m.Extra) > 0 {
		out = append(out, "|")
		out = append(out, render(m.Extra)...)
	}
	return out
}

func query(name string, t uint16) *mdns.Msg {
	m := new(mdns.Msg)
	m.SetQuestion(name, t)
	return m
}

func TestHandlerClusterRecords(t *testing.T) {
	h := NewHandler(Config{ListenIP: net.ParseIP("10.96.0.10")}, fixtureCaches(t))
	const z = "svc.cluster.local."
	cases := []struct {
		name  string
		qtype uint16
		want  []string
	}{
		// A normal Service's A record is its ClusterIP; case does not matter.
		{"my-service.default." + z, mdns.TypeA, []string{"NOERROR", "A 10.96.0.50"}},
		{"My-Service.Default.SVC.cluster.local.", mdns.TypeA, []string{"NOERROR", "A 10.96.0.50"}},
		{"my-service.default." + z, mdns.TypeAAAA, []string{"NOERROR"}}, // NODATA, not NXDOMAIN
		// Names are per namespace: data exists in prod only.
		{"data.prod." + z, mdns.TypeA, []string{"NOERROR", "A 10.96.0.70"}},
		{"data.test." + z, mdns.TypeA, []string{"NXDOMAIN"}},
		// A dual-stack Service has one record per IP family.
		{"dual.default." + z, mdns.TypeA, []string{"NOERROR", "A 10.96.0.60"}},
		{"dual.default." + z, mdns.TypeAAAA, []string{"NOERROR", "AAAA fd00:10:96::60"}},
		{"pending.default." + z, mdns.TypeA, []string{"NOERROR"}},
		// SRV of a named port of a normal Service points at the Service.
		{"_http._tcp.my-service.default." + z, mdns.TypeSRV,
			[]string{"NOERROR", "SRV 0 100 80 my-service.default.svc.cluster.local.", "|", "my-service.default.svc.cluster.local. A 10.96.0.50"}},
		{"_https._tcp.my-service.default." + z, mdns.TypeSRV,
			[]string{"NOERROR", "SRV 0 100 443 my-service.default.svc.cluster.local.", "|", "my-service.default.svc.cluster.local. A 10.96.0.50"}},
		{"_http._udp.my-service.default." + z, mdns.TypeSRV, []string{"NXDOMAIN"}},
		{"_dns._udp.data.prod." + z, mdns.TypeSRV, []string{"NOERROR", "SRV 0 100 53 data.prod.svc.cluster.local.", "|", "data.prod.svc.cluster.local. A 10.96.0.70"}},
		{"_tcp.my-service.default." + z, mdns.TypeSRV, []string{"NOERROR"}}, // empty non-terminal
		{"my-service.default." + z, mdns.TypeSRV, []string{"NOERROR", "SRV 0 50 443 my-service.default.svc.cluster.local.",
			"SRV 0 50 80 my-service.default.svc.cluster.local.", "|", "A 10.96.0.50"}},
		{"unnamed.default." + z, mdns.TypeSRV, []string{"NOERROR"}}, // SRV only for named ports
		// Endpoint names exist only under headless Services.
		{"10-244-4-4.my-service.default." + z, mdns.TypeA, []string{"NXDOMAIN"}},
		// Headless -> ready endpoints, each once; nil ready counts as ready.
		{"nginx.default." + z, mdns.TypeA, []string{"NOERROR", "A 10.244.2.10", "A 10.244.2.11"}},
		{"empty.default." + z, mdns.TypeA, []string{"NOERROR"}},
		// publishNotReadyAddresses publishes not-ready endpoints.
		{"pnr.default." + z, mdns.TypeA, []string{"NOERROR", "A 10.244.3.5"}},
		// Headless SRV, one per endpoint, target <hostname>.<svc>, the endpoint's port.
		{"_web._tcp.nginx.default." + z, mdns.TypeSRV, []string{"NOERROR",
			"SRV 0 50 8080 web-0.nginx.default.svc.cluster.local.", "SRV 0 50 8080 web-1.nginx.default.svc.cluster.local.", "|",
			"web-0.nginx.default.svc.cluster.local. A 10.244.2.10", "web-1.nginx.default.svc.cluster.local. A 10.244.2.11"}},
		// An endpoint without hostname is named by its dashed address.
		{"_web._tcp.pnr.default." + z, mdns.TypeSRV, []string{"NOERROR", "SRV 0 100 8080 10-244-3-5.pnr.default.svc.cluster.local.",
			"|", "10-244-3-5.pnr.default.svc.cluster.local. A 10.244.3.5"}},
		{"10-244-3-5.pnr.default." + z, mdns.TypeA, []string{"NOERROR", "A 10.244.3.5"}},
		{"_web._tcp.empty.default." + z, mdns.TypeSRV, []string{"NOERROR"}},
		// StatefulSet stable names from endpoint hostnames.
		{"web-0.nginx.default." + z, mdns.TypeA, []string{"NOERROR", "A 10.244.2.10"}},
		{"web-1.nginx.default." + z, mdns.TypeA, []string{"NOERROR", "A 10.244.2.11"}},
		{"web-2.nginx.default." + z, mdns.TypeA, []string{"NXDOMAIN"}}, // not ready
		{"web-9.nginx.default." + z, mdns.TypeA, []string{"NXDOMAIN"}},
		// Pod hostname + subdomain naming a headless Service.
		{"busybox-1.busybox-subdomain.my-namespace." + z, mdns.TypeA, []string{"NOERROR", "A 10.244.1.11"}},
		{"busybox-2.busybox-subdomain.my-namespace." + z, mdns.TypeA, []string{"NOERROR", "A 10.244.1.12"}},
		{"busybox-3.busybox-subdomain.my-namespace." + z, mdns.TypeA, []string{"NXDOMAIN"}},                // not ready
		{"busybox4.busybox-subdomain.my-namespace." + z, mdns.TypeA, []string{"NOERROR", "A 10.244.1.14"}}, // no spec.hostname: named by the pod name
		{"x.my-service.default." + z, mdns.TypeA, []string{"NXDOMAIN"}},                                    // subdomain of a non-headless Service
		// ExternalName -> CNAME (no upstream here: the CNAME alone).
		{"my-service.prod." + z, mdns.TypeCNAME, []string{"NOERROR", "CNAME my.database.example.com."}},
		{"my-service.prod." + z, mdns.TypeA, []string{"NOERROR", "CNAME my.database.example.com."}},
		// An ExternalName inside the zone is followed to the final records.
		{"alias.default." + z, mdns.TypeA, []string{"NOERROR", "CNAME my-service.default.svc.cluster.local.",
			"my-service.default.svc.cluster.local. A 10.96.0.50"}},
		// Pod A records, only for pods that exist with that IP in that namespace.
		{"172-17-0-3.default.pod.cluster.local.", mdns.TypeA, []string{"NOERROR", "A 172.17.0.3"}},
		{"172-17-0-3.other.pod.cluster.local.", mdns.TypeA, []string{"NXDOMAIN"}},
		{"fd00-10-244--5.default.pod.cluster.local.", mdns.TypeAAAA, []string{"NOERROR", "AAAA fd00:10:244::5"}},
		{"fd00-10-244--5.default.pod.cluster.local.", mdns.TypeA, []string{"NOERROR"}},
		{"172-17-0-9.default.pod.cluster.local.", mdns.TypeA, []string{"NXDOMAIN"}},
		{"not-an-ip.default.pod.cluster.local.", mdns.TypeA, []string{"NXDOMAIN"}},
		// Zone structure: apex, empty non-terminals, schema version, unknown names.
		{"cluster.local.", mdns.TypeSOA, []string{"NOERROR", "SOA ns.dns.cluster.local. hostmaster.cluster.local. " + itoa(h.serial) + " 7200 1800 86400 5"}},
		{"cluster.local.", mdns.TypeNS, []string{"NOERROR", "NS ns.dns.cluster.local."}},
		{"ns.dns.cluster.local.", mdns.TypeA, []string{"NOERROR", "A 10.96.0.10"}},
		{"dns-version.cluster.local.", mdns.TypeTXT, []string{"NOERROR", `TXT "1.1.0"`}},
		{"svc.cluster.local.", mdns.TypeA, []string{"NOERROR"}},
		{"default.svc.cluster.local.", mdns.TypeA, []string{"NOERROR"}},
		{"nowhere.svc.cluster.local.", mdns.TypeA, []string{"NXDOMAIN"}},
		{"nothing.default.svc.cluster.local.", mdns.TypeA, []string{"NXDOMAIN"}},
		{"a.b.c.d.e.f.svc.cluster.local.", mdns.TypeA, []string{"NXDOMAIN"}},
		{"whatever.cluster.local.", mdns.TypeA, []string{"NXDOMAIN"}},
		// PTR for ClusterIPs, headless endpoints (hostname or dashed name) and subdomain pods.
		{"50.0.96.10.in-addr.arpa.", mdns.TypePTR, []string{"NOERROR", "PTR my-service.default.svc.cluster.local."}},
		{"0.6.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.1.0.0.0.0.d.f.ip6.arpa.", mdns.TypePTR,
			[]string{"NOERROR", "PTR dual.default.svc.cluster.local."}},
		{"10.2.244.10.in-addr.arpa.", mdns.TypePTR, []string{"NOERROR", "PTR web-0.nginx.default.svc.cluster.local."}},
		{"5.3.244.10.in-addr.arpa.", mdns.TypePTR, []string{"NOERROR", "PTR 10-244-3-5.pnr.default.svc.cluster.local."}},
		{"12.1.244.10.in-addr.arpa.", mdns.TypePTR, []string{"NOERROR", "PTR busybox-2.busybox-subdomain.my-namespace.svc.cluster.local."}},
		// Not a cluster address, no upstream: forwarding fails -> SERVFAIL.
		{"9.9.9.10.in-addr.arpa.", mdns.TypePTR, []string{"SERVFAIL"}},
		{"example.org.", mdns.TypeA, []string{"SERVFAIL"}},
	}
	for _, c := range cases {
		t.Run(c.name+"/"+mdns.TypeToString[c.qtype], func(t *testing.T) {
			r := h.resolve(context.Background(), query(c.name, c.qtype), "udp")
			got := summary(t, c.name, r)
			if !slices.Equal(got, c.want) {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
			inZone := mdns.IsSubDomain("cluster.local.", strings.ToLower(c.name))
			if inZone && !r.Authoritative {
				t.Error("answer in the cluster domain is not authoritative")
			}
			negative := r.Rcode == mdns.RcodeNameError || (r.Rcode == mdns.RcodeSuccess && len(r.Answer) == 0)
			if inZone && negative && (len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != mdns.TypeSOA) {
				t.Errorf("negative answer without SOA: %v", r.Ns)
			}
		})
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

func TestHandlerRejectsBadRequests(t *testing.T) {
	h := NewHandler(Config{}, NewCaches())
	m := new(mdns.Msg)
	m.Opcode = mdns.OpcodeUpdate
	m.SetQuestion("cluster.local.", mdns.TypeSOA)
	m.Opcode = mdns.OpcodeUpdate
	if r := h.resolve(context.Background(), m, "udp"); r.Rcode != mdns.RcodeNotImplemented {
		t.Errorf("UPDATE: %s, want NOTIMP", mdns.RcodeToString[r.Rcode])
	}
	m = new(mdns.Msg)
	if r := h.resolve(context.Background(), m, "udp"); r.Rcode != mdns.RcodeFormatError {
		t.Errorf("no question: %s, want FORMERR", mdns.RcodeToString[r.Rcode])
	}
}

func TestParseHelpers(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"172-17-0-3", "172.17.0.3"}, {"2001-db8--5", "2001:db8::5"}, {"1-2-3", ""}, {"x", ""},
	} {
		a, ok := parseDashed(c.in)
		if got := map[bool]string{true: a.String(), false: ""}[ok]; got != c.want {
			t.Errorf("parseDashed(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, ip := range []string{"10.96.0.10", "fd00:10:96::a", "2001:db8::1"} {
		arpa, _ := mdns.ReverseAddr(ip)
		a, ok := parseReverse(arpa)
		if !ok || a.String() != net.ParseIP(ip).String() {
			t.Errorf("parseReverse(%s) = %v %v, want %s", arpa, a, ok, ip)
		}
	}
	for _, bad := range []string{"1.2.3.in-addr.arpa.", "256.1.2.3.in-addr.arpa.", "01.1.2.3.in-addr.arpa.", "1.ip6.arpa."} {
		if _, ok := parseReverse(bad); ok {
			t.Errorf("parseReverse(%s) accepted", bad)
		}
	}
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}
