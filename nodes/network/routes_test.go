package network

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDesiredRoutes(t *testing.T) {
	self, cluster := netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("10.244.0.0/16")
	peer := func(name, cidr, ip string) Peer { return Peer{Name: name, PodCIDR: cidr, HostIP: net.ParseIP(ip)} }
	cases := []struct {
		name    string
		peers   []Peer
		want    string // routes after the unreachable cluster route, "; "-joined
		wantErr []string
	}{
		{"none", nil, "", nil},
		{"two peers sorted by name", []Peer{peer("b", "10.244.3.0/24", "10.213.0.3"), peer("a", "10.244.2.0/24", "10.213.0.2")},
			"10.244.2.0/24 via 10.213.0.2; 10.244.3.0/24 via 10.213.0.3", nil},
		{"unmasked CIDR", []Peer{peer("a", "10.244.2.7/24", "10.213.0.2")}, "10.244.2.0/24 via 10.213.0.2", nil},
		{"IPv4-mapped host IP", []Peer{{Name: "a", PodCIDR: "10.244.2.0/24", HostIP: net.ParseIP("10.213.0.2").To16()}}, "10.244.2.0/24 via 10.213.0.2", nil},
		{"outside the cluster", []Peer{peer("a", "0.0.0.0/0", "10.213.0.2"), peer("b", "192.168.1.0/24", "10.213.0.2")}, "",
			[]string{"outside the cluster CIDR", "outside the cluster CIDR"}},
		{"overlaps ours", []Peer{peer("a", "10.244.1.0/24", "10.213.0.2"), peer("b", "10.244.0.0/23", "10.213.0.3")}, "",
			[]string{"overlaps this host's", "overlaps this host's"}},
		{"claimed twice", []Peer{peer("b", "10.244.2.0/24", "10.213.0.3"), peer("a", "10.244.2.0/24", "10.213.0.2")},
			"10.244.2.0/24 via 10.213.0.2", []string{"both claim"}},
		{"overlapping peers", []Peer{peer("a", "10.244.2.0/24", "10.213.0.2"), peer("b", "10.244.2.0/23", "10.213.0.3")},
			"10.244.2.0/24 via 10.213.0.2", []string{"overlaps that of a"}},
		{"no host IP", []Peer{{Name: "a", PodCIDR: "10.244.2.0/24"}}, "", []string{"no host address"}},
		{"family mismatch", []Peer{peer("a", "10.244.2.0/24", "fd00::2")}, "", []string{"different IP families"}},
		{"bad CIDR", []Peer{peer("a", "10.244.2.0", "10.213.0.2")}, "", []string{"pod CIDR"}},
		{"host IP inside the cluster", []Peer{peer("a", "10.244.2.0/24", "10.244.9.9")}, "", []string{"inside the cluster CIDR"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			routes, errs := desiredRoutes(self, cluster, tc.peers)
			if len(routes) == 0 || routes[0].String() != "unreachable 10.244.0.0/16" {
				t.Fatalf("first route %v, want the unreachable cluster route", routes)
			}
			var got []string
			for _, r := range routes[1:] {
				got = append(got, r.String())
			}
			if strings.Join(got, "; ") != tc.want {
				t.Errorf("routes %q, want %q", strings.Join(got, "; "), tc.want)
			}
			if len(errs) != len(tc.wantErr) {
				t.Fatalf("errors %v, want %d", errs, len(tc.wantErr))
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), tc.wantErr[i]) {
					t.Errorf("error %q, want it to mention %q", e, tc.wantErr[i])
				}
			}
		})
	}
}

func TestPlanRoutes(t *testing.T) {
	r := func(dst, via string) route {
		out := route{Dst: netip.MustParsePrefix(dst)}
		if via != "" {
			out.Via = netip.MustParseAddr(via)
		}
		return out
	}
	cases := []struct {
		name             string
		current, desired []route
		replace, remove  string
	}{
		{"empty", nil, nil, "[]", "[]"},
		{"add", nil, []route{r("10.244.0.0/16", ""), r("10.244.2.0/24", "10.213.0.2")},
			"[unreachable 10.244.0.0/16 10.244.2.0/24 via 10.213.0.2]", "[]"},
		{"in place", []route{r("10.244.2.0/24", "10.213.0.2")}, []route{r("10.244.2.0/24", "10.213.0.2")}, "[]", "[]"},
		// A changed gateway is replaced, never deleted: deleting after the replace would
		// remove the new route.
		{"moved peer", []route{r("10.244.2.0/24", "10.213.0.2")}, []route{r("10.244.2.0/24", "10.213.0.9")},
			"[10.244.2.0/24 via 10.213.0.9]", "[]"},
		{"stale", []route{r("10.244.0.0/16", ""), r("10.244.2.0/24", "10.213.0.2")}, []route{r("10.244.0.0/16", "")},
			"[]", "[10.244.2.0/24 via 10.213.0.2]"},
	}
	for _, tc := range cases {
		replace, remove := planRoutes(tc.current, tc.desired)
		if got := fmt.Sprint(strs(replace)); got != tc.replace {
			t.Errorf("%s: replace %s, want %s", tc.name, got, tc.replace)
		}
		if got := fmt.Sprint(strs(remove)); got != tc.remove {
			t.Errorf("%s: remove %s, want %s", tc.name, got, tc.remove)
		}
	}
}

func strs(rs []route) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

func TestPeersFromNodes(t *testing.T) {
	node := func(name string, cidrs []string, addrs ...corev1.NodeAddress) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
		if len(cidrs) > 0 {
			n.Spec.PodCIDR, n.Spec.PodCIDRs = cidrs[0], cidrs
		}
		return n
	}
	internal := func(ip string) corev1.NodeAddress {
		return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
	}
	nodes := []*corev1.Node{
		node("self", []string{"10.244.1.0/24"}, internal("10.213.0.1")),
		node("c", []string{"10.244.3.0/24"}, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.3"}, internal("10.213.0.3")),
		node("b", []string{"10.244.2.0/24", "fd00:244:2::/64"}, internal("fd00:213::2"), internal("10.213.0.2"), internal("10.213.0.22")),
		node("no-cidr", nil, internal("10.213.0.4")),
		node("no-address", []string{"10.244.5.0/24"}),
		{ObjectMeta: metav1.ObjectMeta{Name: "old-style"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.6.0/24"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{internal("10.213.0.6")}}},
	}
	var got []string
	for _, p := range PeersFromNodes(nodes, "self") {
		got = append(got, p.Name+" "+p.PodCIDR+" "+p.HostIP.String())
	}
	want := []string{"b 10.244.2.0/24 10.213.0.2", "b fd00:244:2::/64 fd00:213::2", "c 10.244.3.0/24 10.213.0.3", "old-style 10.244.6.0/24 10.213.0.6"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("peers\n got %v\nwant %v", got, want)
	}
}
