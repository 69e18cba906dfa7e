package services

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// brief is a compact, comparable view of a ServicePort for table tests.
func brief(sp ServicePort) string {
	eps := func(es []Endpoint) string {
		var s []string
		for _, e := range es {
			x := e.String()
			if e.Terminating {
				x += "(t)"
			}
			s = append(s, x)
		}
		return "[" + strings.Join(s, " ") + "]"
	}
	var ext []string
	for _, ip := range sp.ExternalIPs {
		ext = append(ext, ip.String())
	}
	out := fmt.Sprintf("%s %s:%d", sp.Key, sp.ClusterIP, sp.Port)
	if sp.NodePort != 0 {
		out += fmt.Sprintf(" np=%d", sp.NodePort)
	}
	if len(ext) > 0 {
		out += " ext=" + strings.Join(ext, ",")
	}
	if sp.Affinity != 0 {
		out += " aff=" + sp.Affinity.String()
	}
	if sp.InternalLocal {
		out += " itp=Local"
	}
	if sp.ExternalLocal {
		out += " etp=Local"
	}
	if sp.Scheduler != "" {
		out += " sched=" + sp.Scheduler
	}
	return out + " cluster=" + eps(sp.ClusterEndpoints) + " local=" + eps(sp.LocalEndpoints)
}

