package network

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/sirupsen/logrus"
)

// Defaults of Config.
const (
	DefaultClusterCIDR = "10.244.0.0/16"
	DefaultBridge      = "flotilla0"
)

// DefaultCNIBinDirs are searched for the CNI plugins: Debian's containernetworking-plugins,
// then the upstream tarball's location.
var DefaultCNIBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// NetworkName is the CNI network name; host-local keeps its leases under
// <StateDir>/ipam/<NetworkName>/.
const NetworkName = "flotilla"

// cniVersion is the highest spec version Debian 12's plugins (1.1.1) speak.
const cniVersion = "1.0.0"

// podIfName is the pod's interface.
const podIfName = "eth0"

// requiredPlugins must be found in CNIBinDirs.
var requiredPlugins = []string{"bridge", "host-local", "loopback"}

// Config describes this host's pod network.
type Config struct {
	PodCIDR     string   // this node's subnet (Node spec.podCIDR), required
	ClusterCIDR string   // every node's pod subnets together; default 10.244.0.0/16
	Bridge      string   // default "flotilla0"
	CNIBinDirs  []string // default /usr/lib/cni, /opt/cni/bin
	StateDir    string   // host-local IPAM data, CNI cache, netns bind mounts (<data-dir>/network), required
	MTU         int      // 0 = the kernel's default for the bridge and veths
	Log         *logrus.Entry
}

// parsed is a checked Config.
type parsed struct {
	Config
	podCIDR, cluster netip.Prefix
	gateway          netip.Addr
}

func (c Config) parse() (parsed, error) {
	if c.ClusterCIDR == "" {
		c.ClusterCIDR = DefaultClusterCIDR
	}
	if c.Bridge == "" {
		c.Bridge = DefaultBridge
	}
	if len(c.CNIBinDirs) == 0 {
		c.CNIBinDirs = DefaultCNIBinDirs
	}
	if c.Log == nil {
		c.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	c.Log = c.Log.WithField("component", "network")
	p := parsed{Config: c}
	if c.StateDir == "" {
		return p, fmt.Errorf("pod network: StateDir is required (such as <data-dir>/network)")
	}
	if c.MTU < 0 || (c.MTU > 0 && c.MTU < 576) {
		return p, fmt.Errorf("pod network: MTU %d is invalid: use 0 for the default or at least 576", c.MTU)
	}
	if len(c.Bridge) > 15 {
		return p, fmt.Errorf("pod network: bridge name %q is longer than 15 characters", c.Bridge)
	}
	var err error
	if p.cluster, err = netip.ParsePrefix(c.ClusterCIDR); err != nil {
		return p, fmt.Errorf("pod network: cluster CIDR %q: %w", c.ClusterCIDR, err)
	}
	p.cluster = p.cluster.Masked()
	if c.PodCIDR == "" {
		return p, fmt.Errorf("pod network: this node has no pod CIDR yet (Node spec.podCIDR is assigned by the leader's nodeipam controller)")
	}
	if p.podCIDR, err = netip.ParsePrefix(c.PodCIDR); err != nil {
		return p, fmt.Errorf("pod network: pod CIDR %q: %w", c.PodCIDR, err)
	}
	p.podCIDR = p.podCIDR.Masked()
	if p.podCIDR.Bits() < p.cluster.Bits() || !p.cluster.Contains(p.podCIDR.Addr()) {
		return p, fmt.Errorf("pod network: pod CIDR %s is not inside the cluster CIDR %s: fix --cluster-cidr or the Node's spec.podCIDR", p.podCIDR, p.cluster)
	}
	if p.podCIDR.Bits() > p.podCIDR.Addr().BitLen()-2 {
		return p, fmt.Errorf("pod network: pod CIDR %s leaves no room for pods", p.podCIDR)
	}
	// host-local's default gateway: the first address of the range, set on the bridge.
	p.gateway = p.podCIDR.Addr().Next()
	return p, nil
}

func (p parsed) ipamDir() string  { return filepath.Join(p.StateDir, "ipam") }
func (p parsed) cacheDir() string { return filepath.Join(p.StateDir, "cache") }
func (p parsed) netnsDir() string { return filepath.Join(p.StateDir, "netns") }
func (p parsed) confPath() string { return filepath.Join(p.StateDir, "10-"+NetworkName+".conflist") }

// Conflist renders the CNI network configuration list: a bridge with the gateway address
// (isGateway) and hairpin mode (a pod reaching itself through a Service VIP), host-local IPAM
// over the pod CIDR with a default route via the bridge, and loopback. No ipMasq: the plugin
// would need iptables, and pod traffic leaving the cluster is masqueraded by the proxy with
// nftables. Pure: tests check it without plugins.
func Conflist(c Config) ([]byte, error) {
	p, err := c.parse()
	if err != nil {
		return nil, err
	}
	return p.conflist()
}

func (p parsed) conflist() ([]byte, error) {
	defaultRoute := "0.0.0.0/0"
	if p.podCIDR.Addr().Is6() {
		defaultRoute = "::/0"
	}
	bridge := map[string]any{
		"type":        "bridge",
		"bridge":      p.Bridge,
		"isGateway":   true,
		"ipMasq":      false,
		"hairpinMode": true,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": p.podCIDR.String(), "gateway": p.gateway.String()}}},
			"routes":  []map[string]string{{"dst": defaultRoute}},
			"dataDir": p.ipamDir(),
		},
	}
	if p.MTU > 0 {
		bridge["mtu"] = p.MTU
	}
	return json.MarshalIndent(map[string]any{
		"cniVersion": cniVersion,
		"name":       NetworkName,
		"plugins":    []any{bridge, map[string]any{"type": "loopback"}},
	}, "", "  ")
}
