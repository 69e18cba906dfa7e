package services

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestPlanRealServersGrace(t *testing.T) {
	rs := func(ip string, w int) RealServer {
		return RealServer{Address: netip.MustParseAddr(ip), Port: 8080, Weight: w}
	}
	ap := func(ip string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(ip), 8080) }
	t0 := time.Unix(1000, 0)
	grace := 30 * time.Second
	cases := []struct {
		name     string
		have     []KernelRealServer
		want     []RealServer
		since    map[netip.AddrPort]time.Time
		now      time.Time
		exp      RealServerOps
		expSince map[netip.AddrPort]time.Time
	}{
		{
			name:     "removed with connections: weight 0, clock starts",
			have:     []KernelRealServer{{RealServer: rs("10.244.1.2", 1), ActiveConns: 2}, {RealServer: rs("10.244.1.3", 1)}},
			want:     []RealServer{rs("10.244.1.3", 1)},
			since:    map[netip.AddrPort]time.Time{},
			now:      t0,
			exp:      RealServerOps{Update: []RealServer{rs("10.244.1.2", 0)}},
			expSince: map[netip.AddrPort]time.Time{ap("10.244.1.2"): t0},
		},
		{
			name:     "still draining inside the grace period: left alone",
			have:     []KernelRealServer{{RealServer: rs("10.244.1.2", 0), ActiveConns: 2}},
			since:    map[netip.AddrPort]time.Time{ap("10.244.1.2"): t0},
			now:      t0.Add(grace - time.Second),
			expSince: map[netip.AddrPort]time.Time{ap("10.244.1.2"): t0},
		},
		{
			name:     "grace over: deleted with its connections",
			have:     []KernelRealServer{{RealServer: rs("10.244.1.2", 0), ActiveConns: 2}},
			since:    map[netip.AddrPort]time.Time{ap("10.244.1.2"): t0},
			now:      t0.Add(grace),
			exp:      RealServerOps{Delete: []RealServer{rs("10.244.1.2", 0)}},
			expSince: map[netip.AddrPort]time.Time{},
		},
		{
			name:     "draining found after a restart: the grace starts now",
			have:     []KernelRealServer{{RealServer: rs("10.244.1.2", 0), InactiveConns: 1}},
			since:    map[netip.AddrPort]time.Time{},
			now:      t0,
			expSince: map[netip.AddrPort]time.Time{ap("10.244.1.2"): t0},
		},
		{
			name:     "wanted again while draining: weight back, clock forgotten",
			have:     []KernelRealServer{{RealServer: rs("10.244.1.2", 0), ActiveConns: 1}},
			want:     []RealServer{rs("10.244.1.2", 1)},
			since:    map[netip.AddrPort]time.Time{ap("10.244.1.2"): t0},
			now:      t0.Add(time.Hour),
			exp:      RealServerOps{Update: []RealServer{rs("10.244.1.2", 1)}},
			expSince: map[netip.AddrPort]time.Time{},
		},
		{
			name:     "drained server vanished (deleted by hand): clock forgotten",
			since:    map[netip.AddrPort]time.Time{ap("10.244.1.9"): t0},
			now:      t0,
			expSince: map[netip.AddrPort]time.Time{},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := PlanRealServersGrace(c.have, c.want, c.since, c.now, grace)
			if !reflect.DeepEqual(got, c.exp) {
				t.Fatalf("ops %+v, want %+v", got, c.exp)
			}
			if !reflect.DeepEqual(c.since, c.expSince) {
				t.Fatalf("since %v, want %v", c.since, c.expSince)
			}
		})
	}
}