func TestCompile(t *testing.T) {
	node := mkNode("n1", "10.213.0.1")
	web := func(opts ...svcOpt) []*v1.Service { return []*v1.Service{mkSvc("web", "10.96.0.50", 80, opts...)} }
	cases := []struct {
		name   string
		svcs   []*v1.Service
		slices []*discoveryv1.EndpointSlice
		node   *v1.Node
		want   []string
	}{
		{
			name:   "ClusterIP: port 80 goes to the slice's target port on ready endpoints",
			svcs:   web(),
			slices: []*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 9376, readyEP("10.244.1.2", "n1"), readyEP("10.244.2.2", "n2"))},
			want:   []string{"default/web/80/TCP 10.96.0.50:80 cluster=[10.244.1.2:9376 10.244.2.2:9376] local=[10.244.1.2:9376]"},
		},
		{
			name: "multi-port: each Service port takes the slice port of the same name",
			svcs: []*v1.Service{func() *v1.Service {
				s := mkSvc("web", "10.96.0.50", 80)
				s.Spec.Ports = []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}, {Name: "https", Port: 443, Protocol: v1.ProtocolTCP}}
				return s
			}()},
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := mkSlice("web-1", "web", 0, readyEP("10.244.1.2", "n1"))
				s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](9376)}, {Name: ptr.To("https"), Port: ptr.To[int32](9377)}}
				return s
			}()},
			want: []string{
				"default/web/http/TCP 10.96.0.50:80 cluster=[10.244.1.2:9376] local=[10.244.1.2:9376]",
				"default/web/https/TCP 10.96.0.50:443 cluster=[10.244.1.2:9377] local=[10.244.1.2:9377]",
			},
		},
		{
			name: "named targetPort with different numbers per pod: one slice per number, all used",
			svcs: web(),
			slices: []*discoveryv1.EndpointSlice{
				mkSlice("web-1", "web", 8080, readyEP("10.244.1.2", "n1")),
				mkSlice("web-2", "web", 8081, readyEP("10.244.1.3", "n1")),
			},
			want: []string{"default/web/80/TCP 10.96.0.50:80 cluster=[10.244.1.2:8080 10.244.1.3:8081] local=[10.244.1.2:8080 10.244.1.3:8081]"},
		},
		{
			name: "UDP port only matches the UDP slice port; protocol defaults to TCP",
			svcs: []*v1.Service{func() *v1.Service {
				s := mkSvc("dns", "10.96.0.53", 53)
				s.Spec.Ports = []v1.ServicePort{{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP}, {Name: "dns-tcp", Port: 53}}
				return s
			}()},
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := mkSlice("dns-1", "dns", 0, readyEP("10.244.1.9", "n1"))
				s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Port: ptr.To[int32](5353), Protocol: ptr.To(v1.ProtocolUDP)}, {Name: ptr.To("dns-tcp"), Port: ptr.To[int32](5354)}}
				return s
			}()},
			want: []string{
				"default/dns/dns-tcp/TCP 10.96.0.53:53 cluster=[10.244.1.9:5354] local=[10.244.1.9:5354]",
				"default/dns/dns/UDP 10.96.0.53:53 cluster=[10.244.1.9:5353] local=[10.244.1.9:5353]",
			},
		},
		{
			name: "headless, ExternalName, served-by-host, no ClusterIP and IPv6 Services are skipped",
			svcs: []*v1.Service{
				mkSvc("headless", v1.ClusterIPNone, 80),
				func() *v1.Service {
					s := mkSvc("ext", "", 80)
					s.Spec.Type, s.Spec.ExternalName = v1.ServiceTypeExternalName, "my.database.example.com"
					return s
				}(),
				func() *v1.Service {
					s := mkSvc("kube-dns", "10.96.0.10", 53)
					s.Annotations = map[string]string{AnnotationServedByHost: "true"}
					return s
				}(),
				mkSvc("pending", "", 80),
				mkSvc("v6", "fd00::10", 80),
			},
			slices: []*discoveryv1.EndpointSlice{mkSlice("headless-1", "headless", 80, readyEP("10.244.1.2", "n1"))},
			want:   nil,
		},
		{
			name:   "no endpoints: the port is still compiled (so it can be rejected)",
			svcs:   web(),
			slices: nil,
			want:   []string{"default/web/80/TCP 10.96.0.50:80 cluster=[] local=[]"},
		},
		{
			name: "only ready endpoints; terminating and not-ready ones are left out",
			svcs: web(),
			slices: []*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080,
				readyEP("10.244.1.2", "n1"),
				ep{ip: "10.244.1.3", node: "n1", ready: false, serving: true, terminating: true},
				ep{ip: "10.244.1.4", node: "n1", ready: false, serving: false},
			)},
			want: []string{"default/web/80/TCP 10.96.0.50:80 cluster=[10.244.1.2:8080] local=[10.244.1.2:8080]"},
		},
		{
			name: "none ready: fall back to serving and terminating, never to not-serving ones",
			svcs: web(),
			slices: []*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080,
				ep{ip: "10.244.1.3", node: "n1", serving: true, terminating: true},
				ep{ip: "10.244.1.4", node: "n1", serving: false, terminating: true},
				ep{ip: "10.244.1.5", node: "n1", serving: false},
			)},
			want: []string{"default/web/80/TCP 10.96.0.50:80 cluster=[10.244.1.3:8080(t)] local=[10.244.1.3:8080(t)]"},
		},
		{
			name: "local fallback is per node: ready remote endpoints, only terminating local ones",
			svcs: web(etpLocal),
			slices: []*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080,
				readyEP("10.244.2.2", "n2"),
				ep{ip: "10.244.1.3", node: "n1", serving: true, terminating: true},
			)},
			want: []string{"default/web/80/TCP 10.96.0.50:80 etp=Local cluster=[10.244.2.2:8080] local=[10.244.1.3:8080(t)]"},
		},
		{
			name:   "unknown conditions count as ready",
			svcs:   web(),
			slices: []*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080, ep{ip: "10.244.1.2", node: "n1", unknown: true})},
			want:   []string{"default/web/80/TCP 10.96.0.50:80 cluster=[10.244.1.2:8080] local=[10.244.1.2:8080]"},
		},
		{
			name: "the same endpoint in two slices counts once, with its ready copy",
			svcs: web(),
			slices: []*discoveryv1.EndpointSlice{
				mkSlice("web-1", "web", 8080, ep{ip: "10.244.1.2", node: "n1", serving: false}),
				mkSlice("web-2", "web", 8080, readyEP("10.244.1.2", "n1")),
			},
			want: []string{"default/web/80/TCP 10.96.0.50:80 cluster=[10.244.1.2:8080] local=[10.244.1.2:8080]"},
		},
		{
			name: "slices of other Services, namespaces, IPv6 and unlabelled slices are ignored",
			svcs: web(),
			slices: []*discoveryv1.EndpointSlice{
				mkSlice("other-1", "other", 8080, readyEP("10.244.1.2", "n1")),
				func() *discoveryv1.EndpointSlice {
					s := mkSlice("web-x", "web", 8080, readyEP("10.244.1.3", "n1"))
					s.Namespace = "prod"
					return s
				}(),
				func() *discoveryv1.EndpointSlice {
					s := mkSlice("web-6", "web", 8080, readyEP("fd00::2", "n1"))
					s.AddressType = discoveryv1.AddressTypeIPv6
					return s
				}(),
				func() *discoveryv1.EndpointSlice {
					s := mkSlice("web-nolabel", "web", 8080, readyEP("10.244.1.4", "n1"))
					s.Labels = nil
					return s
				}(),
			},
			want: []string{"default/web/80/TCP 10.96.0.50:80 cluster=[] local=[]"},
		},
		{
			name: "NodePort, externalIPs and LoadBalancer ingress IPs",
			svcs: []*v1.Service{
				mkSvc("np", "10.96.0.51", 80, nodePort(30080), externalIP("192.0.2.10")),
				func() *v1.Service {
					s := mkSvc("lb", "10.96.0.52", 80, nodePort(30081))
					s.Spec.Type = v1.ServiceTypeLoadBalancer
					s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "192.0.2.127"}, {Hostname: "lb.example.com"}}
					return s
				}(),
				func() *v1.Service { // a nodePort field on a ClusterIP Service is not served
					s := mkSvc("cip", "10.96.0.53", 80)
					s.Spec.Ports[0].NodePort = 30082
					return s
				}(),
			},
			want: []string{
				"default/cip/80/TCP 10.96.0.53:80 cluster=[] local=[]",
				"default/lb/80/TCP 10.96.0.52:80 np=30081 ext=192.0.2.127 cluster=[] local=[]",
				"default/np/80/TCP 10.96.0.51:80 np=30080 ext=192.0.2.10 cluster=[] local=[]",
			},
		},
		{
			name: "sessionAffinity ClientIP: default 10800 s, or timeoutSeconds",
			svcs: []*v1.Service{mkSvc("a", "10.96.0.51", 80, affinity(0)), mkSvc("b", "10.96.0.52", 80, affinity(30))},
			want: []string{
				"default/a/80/TCP 10.96.0.51:80 aff=3h0m0s cluster=[] local=[]",
				"default/b/80/TCP 10.96.0.52:80 aff=30s cluster=[] local=[]",
			},
		},
		{
			name:   "traffic policies and the IPVS scheduler annotation are carried",
			svcs:   []*v1.Service{mkSvc("web", "10.96.0.50", 80, itpLocal, etpLocal, func(s *v1.Service) { s.Annotations = map[string]string{AnnotationIPVSScheduler: "lc"} })},
			slices: []*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080, readyEP("10.244.2.2", "n2"))},
			want:   []string{"default/web/80/TCP 10.96.0.50:80 itp=Local etp=Local sched=lc cluster=[10.244.2.2:8080] local=[]"},
		},
		{
			name:   "without a Node nothing is local",
			svcs:   web(),
			slices: []*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080, readyEP("10.244.1.2", "n1"))},
			node:   &v1.Node{},
			want:   []string{"default/web/80/TCP 10.96.0.50:80 cluster=[10.244.1.2:8080] local=[]"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := node
			if c.node != nil {
				n = c.node
			}
			ds := Compile(c.svcs, c.slices, n)
			var got []string
			for _, sp := range ds.Services {
				got = append(got, brief(sp))
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

func TestCompileNodeAddresses(t *testing.T) {
	n := mkNode("n1", "10.213.0.2", "192.0.2.5", "10.213.0.2", "fd00::1")
	n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeHostName, Address: "10.213.9.9"})
	ds := Compile(nil, nil, n)
	want := []netip.Addr{netip.MustParseAddr("10.213.0.2"), netip.MustParseAddr("192.0.2.5")}
	if ds.NodeName != "n1" || !reflect.DeepEqual(ds.NodeIPs, want) {
		t.Fatalf("got %s %v, want n1 %v (InternalIP/ExternalIP, IPv4, deduplicated; Hostname ignored)", ds.NodeName, ds.NodeIPs, want)
	}
	if ds := Compile(nil, nil, nil); ds.NodeName != "" || len(ds.NodeIPs) != 0 {
		t.Fatalf("nil node: got %+v", ds)
	}
}

