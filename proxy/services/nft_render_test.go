package services

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

var testPodCIDR = netip.MustParsePrefix("10.244.0.0/16")

// chainsByPrefix returns the rules (as nft text) of the single chain whose name starts with
// prefix, or nil.
func chainByPrefix(t *testing.T, rs *ruleset, prefix string) []string {
	t.Helper()
	var found []string
	var name string
	for n, rules := range rs.chains {
		if strings.HasPrefix(n, prefix) {
			if name != "" {
				t.Fatalf("two chains start with %q: %s and %s", prefix, name, n)
			}
			name = n
			for _, r := range rules {
				found = append(found, r.String())
			}
		}
	}
	return found
}

func chainNames(rs *ruleset) []string {
	var out []string
	for n := range rs.chains {
		out = append(out, strings.SplitN(n, "-", 2)[0])
	}
	sort.Strings(out)
	return out
}

func TestRender(t *testing.T) {
	node := mkNode("n1", "10.213.0.1")
	local := readyEP("10.244.1.2", "n1")
	remote := readyEP("10.244.2.2", "n2")
	cases := []struct {
		name      string
		svc       *v1.Service
		eps       []ep
		chains    []string            // chain kinds present
		rules     map[string][]string // chain prefix -> rules
		serviceIP map[string]string   // "ip/proto/port" -> chain prefix
		flat      map[string][]string // "ip/proto/port" -> endpoints by slot, the whole flat path
		nodePort  map[string]string
		noEP      []string
		noEPPorts []string
		hairpin   []string
	}{
		{
			name:    "ClusterIP, two endpoints: flat path, no chain",
			svc:     mkSvc("web", "10.96.0.50", 80),
			eps:     []ep{local, remote},
			flat:    map[string][]string{"10.96.0.50/6/80": {"10.244.1.2:8080", "10.244.2.2:8080"}},
			hairpin: []string{"10.244.1.2", "10.244.2.2"},
		},
		{
			name:      "no endpoints: no chain, every frontend in the reject sets",
			svc:       mkSvc("web", "10.96.0.50", 80, nodePort(30080), externalIP("192.0.2.10")),
			noEP:      []string{"10.96.0.50/6/80", "192.0.2.10/6/80"},
			noEPPorts: []string{"6/30080"},
		},
		{
			name:   "NodePort + externalIP, policy Cluster: always masquerade",
			svc:    mkSvc("web", "10.96.0.50", 80, nodePort(30080), externalIP("192.0.2.10")),
			eps:    []ep{remote},
			chains: []string{"ext"},
			rules: map[string][]string{
				"ext-": {"jump mark-for-masquerade", "meta l4proto 6 dnat to 10.244.2.2:8080"},
			},
			serviceIP: map[string]string{"192.0.2.10/6/80": "ext-"},
			flat:      map[string][]string{"10.96.0.50/6/80": {"10.244.2.2:8080"}},
			nodePort:  map[string]string{"6/30080": "ext-"},
			hairpin:   []string{"10.244.2.2"},
		},
		{
			name:   "externalTrafficPolicy Local: pods and host short-circuit to all endpoints, others get local ones unmasqueraded",
			svc:    mkSvc("web", "10.96.0.50", 80, nodePort(30080), etpLocal),
			eps:    []ep{local, remote},
			chains: []string{"clu", "ext"},
			rules: map[string][]string{
				"ext-": {"ip saddr 10.244.0.0/16 goto clu-", "fib saddr type local jump mark-for-masquerade", "fib saddr type local goto clu-", "meta l4proto 6 dnat to 10.244.1.2:8080"},
				"clu-": {"meta l4proto 6 numgen random mod 2 == 0 dnat to 10.244.1.2:8080", "meta l4proto 6 dnat to 10.244.2.2:8080"},
			},
			nodePort: map[string]string{"6/30080": "ext-"},
			flat:     map[string][]string{"10.96.0.50/6/80": {"10.244.1.2:8080", "10.244.2.2:8080"}},
		},
		{
			name:   "LoadBalancer with source ranges: its address answers only them, the NodePort everyone",
			svc:    mkSvc("web", "10.96.0.50", 80, nodePort(30080), loadBalancer("192.0.2.20", "198.51.100.0/24", "10.244.0.0/16")),
			eps:    []ep{remote},
			chains: []string{"ext", "fw"},
			rules: map[string][]string{
				"fw-":  {"ip saddr 10.244.0.0/16 goto ext-", "ip saddr 198.51.100.0/24 goto ext-", "drop"},
				"ext-": {"jump mark-for-masquerade", "meta l4proto 6 dnat to 10.244.2.2:8080"},
			},
			serviceIP: map[string]string{"192.0.2.20/6/80": "fw-"},
			flat:      map[string][]string{"10.96.0.50/6/80": {"10.244.2.2:8080"}},
			nodePort:  map[string]string{"6/30080": "ext-"},
			hairpin:   []string{"10.244.2.2"},
		},
		{
			name:   "LoadBalancer with source ranges, no endpoints: the others dropped before the ranges are rejected",
			svc:    mkSvc("web", "10.96.0.50", 80, nodePort(30080), loadBalancer("192.0.2.20", "198.51.100.0/24")),
			chains: []string{"fw"},
			rules: map[string][]string{
				"fw-": {"ip saddr 198.51.100.0/24 return", "drop"},
			},
			serviceIP: map[string]string{"192.0.2.20/6/80": "fw-"},
			noEP:      []string{"10.96.0.50/6/80", "192.0.2.20/6/80"},
			noEPPorts: []string{"6/30080"},
		},
		{
			name:  "externalTrafficPolicy Local without local endpoints: outside traffic dropped",
			svc:   mkSvc("web", "10.96.0.50", 80, nodePort(30080), etpLocal),
			eps:   []ep{remote},
			rules: map[string][]string{"ext-": {"ip saddr 10.244.0.0/16 goto clu-", "fib saddr type local jump mark-for-masquerade", "fib saddr type local goto clu-", "drop"}},
			flat:  map[string][]string{"10.96.0.50/6/80": {"10.244.2.2:8080"}},
		},
		{
			name:      "internalTrafficPolicy Local: local endpoints only, else drop",
			svc:       mkSvc("web", "10.96.0.50", 80, itpLocal),
			eps:       []ep{remote},
			rules:     map[string][]string{"svc-": {"ip saddr != 10.244.0.0/16 jump mark-for-masquerade", "drop"}},
			serviceIP: map[string]string{"10.96.0.50/6/80": "svc-"},
		},
		{
			name: "internalTrafficPolicy Local with a local endpoint: flat path to the local ones",
			svc:  mkSvc("web", "10.96.0.50", 80, itpLocal),
			eps:  []ep{local, remote},
			flat: map[string][]string{"10.96.0.50/6/80": {"10.244.1.2:8080"}},
		},
		{
			name:      "more endpoints than the flat path takes: svc chain",
			svc:       mkSvc("web", "10.96.0.50", 80),
			eps:       manyEPs(maxFlatEndpoints + 1),
			chains:    []string{"svc"},
			serviceIP: map[string]string{"10.96.0.50/6/80": "svc-"},
		},
		{
			name:      "sessionAffinity: per-endpoint chains remember clients in timed sets",
			svc:       mkSvc("web", "10.96.0.50", 80, affinity(60)),
			eps:       []ep{local, remote},
			chains:    []string{"ep", "ep", "svc"},
			serviceIP: map[string]string{"10.96.0.50/6/80": "svc-"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds := Compile([]*v1.Service{c.svc}, []*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080, c.eps...)}, node)
			rs := render(ds, testPodCIDR)
			if c.chains != nil {
				if got := chainNames(rs); !reflect.DeepEqual(got, c.chains) {
					t.Fatalf("chains %v, want %v", got, c.chains)
				}
			}
			for prefix, want := range c.rules {
				got := chainByPrefix(t, rs, prefix)
				if len(got) != len(want) {
					t.Fatalf("chain %s*: got %q, want %q", prefix, got, want)
				}
				for i := range want {
					if !strings.HasPrefix(got[i], want[i]) {
						t.Fatalf("chain %s* rule %d: got %q, want %q", prefix, i, got[i], want[i])
					}
				}
			}
			flat := map[string][]string{}
			for k := range rs.flatVIPs {
				var eps []string
				for i := 0; ; i++ {
					ep, ok := rs.flatEPs[flatKey{k, uint32(len(c.flat[vipString(k)])), uint32(i)}]
					if !ok {
						break
					}
					eps = append(eps, ep.String())
				}
				flat[vipString(k)] = eps
			}
			if len(rs.flatEPs) != len(slices.Concat(slices.Collect(maps.Values(c.flat))...)) || !reflect.DeepEqual(flat, nonNil(c.flat)) {
				t.Fatalf("flat path %v (%d slots), want %v", flat, len(rs.flatEPs), c.flat)
			}
			if len(rs.flatVIPs) > 0 && chainByPrefix(t, rs, "svc-") != nil {
				t.Fatal("a flat frontend has a svc chain too")
			}
			if len(rs.serviceIPs) != len(c.serviceIP) {
				t.Fatalf("service-ips %v, want %v", rs.serviceIPs, c.serviceIP)
			}
			for k, prefix := range c.serviceIP {
				var found bool
				for vk, ch := range rs.serviceIPs {
					if vipString(vk) == k {
						found = strings.HasPrefix(ch, prefix)
					}
				}
				if !found {
					t.Fatalf("service-ips has no %s -> %s* (%v)", k, prefix, rs.serviceIPs)
				}
			}
			for k, prefix := range c.nodePort {
				var found bool
				for pk, ch := range rs.nodePorts {
					if portString(pk) == k {
						found = strings.HasPrefix(ch, prefix)
					}
				}
				if !found {
					t.Fatalf("service-nodeports has no %s -> %s* (%v)", k, prefix, rs.nodePorts)
				}
			}
			var noEP, noEPPorts, hairpin []string
			for k := range rs.noEPServices {
				noEP = append(noEP, vipString(k))
			}
			for k := range rs.noEPNodePorts {
				noEPPorts = append(noEPPorts, portString(k))
			}
			for a := range rs.hairpin {
				hairpin = append(hairpin, a.String())
			}
			sort.Strings(noEP)
			sort.Strings(hairpin)
			if !reflect.DeepEqual(noEP, c.noEP) || !reflect.DeepEqual(noEPPorts, c.noEPPorts) {
				t.Fatalf("no-endpoint sets %v %v, want %v %v", noEP, noEPPorts, c.noEP, c.noEPPorts)
			}
			if c.hairpin != nil && !reflect.DeepEqual(hairpin, c.hairpin) {
				t.Fatalf("hairpin %v, want %v", hairpin, c.hairpin)
			}
		})
	}
}

