package network

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

func TestConflist(t *testing.T) {
	b, err := Conflist(Config{PodCIDR: "10.244.7.0/24", StateDir: "/var/lib/flotilla/network", MTU: 1450})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		t.Fatalf("libcni refuses the conflist: %v\n%s", err, b)
	}
	if list.Name != NetworkName || list.CNIVersion != "1.0.0" || len(list.Plugins) != 2 ||
		list.Plugins[0].Network.Type != "bridge" || list.Plugins[1].Network.Type != "loopback" {
		t.Fatalf("unexpected list: %s", b)
	}
	var bridge struct {
		Bridge      string `json:"bridge"`
		IsGateway   bool   `json:"isGateway"`
		IPMasq      bool   `json:"ipMasq"`
		HairpinMode bool   `json:"hairpinMode"`
		MTU         int    `json:"mtu"`
		IPAM        struct {
			Type    string                `json:"type"`
			Ranges  [][]map[string]string `json:"ranges"`
			Routes  []map[string]string   `json:"routes"`
			DataDir string                `json:"dataDir"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(list.Plugins[0].Bytes, &bridge); err != nil {
		t.Fatal(err)
	}
	if bridge.Bridge != "flotilla0" || !bridge.IsGateway || bridge.IPMasq || !bridge.HairpinMode || bridge.MTU != 1450 {
		t.Errorf("bridge settings: %+v", bridge)
	}
	if bridge.IPAM.Type != "host-local" || bridge.IPAM.DataDir != "/var/lib/flotilla/network/ipam" ||
		bridge.IPAM.Ranges[0][0]["subnet"] != "10.244.7.0/24" || bridge.IPAM.Ranges[0][0]["gateway"] != "10.244.7.1" ||
		bridge.IPAM.Routes[0]["dst"] != "0.0.0.0/0" {
		t.Errorf("ipam settings: %+v", bridge.IPAM)
	}
	if strings.Contains(string(b), `"mtu"`) == false {
		t.Errorf("mtu missing")
	}
	b, _ = Conflist(Config{PodCIDR: "10.244.7.0/24", StateDir: "/x"})
	if strings.Contains(string(b), `"mtu"`) {
		t.Errorf("MTU 0 must leave the plugin default: %s", b)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{StateDir: "/x"}, "no pod CIDR yet"},
		{Config{PodCIDR: "10.244.7.0/24"}, "StateDir is required"},
		{Config{PodCIDR: "10.245.7.0/24", StateDir: "/x"}, "not inside the cluster CIDR"},
		{Config{PodCIDR: "10.244.0.0/8", StateDir: "/x"}, "not inside the cluster CIDR"},
		{Config{PodCIDR: "10.244.7.0", StateDir: "/x"}, "pod CIDR"},
		{Config{PodCIDR: "10.244.7.0/24", ClusterCIDR: "bogus", StateDir: "/x"}, "cluster CIDR"},
		{Config{PodCIDR: "10.244.7.0/31", StateDir: "/x"}, "no room for pods"},
		{Config{PodCIDR: "10.244.7.0/24", StateDir: "/x", MTU: 100}, "MTU 100"},
		{Config{PodCIDR: "10.244.7.0/24", StateDir: "/x", Bridge: "a-very-long-bridge-name"}, "longer than 15"},
	}
	for _, tc := range cases {
		_, err := Conflist(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to mention %q", tc.cfg, err, tc.want)
		}
	}
}

func TestCheckUID(t *testing.T) {
	for _, ok := range []string{"0f1e2d3c-aaaa-bbbb-cccc-0123456789ab", "uid-1", "a.b_c"} {
		if err := checkUID(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", "-x", "a b", strings.Repeat("a", 129)} {
		if checkUID(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
