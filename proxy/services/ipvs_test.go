package services

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func vsString(vs VirtualServer) string {
	var rs []string
	for _, r := range vs.RealServers {
		rs = append(rs, fmt.Sprintf("%s:%d/%d", r.Address, r.Port, r.Weight))
	}
	s := fmt.Sprintf("%s %s:%d %s", vs.Protocol, vs.Address, vs.Port, vs.Scheduler)
	if vs.Persistence != 0 {
		s += " persistent=" + vs.Persistence.String()
	}
	if vs.Masquerade {
		s += " masq"
	}
	return s + " -> [" + strings.Join(rs, " ") + "]"
}

func TestCompileIPVS(t *testing.T) {
	node := mkNode("n1", "10.213.0.1", "192.0.2.5")
	local, remote := readyEP("10.244.1.2", "n1"), readyEP("10.244.2.2", "n2")
	cases := []struct {
		name   string
		svc    *v1.Service
		eps    []ep
		want   []string
		reject []string
	}{
		{
			name: "ClusterIP, default scheduler rr",
			svc:  mkSvc("web", "10.96.0.50", 80),
			eps:  []ep{local, remote},
			want: []string{"TCP 10.96.0.50:80 rr -> [10.244.1.2:8080/1 10.244.2.2:8080/1]"},
		},
		{
			name: "scheduler from the annotation; unknown ones fall back to rr",
			svc: mkSvc("web", "10.96.0.50", 80, func(s *v1.Service) {
				s.Annotations = map[string]string{AnnotationIPVSScheduler: "sh"}
			}),
			eps:  []ep{local},
			want: []string{"TCP 10.96.0.50:80 sh -> [10.244.1.2:8080/1]"},
		},
		{
			name: "NodePort on every host address and externalIP, masqueraded under policy Cluster; affinity is persistence",
			svc:  mkSvc("web", "10.96.0.50", 80, nodePort(30080), externalIP("192.0.2.10"), affinity(60)),
			eps:  []ep{remote},
			want: []string{
				"TCP 10.96.0.50:80 rr persistent=1m0s -> [10.244.2.2:8080/1]",
				"TCP 192.0.2.10:80 rr persistent=1m0s masq -> [10.244.2.2:8080/1]",
				"TCP 10.213.0.1:30080 rr persistent=1m0s masq -> [10.244.2.2:8080/1]",
				"TCP 192.0.2.5:30080 rr persistent=1m0s masq -> [10.244.2.2:8080/1]",
			},
		},
		{
			name: "externalTrafficPolicy Local: local real servers, no masquerade",
			svc:  mkSvc("web", "10.96.0.50", 80, nodePort(30080), etpLocal),
			eps:  []ep{local, remote},
			want: []string{
				"TCP 10.96.0.50:80 rr -> [10.244.1.2:8080/1 10.244.2.2:8080/1]",
				"TCP 10.213.0.1:30080 rr -> [10.244.1.2:8080/1]",
				"TCP 192.0.2.5:30080 rr -> [10.244.1.2:8080/1]",
			},
		},
		{
			name: "internalTrafficPolicy Local without local endpoints: ClusterIP server without real servers",
			svc:  mkSvc("web", "10.96.0.50", 80, itpLocal),
			eps:  []ep{remote},
			want: []string{"TCP 10.96.0.50:80 rr -> []"},
		},
		{
			name:   "no endpoints: every frontend is rejected",
			svc:    mkSvc("web", "10.96.0.50", 80, nodePort(30080)),
			reject: []string{"TCP 10.96.0.50:80 rr -> []", "TCP 10.213.0.1:30080 rr masq -> []", "TCP 192.0.2.5:30080 rr masq -> []"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := CompileIPVS(Compile([]*v1.Service{c.svc}, []*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080, c.eps...)}, node))
			var got, rej []string
			for _, vs := range st.VirtualServers {
				got = append(got, vsString(vs))
			}
			for _, vs := range st.Reject {
				rej = append(rej, vsString(vs))
			}
			if !reflect.DeepEqual(got, c.want) || !reflect.DeepEqual(rej, c.reject) {
				t.Fatalf("got\n  %s\nreject\n  %s\nwant\n  %s\nreject\n  %s", strings.Join(got, "\n  "), strings.Join(rej, "\n  "), strings.Join(c.want, "\n  "), strings.Join(c.reject, "\n  "))
			}
			if !st.BoundAddresses[0].IsValid() || st.BoundAddresses[0] != netip.MustParseAddr("10.96.0.50") {
				t.Fatalf("bound addresses %v", st.BoundAddresses)
			}
		})
	}
}