func TestChooseMode(t *testing.T) {
	for _, c := range []struct {
		mode     string
		ipvs     bool
		want     string
		wantErr  bool
		inReason string
	}{
		{"auto", false, ModeNftables, false, "no ip_vs"},
		{"", false, ModeNftables, false, "no ip_vs"},
		{"auto", true, ModeIPVS, false, "IPVS"},
		{"nftables", true, ModeNftables, false, "requested"},
		{"ipvs", true, ModeIPVS, false, "requested"},
		{"ipvs", false, "", true, ""},
		{"iptables", false, "", true, ""},
	} {
		got, why, err := chooseMode(c.mode, c.ipvs)
		if got != c.want || (err != nil) != c.wantErr || !strings.Contains(why, c.inReason) {
			t.Errorf("chooseMode(%q, %v) = %q, %q, %v", c.mode, c.ipvs, got, why, err)
		}
	}
}

// The load-balancer addresses a Service's source ranges guard, and the ranges, as kube-proxy
// reads them: the field first, else the annotation; 0.0.0.0/0 or no range guards nothing.
func TestCompileSourceRanges(t *testing.T) {
	withAnnotation := func(v string) svcOpt {
		return func(s *v1.Service) { s.Annotations = map[string]string{v1.AnnotationLoadBalancerSourceRangesKey: v} }
	}
	for _, c := range []struct {
		name   string
		svc    *v1.Service
		ips    string
		ranges string
	}{
		{"no ranges", mkSvc("a", "10.96.0.50", 80, loadBalancer("192.0.2.20")), "[]", "[]"},
		{"field, sorted and masked", mkSvc("a", "10.96.0.50", 80, loadBalancer("192.0.2.20", "198.51.100.7/24", "10.0.0.0/8")),
			"[192.0.2.20]", "[10.0.0.0/8 198.51.100.0/24]"},
		{"ranges inside others dropped", mkSvc("a", "10.96.0.50", 80, loadBalancer("192.0.2.20", "10.1.0.0/16", "10.0.0.0/8", "10.1.2.3/32", "10.0.0.0/8")),
			"[192.0.2.20]", "[10.0.0.0/8]"},
		{"annotation", mkSvc("a", "10.96.0.50", 80, loadBalancer("192.0.2.20"), withAnnotation(" 10.1.0.0/16, 10.2.0.0/16")),
			"[192.0.2.20]", "[10.1.0.0/16 10.2.0.0/16]"},
		{"the field wins over the annotation", mkSvc("a", "10.96.0.50", 80, loadBalancer("192.0.2.20", "10.3.0.0/16"), withAnnotation("10.1.0.0/16")),
			"[192.0.2.20]", "[10.3.0.0/16]"},
		{"0.0.0.0/0 lets everyone in", mkSvc("a", "10.96.0.50", 80, loadBalancer("192.0.2.20", "10.3.0.0/16", "0.0.0.0/0")), "[]", "[]"},
		{"IPv6 ranges only: no IPv4 source", mkSvc("a", "10.96.0.50", 80, loadBalancer("192.0.2.20", "2001:db8::/32")), "[192.0.2.20]", "[]"},
		{"no load-balancer address yet", mkSvc("a", "10.96.0.50", 80, loadBalancer("", "10.3.0.0/16")), "[]", "[]"},
		{"not a LoadBalancer", mkSvc("a", "10.96.0.50", 80, nodePort(30080), withAnnotation("10.1.0.0/16")), "[]", "[]"},
	} {
		ports := compileService(c.svc, nil, "n1", "")
		if len(ports) != 1 {
			t.Fatalf("%s: %d ports", c.name, len(ports))
		}
		if ips, ranges := fmt.Sprint(ports[0].FirewallIPs), fmt.Sprint(ports[0].SourceRanges); ips != c.ips || ranges != c.ranges {
			t.Errorf("%s: firewall %s ranges %s, want %s %s", c.name, ips, ranges, c.ips, c.ranges)
		}
	}
}