func manyEPs(n int) []ep {
	out := make([]ep, n)
	for i := range out {
		out[i] = readyEP("10.244.3."+strconv.Itoa(i+1), "n1")
	}
	return out
}

func nonNil(m map[string][]string) map[string][]string {
	if m == nil {
		return map[string][]string{}
	}
	return m
}

func TestRenderAffinity(t *testing.T) {
	ds := Compile([]*v1.Service{mkSvc("web", "10.96.0.50", 80, affinity(60))},
		[]*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080, readyEP("10.244.1.2", "n1"), readyEP("10.244.2.2", "n2"))}, mkNode("n1"))
	rs := render(ds, testPodCIDR)
	svc := chainByPrefix(t, rs, "svc-")
	if len(svc) != 5 || !strings.HasPrefix(svc[1], "ip saddr @aff-") || !strings.HasPrefix(svc[2], "ip saddr @aff-") ||
		!strings.HasPrefix(svc[3], "numgen random mod 2 == 0 goto ep-") || !strings.HasPrefix(svc[4], "goto ep-") {
		t.Fatalf("svc chain: %q", svc)
	}
	if len(rs.affinity) != 2 {
		t.Fatalf("affinity sets: %v", rs.affinity)
	}
	for name, d := range rs.affinity {
		if d.Seconds() != 60 || !strings.HasSuffix(name, "-60s") {
			t.Fatalf("set %s timeout %v", name, d)
		}
	}
	for name, rules := range rs.chains {
		if strings.HasPrefix(name, "ep-") && (len(rules) != 2 || !strings.HasPrefix(rules[0].String(), "update @aff-") || !strings.HasPrefix(rules[1].String(), "meta l4proto 6 dnat to ")) {
			t.Fatalf("endpoint chain %s: %v", name, rules)
		}
	}
}

