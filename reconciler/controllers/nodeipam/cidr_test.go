package nodeipam

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestNextFree(t *testing.T) {
	cases := []struct {
		name    string
		cluster string
		mask    int
		used    []netip.Prefix
		want    string // "" = exhausted
	}{
		{"empty cluster gives the first /24", "10.244.0.0/16", 24, nil, "10.244.0.0/24"},
		{"skips used", "10.244.0.0/16", 24, prefixes("10.244.0.0/24", "10.244.1.0/24"), "10.244.2.0/24"},
		{"fills a hole", "10.244.0.0/16", 24, prefixes("10.244.0.0/24", "10.244.2.0/24"), "10.244.1.0/24"},
		{"unsorted used", "10.244.0.0/16", 24, prefixes("10.244.2.0/24", "10.244.0.0/24", "10.244.1.0/24"), "10.244.3.0/24"},
		{"a hand-set /23 blocks two", "10.244.0.0/16", 24, prefixes("10.244.0.0/23"), "10.244.2.0/24"},
		{"a hand-set /25 blocks its /24", "10.244.0.0/16", 24, prefixes("10.244.0.128/25"), "10.244.1.0/24"},
		{"unmasked used prefix", "10.244.0.0/16", 24, prefixes("10.244.0.7/24"), "10.244.1.0/24"},
		{"outside the cluster ignored", "10.244.0.0/16", 24, prefixes("10.245.0.0/24", "192.168.0.0/16"), "10.244.0.0/24"},
		{"IPv6 used ignored in IPv4 cluster", "10.244.0.0/16", 24, prefixes("fd00::/64"), "10.244.0.0/24"},
		{"covering prefix exhausts", "10.244.0.0/16", 24, prefixes("10.0.0.0/8"), ""},
		{"exhausted", "10.244.0.0/23", 24, prefixes("10.244.0.0/24", "10.244.1.0/24"), ""},
		{"last one", "10.244.0.0/23", 24, prefixes("10.244.0.0/24"), "10.244.1.0/24"},
		{"duplicates", "10.244.0.0/16", 24, prefixes("10.244.0.0/24", "10.244.0.0/24"), "10.244.1.0/24"},
		{"unmasked cluster", "10.244.7.0/16", 24, nil, "10.244.0.0/24"},
		{"/26 nodes", "10.244.0.0/24", 26, prefixes("10.244.0.0/26"), "10.244.0.64/26"},
		{"carry across octets", "10.244.0.0/16", 24, prefixes("10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"), "10.244.3.0/24"},
		{"IPv6", "fd00:10:244::/56", 64, prefixes("fd00:10:244::/64"), "fd00:10:244:1::/64"},
		{"mask shorter than cluster refused", "10.244.0.0/16", 8, nil, ""},
		{"too many subnets refused", "fd00::/8", 64, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := NextFree(netip.MustParsePrefix(tc.cluster), tc.mask, tc.used)
			if tc.want == "" {
				if ok {
					t.Fatalf("got %s, want exhausted", got)
				}
				return
			}
			if !ok || got.String() != tc.want {
				t.Fatalf("got %s (%v), want %s", got, ok, tc.want)
			}
		})
	}
}

// TestNextFreeFillsEverySubnetOnce allocates a whole /20 and checks that every /24 is handed
// out exactly once.
func TestNextFreeFillsEverySubnetOnce(t *testing.T) {
	cluster := netip.MustParsePrefix("10.244.16.0/20")
	var used []netip.Prefix
	seen := map[netip.Prefix]bool{}
	for i := 0; i < 16; i++ {
		p, ok := NextFree(cluster, 24, used)
		if !ok {
			t.Fatalf("exhausted after %d", i)
		}
		if seen[p] || !cluster.Contains(p.Addr()) {
			t.Fatalf("bad subnet %s after %v", p, used)
		}
		seen[p] = true
		used = append(used, p)
	}
	if p, ok := NextFree(cluster, 24, used); ok {
		t.Fatalf("17th /24 of a /20: %s", p)
	}
}

func TestOptions(t *testing.T) {
	cases := []struct {
		o        Options
		cluster  string
		mask     int
		wantFail bool
	}{
		{Options{}, "10.244.0.0/16", 24, false},
		{Options{ClusterCIDR: "10.10.0.0/16", NodeMaskSize: 26}, "10.10.0.0/16", 26, false},
		{Options{ClusterCIDR: "fd00:10:244::/48"}, "fd00:10:244::/48", 64, false},
		{Options{ClusterCIDR: "10.244.0.0"}, "", 0, true},
		{Options{ClusterCIDR: "10.244.0.0/24", NodeMaskSize: 16}, "", 0, true},
		{Options{NodeMaskSize: 33}, "", 0, true},
	}
	for _, tc := range cases {
		cluster, mask, err := tc.o.parse()
		if tc.wantFail {
			if err == nil {
				t.Errorf("%+v: no error", tc.o)
			}
			continue
		}
		if err != nil || cluster.String() != tc.cluster || mask != tc.mask {
			t.Errorf("%+v: got %s /%d %v", tc.o, cluster, mask, err)
		}
	}
}

func TestNodeCIDRs(t *testing.T) {
	n := &corev1.Node{Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00::/64", "bogus"}}}
	got := NodeCIDRs(n)
	if len(got) != 2 || got[0].String() != "10.244.1.0/24" || got[1].String() != "fd00::/64" {
		t.Fatalf("got %v", got)
	}
	if got := NodeCIDRs(&corev1.Node{}); len(got) != 0 {
		t.Fatalf("empty node: %v", got)
	}
}