// trafficDistribution, through the EndpointSlices' hints: a host sends cluster-wide traffic to
// the endpoints hinted for its node, else for its zone, when every ready endpoint has such
// hints and one is for it; otherwise to all, as kube-proxy.
func TestCompileTrafficDistribution(t *testing.T) {
	node := mkNode("n1", "10.213.0.1")
	node.Labels = map[string]string{v1.LabelTopologyZone: "z1"}
	type hinted struct {
		ip, node     string
		nodes, zones []string
		notReady     bool
	}
	slice := func(eps ...hinted) *discoveryv1.EndpointSlice {
		var es []ep
		for _, e := range eps {
			es = append(es, ep{ip: e.ip, node: e.node, ready: !e.notReady, serving: true, terminating: e.notReady})
		}
		s := mkSlice("web-1", "web", 8080, es...)
		for i, e := range eps {
			if e.nodes == nil && e.zones == nil {
				continue
			}
			h := &discoveryv1.EndpointHints{}
			for _, n := range e.nodes {
				h.ForNodes = append(h.ForNodes, discoveryv1.ForNode{Name: n})
			}
			for _, z := range e.zones {
				h.ForZones = append(h.ForZones, discoveryv1.ForZone{Name: z})
			}
			s.Endpoints[i].Hints = h
		}
		return s
	}
	a := hinted{ip: "10.244.1.2", node: "n1", nodes: []string{"n1"}, zones: []string{"z1"}}
	b := hinted{ip: "10.244.2.2", node: "n2", nodes: []string{"n2"}, zones: []string{"z1"}}
	c := hinted{ip: "10.244.3.2", node: "n3", nodes: []string{"n3"}, zones: []string{"z2"}}
	zoneOnly := func(h hinted) hinted { h.nodes = nil; return h }
	bare := func(h hinted) hinted { h.nodes, h.zones = nil, nil; return h }
	for _, tc := range []struct {
		name string
		eps  []hinted
		want string
	}{
		{"no hints: all", []hinted{bare(a), bare(b), bare(c)}, "[10.244.1.2:8080 10.244.2.2:8080 10.244.3.2:8080]"},
		{"node hints, one for this node: it alone", []hinted{a, b, c}, "[10.244.1.2:8080]"},
		{"node hints, none for this node: the zone's", []hinted{b, c}, "[10.244.2.2:8080]"},
		{"zone hints: the zone's", []hinted{zoneOnly(a), zoneOnly(b), zoneOnly(c)}, "[10.244.1.2:8080 10.244.2.2:8080]"},
		{"zone hints, none for this zone: all", []hinted{zoneOnly(c), {ip: "10.244.4.2", node: "n4", zones: []string{"z3"}}}, "[10.244.3.2:8080 10.244.4.2:8080]"},
		{"one ready endpoint without hints: all", []hinted{zoneOnly(a), bare(c)}, "[10.244.1.2:8080 10.244.3.2:8080]"},
		{"the not-ready one does not count", []hinted{zoneOnly(a), {ip: "10.244.5.2", node: "n5", notReady: true}}, "[10.244.1.2:8080]"},
	} {
		ds := Compile([]*v1.Service{mkSvc("web", "10.96.0.50", 80)}, []*discoveryv1.EndpointSlice{slice(tc.eps...)}, node)
		if got := fmt.Sprint(ds.Services[0].ClusterEndpoints); got != tc.want {
			t.Errorf("%s: cluster endpoints %s, want %s", tc.name, got, tc.want)
		}
	}
	// The node's zone is part of what a Compiler remembers: a new zone recompiles.
	var comp Compiler
	sl := []*discoveryv1.EndpointSlice{slice(zoneOnly(a), zoneOnly(b), zoneOnly(c))}
	svcs := []*v1.Service{mkSvc("web", "10.96.0.50", 80)}
	comp.Compile(svcs, sl, node)
	moved := node.DeepCopy()
	moved.Labels[v1.LabelTopologyZone] = "z2"
	if got := fmt.Sprint(comp.Compile(svcs, sl, moved).Services[0].ClusterEndpoints); got != "[10.244.3.2:8080]" {
		t.Errorf("after the node moved to z2: %s", got)
	}
}