func TestDiffRulesets(t *testing.T) {
	node := mkNode("n1", "10.213.0.1")
	svcs := []*v1.Service{mkSvc("a", "10.96.0.51", 80), mkSvc("b", "10.96.0.52", 80)}
	slicesV1 := []*discoveryv1.EndpointSlice{mkSlice("a-1", "a", 8080, readyEP("10.244.1.2", "n1")), mkSlice("b-1", "b", 8080, readyEP("10.244.1.3", "n1"))}
	old := render(Compile(svcs, slicesV1, node), testPodCIDR)

	// b's endpoint moves: one flat-endpoints element changes, no chain.
	slicesV2 := []*discoveryv1.EndpointSlice{slicesV1[0], mkSlice("b-1", "b", 8080, readyEP("10.244.1.4", "n1"))}
	cur := render(Compile(svcs, slicesV2, node), testPodCIDR)
	if d := diffRulesets(old, cur); !d.empty() {
		t.Fatalf("endpoint change: %+v", d)
	}
	e := diffElems(old, cur)
	if len(e.flatEPsDel) != 1 || len(e.flatEPsAdd) != 1 || len(e.flatVIPsDel)+len(e.flatVIPsAdd) != 0 {
		t.Fatalf("endpoint change elements: %+v", e)
	}

	// a is deleted: its flat elements go, nothing else changes but its hairpin address.
	cur = render(Compile(svcs[1:], slicesV1[1:], node), testPodCIDR)
	if d := diffRulesets(old, cur); !d.empty() {
		t.Fatalf("service delete: %+v", d)
	}
	e = diffElems(old, cur)
	if len(e.flatVIPsDel) != 1 || e.flatVIPsDel[0].ip != netip.MustParseAddr("10.96.0.51") || len(e.flatEPsDel) != 1 || len(e.flatVIPsAdd)+len(e.flatEPsAdd) != 0 {
		t.Fatalf("service delete elements: %+v", e)
	}

	// a loses its endpoints: flat elements go, frontend moves to the reject set.
	cur = render(Compile(svcs, slicesV1[1:], node), testPodCIDR)
	if del, add := diffMap(old.noEPServices, cur.noEPServices); len(del) != 0 || len(add) != 1 {
		t.Fatalf("scale to 0: -%v +%v", del, add)
	}
	if e := diffElems(old, cur); len(e.flatVIPsDel) != 1 || len(e.flatEPsDel) != 1 {
		t.Fatalf("scale to 0 elements: %+v", e)
	}

	// With session affinity (chain path), an endpoint change rewrites the svc chain.
	svcs = []*v1.Service{mkSvc("a", "10.96.0.51", 80, affinity(60))}
	old = render(Compile(svcs, slicesV1[:1], node), testPodCIDR)
	cur = render(Compile(svcs, []*discoveryv1.EndpointSlice{mkSlice("a-1", "a", 8080, readyEP("10.244.1.4", "n1"))}, node), testPodCIDR)
	if d := diffRulesets(old, cur); len(d.rewriteChains) == 0 || !strings.Contains(d.rewriteChains[len(d.rewriteChains)-1], "svc-") {
		t.Fatalf("affinity endpoint change: %+v", d)
	}
}