func TestPlanRealServers(t *testing.T) {
	rs := func(ip string, w int) RealServer {
		return RealServer{Address: netip.MustParseAddr(ip), Port: 8080, Weight: w}
	}
	have := []KernelRealServer{
		{RealServer: rs("10.244.1.2", 1)},                 // kept
		{RealServer: rs("10.244.1.3", 1), ActiveConns: 3}, // gone, busy: drained with weight 0
		{RealServer: rs("10.244.1.4", 0), ActiveConns: 1}, // already draining: left alone
		{RealServer: rs("10.244.1.5", 0)},                 // drained: deleted
		{RealServer: rs("10.244.1.6", 1)},                 // gone, idle: deleted
	}
	want := []RealServer{rs("10.244.1.2", 1), rs("10.244.1.7", 1)}
	got := PlanRealServers(have, want)
	exp := RealServerOps{
		Add:    []RealServer{rs("10.244.1.7", 1)},
		Update: []RealServer{rs("10.244.1.3", 0)},
		Delete: []RealServer{rs("10.244.1.5", 0), rs("10.244.1.6", 1)},
	}
	if !reflect.DeepEqual(got, exp) {
		t.Fatalf("got %+v\nwant %+v", got, exp)
	}
}

// TestIPVSBackendRefuses: on a kernel without IPVS (this project's machines) Apply refuses
// with ErrIPVSUnavailable instead of trusting github.com/moby/ipvs, which reports success
// there; on one with IPVS a zero IPVS (not made by NewIPVS) refuses to touch the namespace.
func TestIPVSBackendRefuses(t *testing.T) {
	var b IPVS
	err := b.Apply(DesiredState{})
	if CheckIPVS() != nil {
		if !errors.Is(err, ErrIPVSUnavailable) {
			t.Fatalf("Apply without kernel IPVS: %v, want ErrIPVSUnavailable", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), "NewIPVS") {
		t.Fatalf("Apply on a zero IPVS: %v, want a refusal naming NewIPVS", err)
	}
}

// TestIPVSCompanionTableUpdates programs the IPVS companion table (nftables only, no ip_vs
// needed) in a test network namespace, then changes the virtual servers: after each Apply
// step the table holds exactly the new frontends and real server pairs, whether it was
// patched element by element or rebuilt (Resync).
func TestIPVSCompanionTableUpdates(t *testing.T) {
	requireNetAdmin(t)
	ns := "flt-s" + randSuffix() + "i"
	newNetns(t, ns)
	b := NewIPVS(IPVSOptions{NetNS: "/run/netns/" + ns, Table: "flotilla-ipvs"})
	t.Cleanup(func() { _ = b.deleteNft() })
	vs := func(ip string, masq bool, rs ...string) VirtualServer {
		v := VirtualServer{Address: netip.MustParseAddr(ip), Protocol: v1.ProtocolTCP, Port: 80, Masquerade: masq}
		for _, r := range rs {
			v.RealServers = append(v.RealServers, RealServer{Address: netip.MustParseAddr(r), Port: 8080, Weight: 1})
		}
		return v
	}
	list := func(set string) string {
		return inNS(t, ns, "nft", "list", "set", "ip", "flotilla-ipvs", set)
	}
	step := func(st IPVSState, want map[string][]string, notWant map[string][]string) {
		t.Helper()
		if err := b.applyNft(renderIPVSNft(st, netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("10.244.0.0/16"))); err != nil {
			t.Fatal(err)
		}
		for set, ws := range want {
			out := list(set)
			for _, w := range ws {
				if !strings.Contains(out, w) {
					t.Fatalf("set %s lacks %s:\n%s", set, w, out)
				}
			}
		}
		for set, ws := range notWant {
			out := list(set)
			for _, w := range ws {
				if strings.Contains(out, w) {
					t.Fatalf("set %s still holds %s:\n%s", set, w, out)
				}
			}
		}
	}
	step(IPVSState{VirtualServers: []VirtualServer{vs("10.96.0.1", false, "10.244.1.2"), vs("192.0.2.1", true, "10.244.1.2")}},
		map[string][]string{ipvsSetCluster: {"10.96.0.1 . tcp . 80"}, ipvsSetMasq: {"192.0.2.1 . tcp . 80"}, ipvsSetHairpin: {"10.244.1.2 . 10.244.1.2"}}, nil)
	// The endpoint moves, the external frontend loses its endpoints.
	step(IPVSState{VirtualServers: []VirtualServer{vs("10.96.0.1", false, "10.244.1.3")}, Reject: []VirtualServer{vs("192.0.2.1", true)}},
		map[string][]string{ipvsSetCluster: {"10.96.0.1 . tcp . 80"}, ipvsSetReject: {"192.0.2.1 . tcp . 80"}, ipvsSetHairpin: {"10.244.1.3 . 10.244.1.3"}},
		map[string][]string{ipvsSetMasq: {"192.0.2.1"}, ipvsSetHairpin: {"10.244.1.2"}})
	// Someone flushes a set; a Resync rebuilds the table.
	inNS(t, ns, "nft", "flush", "set", "ip", "flotilla-ipvs", ipvsSetCluster)
	b.nftApplied = nil // what Resync does
	step(IPVSState{VirtualServers: []VirtualServer{vs("10.96.0.1", false, "10.244.1.3")}, Reject: []VirtualServer{vs("192.0.2.1", true)}},
		map[string][]string{ipvsSetCluster: {"10.96.0.1 . tcp . 80"}, ipvsSetReject: {"192.0.2.1 . tcp . 80"}}, nil)
}

// TestIPVSCompanionFirewall: the companion table drops, before IPVS would see them, the
// connections to a load-balancer address from sources outside its Service's source ranges
// (nftables only, no ip_vs needed: a plain listener on the host's address stands in for the
// virtual server). The ranges change in place, element by element, and go away.
func TestIPVSCompanionFirewall(t *testing.T) {
	tp := setupTopo(t)
	serve(t, tp.host, hostIP+":80", "h")
	b := NewIPVS(IPVSOptions{NetNS: "/run/netns/" + tp.host, Table: "flotilla-ipvs"})
	t.Cleanup(func() { _ = b.deleteNft() })
	apply := func(ranges ...string) {
		t.Helper()
		vs := VirtualServer{Address: netip.MustParseAddr(hostIP), Protocol: v1.ProtocolTCP, Port: 80, Masquerade: true,
			RealServers: []RealServer{{Address: netip.MustParseAddr(podAIP), Port: 8080, Weight: 1}}}
		if ranges != nil {
			vs.Firewalled = true
			for _, r := range ranges {
				vs.SourceRanges = append(vs.SourceRanges, netip.MustParsePrefix(r))
			}
		}
		if err := b.applyNft(renderIPVSNft(IPVSState{VirtualServers: []VirtualServer{vs}}, netip.MustParsePrefix("10.96.0.0/12"), testPodCIDR)); err != nil {
			t.Fatal(err)
		}
	}
	reaches := func(ns, who string) {
		t.Helper()
		if got, err := dial(t, ns, hostIP+":80", 2*time.Second); err != nil || got != "h "+who {
			t.Fatalf("%s: got %q, %v; want \"h %s\"\n%s", ns, got, err, who, inNS(t, tp.host, "nft", "list", "table", "ip", "flotilla-ipvs"))
		}
	}
	dropped := func(ns string) {
		t.Helper()
		if got, err := dial(t, ns, hostIP+":80", 700*time.Millisecond); err == nil {
			t.Fatalf("%s, outside the source ranges, got %q", ns, got)
		} else if strings.Contains(err.Error(), "refused") {
			t.Fatalf("%s: %v, want the connection dropped", ns, err)
		}
	}
	apply(clientIP + "/32")
	reaches(tp.client, clientIP)
	dropped(tp.podB)
	if out := inNS(t, tp.host, "nft", "list", "set", "ip", "flotilla-ipvs", ipvsSetAllow); !strings.Contains(out, hostIP+" . tcp . 80 . "+clientIP) {
		t.Fatalf("allow set:\n%s", out)
	}
	apply("10.244.0.0/16", "198.51.100.0/24")
	reaches(tp.podB, podBIP)
	dropped(tp.client)
	if out := inNS(t, tp.host, "nft", "list", "set", "ip", "flotilla-ipvs", ipvsSetAllow); !strings.Contains(out, hostIP+" . tcp . 80 . 10.244.0.0/16") {
		t.Fatalf("allow set after the change:\n%s", out)
	}
	apply()
	reaches(tp.client, clientIP)
	reaches(tp.podB, podBIP)
}

// renderIPVSNft is the companion table for st computed from scratch, what IPVSCompiler's
// counts must add up to; sources outside clusterCIDR are
// masqueraded towards ClusterIPs. ClusterIP frontends are the unmasqueraded
// virtual servers inside serviceCIDR; the others without Masquerade follow
// externalTrafficPolicy Local and keep the client's address.
func renderIPVSNft(st IPVSState, serviceCIDR, clusterCIDR netip.Prefix) *ipvsNftState {
	// Sized up front: growing maps of 100,000 real servers costs more than filling them.
	rs := 0
	for _, vs := range st.VirtualServers {
		rs += len(vs.RealServers)
	}
	s := &ipvsNftState{masq: map[vipKey]bool{}, cluster: make(map[vipKey]bool, len(st.VirtualServers)), reject: map[vipKey]bool{},
		firewall: map[vipKey]bool{}, allow: map[fwAllow]bool{}, hairpin: make(map[netip.Addr]bool, rs), clusterCIDR: clusterCIDR}
	firewall := func(vs VirtualServer, k vipKey) {
		if vs.Firewalled {
			s.firewall[k] = true
			for _, r := range vs.SourceRanges {
				s.allow[fwAllow{k, r}] = true
			}
		}
	}
	for _, vs := range st.VirtualServers {
		k := vipKey{ip: vs.Address, proto: protoNum(vs.Protocol), port: vs.Port}
		switch {
		case vs.Masquerade:
			s.masq[k] = true
		case serviceCIDR.Contains(vs.Address):
			s.cluster[k] = true
		}
		firewall(vs, k)
		for _, r := range vs.RealServers {
			s.hairpin[r.Address] = true
		}
	}
	for _, vs := range st.Reject {
		k := vipKey{ip: vs.Address, proto: protoNum(vs.Protocol), port: vs.Port}
		s.reject[k] = true
		firewall(vs, k)
	}
	return s
}

// TestIPVSCompileChanged changes Services at random, 300 times, and checks IPVSCompiler's
// incremental answer against compiling from scratch: applying each IPVSChange to a model of
// the kernel (virtual servers with their real servers, bound addresses, companion table
// sets) gives exactly what CompileIPVS and renderIPVSNft say it should hold.
func TestIPVSCompileChanged(t *testing.T) {
	node := mkNode("n1", "10.213.0.1", "192.0.2.10")
	serviceCIDR, clusterCIDR := netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("10.244.0.0/16")
	rng := rand.New(rand.NewPCG(1, 2))
	svcs := map[string]*v1.Service{}
	eps := map[string]*discoveryv1.EndpointSlice{}
	randomize := func(i int) {
		name := fmt.Sprintf("s%02d", i)
		if rng.IntN(6) == 0 {
			delete(svcs, name)
			delete(eps, name)
			return
		}
		var opts []svcOpt
		if rng.IntN(3) == 0 {
			opts = append(opts, nodePort(int32(30000+i)))
		}
		if rng.IntN(4) == 0 {
			opts = append(opts, externalIP(fmt.Sprintf("198.51.100.%d", rng.IntN(20)+1))) // now and then shared
		}
		if rng.IntN(4) == 0 {
			opts = append(opts, etpLocal)
		}
		if rng.IntN(5) == 0 {
			opts = append(opts, affinity(60))
		}
		if rng.IntN(4) == 0 { // a load-balancer address, now and then shared, with or without source ranges
			ranges := [][]string{nil, {"203.0.113.0/24"}, {"203.0.113.0/24", "10.244.0.0/16"}}[rng.IntN(3)]
			opts = append(opts, nodePort(int32(31000+i)), loadBalancer(fmt.Sprintf("192.0.2.%d", rng.IntN(60)+1), ranges...))
		}
		svc := mkSvc(name, fmt.Sprintf("10.96.0.%d", i+1), 80, opts...)
		if rng.IntN(4) == 0 { // a second port on the same ClusterIP
			svc.Spec.Ports[0].Name = "http"
			svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: "metrics", Port: 9090, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)})
		}
		svcs[name] = svc
		var es []ep
		for j := range rng.IntN(4) { // pods shared between Services: hairpin addresses counted
			es = append(es, readyEP(fmt.Sprintf("10.244.1.%d", rng.IntN(12)+j), []string{"n1", "n2"}[rng.IntN(2)]))
		}
		sl := mkSlice(name+"-1", name, 8080, es...)
		if len(svc.Spec.Ports) == 2 {
			sl.Ports[0].Name = ptr.To("http")
			sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: ptr.To("metrics"), Port: ptr.To(int32(8080)), Protocol: ptr.To(v1.ProtocolTCP)})
		}
		eps[name] = sl
	}
	desired := func() DesiredState {
		var ss []*v1.Service
		var sl []*discoveryv1.EndpointSlice
		for _, s := range svcs {
			ss = append(ss, s)
		}
		for _, s := range eps {
			sl = append(sl, s)
		}
		return Compile(ss, sl, node)
	}
	for i := range 30 {
		randomize(i)
	}
	ds := desired()
	ic := IPVSCompiler{serviceCIDR: serviceCIDR}
	// model is what the kernel holds after a full sync of st: virtual servers, bound addresses.
	model := func(st IPVSState) (map[vsKey]VirtualServer, map[netip.Addr]bool) {
		vss, addrs := map[vsKey]VirtualServer{}, map[netip.Addr]bool{}
		for _, vs := range st.VirtualServers {
			vss[keyOf(vs)] = vs
		}
		for _, a := range st.BoundAddresses {
			addrs[a] = true
		}
		return vss, addrs
	}
	kernel, bound := model(ic.Compile(ds))
	nft := ic.nftState(clusterCIDR)
	incremental, firewalled := 0, 0
	for step := range 300 {
		prev := ds
		for range rng.IntN(3) + 1 {
			randomize(rng.IntN(30))
		}
		ds = desired()
		var keys []string
		for _, sets := range [][2][]ServicePort{{prev.Services, ds.Services}, {ds.Services, prev.Services}} {
			for _, sp := range sets[0] {
				if i, ok := searchPorts(sets[1], sp.Key); !ok || !sameServicePort(sets[1][i], sp) {
					keys = append(keys, sp.Key)
				}
			}
		}
		ch, ok := ic.CompileChanged(ds, keys)
		want := CompileIPVS(ds)
		wantNft := renderIPVSNft(want, serviceCIDR, clusterCIDR)
		if !ok {
			// Only a virtual server claimed twice (two Services on one externalIP), before or
			// after the change, may refuse.
			if !claimedTwice(want) && !claimedTwice(CompileIPVS(prev)) {
				t.Fatalf("step %d: CompileChanged refused without a conflict", step)
			}
			kernel, bound = model(ic.Compile(ds))
			nft = ic.nftState(clusterCIDR)
			continue
		}
		incremental++
		if len(wantNft.allow) > 0 {
			firewalled++
		}
		for _, vs := range ch.Remove {
			delete(kernel, keyOf(vs))
		}
		for _, vs := range ch.Sync {
			kernel[keyOf(vs)] = vs
		}
		for _, a := range ch.Bind {
			bound[a] = true
		}
		for _, a := range ch.Unbind {
			delete(bound, a)
		}
		nft.apply(ch.nft)
		wantKernel, wantBound := model(want)
		if !reflect.DeepEqual(kernel, wantKernel) {
			t.Fatalf("step %d (keys %v): virtual servers\n got %v\nwant %v", step, keys, kernel, wantKernel)
		}
		if !reflect.DeepEqual(bound, wantBound) {
			t.Fatalf("step %d: bound addresses\n got %v\nwant %v", step, bound, wantBound)
		}
		if !reflect.DeepEqual(nft, wantNft) {
			t.Fatalf("step %d: companion table after the deltas\n got %+v\nwant %+v", step, nft, wantNft)
		}
		if got := ic.nftState(clusterCIDR); !reflect.DeepEqual(got, wantNft) {
			t.Fatalf("step %d: companion table from the counts\n got %+v\nwant %+v", step, got, wantNft)
		}
	}
	t.Logf("%d changes incremental, %d refused for a shared virtual server; %d with source ranges", incremental, 300-incremental, firewalled)
	if firewalled == 0 {
		t.Fatal("no step had a load-balancer address with source ranges")
	}
	if incremental < 200 || incremental == 300 {
		t.Fatalf("%d of 300 changes were applied incrementally: want most, and a few shared virtual servers refused", incremental)
	}
}

// claimedTwice says whether two frontends of st share a virtual server.
func claimedTwice(st IPVSState) bool {
	seen := map[vsKey]bool{}
	for _, vs := range append(slices.Clone(st.VirtualServers), st.Reject...) {
		if seen[keyOf(vs)] {
			return true
		}
		seen[keyOf(vs)] = true
	}
	return false
}