func TestIPVSOwnership(t *testing.T) {
	b := NewIPVS(IPVSOptions{})
	b.nodeIPs[netip.MustParseAddr("10.213.0.1")] = true
	bound := map[netip.Addr]bool{netip.MustParseAddr("192.0.2.10"): true}
	for _, c := range []struct {
		addr string
		port uint16
		want bool
	}{
		{"10.96.0.50", 80, true},    // ClusterIP range
		{"10.111.255.1", 53, true},  // still inside 10.96.0.0/12
		{"10.112.0.1", 80, false},   // just outside
		{"192.0.2.10", 443, true},   // externalIP bound on our interface
		{"10.213.0.1", 30080, true}, // NodePort on a node address
		{"10.213.0.1", 22, false},   // node address, port outside the NodePort range
		{"10.213.5.5", 30080, false},
	} {
		k := vsKey{addr: netip.MustParseAddr(c.addr), proto: 6, port: c.port}
		if got := b.owned(k, bound); got != c.want {
			t.Errorf("owned(%s) = %v, want %v", k, got, c.want)
		}
	}
}

func TestIPVSServiceAndCompanionTable(t *testing.T) {
	node := mkNode("n1", "10.213.0.1")
	svcs := []*v1.Service{
		mkSvc("web", "10.96.0.50", 80, nodePort(30080), affinity(90)),
		mkSvc("local", "10.96.0.51", 80, nodePort(30081), etpLocal),
		mkSvc("empty", "10.96.0.52", 80),
	}
	slices := []*discoveryv1.EndpointSlice{
		mkSlice("web-1", "web", 8080, readyEP("10.244.1.2", "n1")),
		mkSlice("local-1", "local", 8080, readyEP("10.244.1.3", "n1")),
	}
	st := CompileIPVS(Compile(svcs, slices, node))
	for _, vs := range st.VirtualServers {
		s := toIPVSService(vs)
		if s.Netmask != 0xffffffff || s.AddressFamily != 2 {
			t.Fatalf("%s: netmask %#x family %d", vs.Address, s.Netmask, s.AddressFamily)
		}
		if vs.Service == "default/web/80/TCP" && (s.Flags != ipvsSvcFlagPersistent || s.Timeout != 90) {
			t.Fatalf("affinity: flags %#x timeout %d", s.Flags, s.Timeout)
		}
		if vs.Service == "default/local/80/TCP" && (s.Flags != 0 || s.Timeout != 0) {
			t.Fatalf("no affinity: flags %#x timeout %d", s.Flags, s.Timeout)
		}
	}
	nft := renderIPVSNft(st, netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("10.244.0.0/16"))
	vk := func(ip string, port uint16) vipKey {
		return vipKey{ip: netip.MustParseAddr(ip), proto: protoTCP, port: port}
	}
	exp := &ipvsNftState{
		// NodePort under policy Cluster is always masqueraded; under Local never.
		masq:        map[vipKey]bool{vk("10.213.0.1", 30080): true},
		cluster:     map[vipKey]bool{vk("10.96.0.50", 80): true, vk("10.96.0.51", 80): true},
		reject:      map[vipKey]bool{vk("10.96.0.52", 80): true},
		firewall:    map[vipKey]bool{},
		allow:       map[fwAllow]bool{},
		hairpin:     map[netip.Addr]bool{netip.MustParseAddr("10.244.1.2"): true, netip.MustParseAddr("10.244.1.3"): true},
		clusterCIDR: netip.MustParsePrefix("10.244.0.0/16"),
	}
	if !reflect.DeepEqual(nft, exp) {
		t.Fatalf("companion table\n got %+v\nwant %+v", nft, exp)
	}
}

// TestRunRefusesIPVSWithoutKernelSupport: on a kernel without IPVS (this project's machines),
// --proxy-mode=ipvs is refused with what to do, instead of trusting github.com/moby/ipvs, which
// reports success for every call there.
func TestRunRefusesIPVSWithoutKernelSupport(t *testing.T) {
	if CheckIPVS() == nil {
		t.Skip("this kernel has IPVS: Run in ipvs mode is covered by TestIPVSRunAutoMode (test/ipvsvm)")
	}
	err := Run(context.Background(), fake.NewSimpleClientset(), Config{NodeName: "n1", Mode: ModeIPVS})
	if !errors.Is(err, ErrIPVSUnavailable) || !strings.Contains(err.Error(), "--proxy-mode=nftables") {
		t.Fatalf("Run in ipvs mode: %v, want ErrIPVSUnavailable saying to use nftables", err)
	}
}