func vipString(k vipKey) string {
	return k.ip.String() + "/" + itoa(int(k.proto)) + "/" + itoa(int(k.port))
}

func portString(k portKey) string { return itoa(int(k.proto)) + "/" + itoa(int(k.port)) }

func itoa(i int) string { return strconv.Itoa(i) }

// TestPickCascadeUniform checks that rule i of an N-endpoint cascade, taken with probability
// 1/(N-i) when reached, gives every endpoint the same share.
func TestPickCascadeUniform(t *testing.T) {
	for n := 1; n <= 12; n++ {
		eps := make([]Endpoint, n)
		for i := range eps {
			eps[i] = Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, 0, byte(i + 1)}), Port: 80}
		}
		rules := pickRules(newRuleset(), ServicePort{}, "h", protoTCP, eps)
		if len(rules) != n {
			t.Fatalf("n=%d: %d rules", n, len(rules))
		}
		reach := 1.0
		for i, r := range rules {
			p := 1.0
			if r.kind == rDNATOneIn {
				p = 1 / float64(r.n)
			} else if r.kind != rDNAT || i != n-1 {
				t.Fatalf("n=%d rule %d: %s", n, i, r)
			}
			if share := reach * p; share < 1/float64(n)-1e-9 || share > 1/float64(n)+1e-9 {
				t.Fatalf("n=%d: endpoint %d gets %.4f", n, i, share)
			}
			reach *= 1 - p
		}
	}
}
