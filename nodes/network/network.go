// Package network is the pod network of one host: every pod sandbox is a network namespace
// owned by the agent (pinned under <StateDir>/netns/<pod UID>, so it survives agent restarts),
// attached with libcni to a bridge with the standard bridge, host-local and loopback plugins;
// and routes in the host namespace send each other host's pod CIDR via that host's address.
package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// PodNetwork is a pod's sandbox: its network namespace and addresses.
type PodNetwork struct {
	NetNSPath string
	IPs       []net.IP
}

// Network is the pod network of the host namespace it was created in.
type Network struct {
	p      parsed
	cni    *libcni.CNIConfig
	list   *libcni.NetworkConfigList
	hostNS netns.NsHandle
	nl     *netlink.Handle
	locks  keyedMutex
	// routesMu serializes SyncRoutes.
	routesMu sync.Mutex
	log      *logrus.Entry
}

// New prepares the pod network in the calling thread's network namespace (the host's; an
// agent started with `nsenter --net=...` is wholly inside it): it checks for the CNI plugins,
// writes the conflist, enables IP forwarding and adds an unreachable route for the cluster
// CIDR, so that pod traffic to a subnet with no route yet is refused here instead of leaking
// to the default gateway. Later calls may come from any goroutine.
func New(cfg Config) (*Network, error) {
	p, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	for _, plugin := range requiredPlugins {
		if _, err := invoke.FindInPath(plugin, p.CNIBinDirs); err != nil {
			return nil, fmt.Errorf("pod network: CNI plugin %q not found in %v: install Debian's containernetworking-plugins: %w", plugin, p.CNIBinDirs, err)
		}
	}
	for _, dir := range []string{p.netnsDir(), p.ipamDir(), p.cacheDir()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("pod network: create %s: %w", dir, err)
		}
	}
	conf, err := p.conflist()
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(p.confPath(), conf); err != nil {
		return nil, fmt.Errorf("pod network: write %s: %w", p.confPath(), err)
	}
	list, err := libcni.NetworkConfFromBytes(conf)
	if err != nil {
		return nil, fmt.Errorf("pod network: parse generated conflist: %w", err)
	}
	hostNS, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("pod network: open the host network namespace: %w", err)
	}
	nl, err := netlink.NewHandleAt(hostNS)
	if err != nil {
		hostNS.Close()
		return nil, fmt.Errorf("pod network: netlink in the host network namespace: %w", err)
	}
	n := &Network{
		p:      p,
		cni:    libcni.NewCNIConfigWithCacheDir(p.CNIBinDirs, p.cacheDir(), &hostExec{ns: hostNS}),
		list:   list,
		hostNS: hostNS,
		nl:     nl,
		locks:  keyedMutex{m: map[string]*keyedEntry{}},
		log:    p.Log.WithFields(logrus.Fields{"podCIDR": p.podCIDR.String(), "bridge": p.Bridge}),
	}
	if err := inNetNS(hostNS, func() error { return enableForwarding(p.podCIDR.Addr().Is6()) }); err != nil {
		n.Close()
		return nil, fmt.Errorf("pod network: %w", err)
	}
	if err := n.nl.RouteReplace(clusterRoute(p.cluster)); err != nil {
		n.Close()
		return nil, fmt.Errorf("pod network: add unreachable route for the cluster CIDR %s: %w", p.cluster, err)
	}
	n.log.Info("pod network ready")
	return n, nil
}

// Close releases the handles on the host namespace. Sandboxes and routes stay: pods keep
// their network while the agent restarts.
func (n *Network) Close() error {
	n.nl.Close()
	return n.hostNS.Close()
}

func enableForwarding(v6 bool) error {
	path := "/proc/sys/net/ipv4/ip_forward"
	if v6 {
		path = "/proc/sys/net/ipv6/conf/all/forwarding"
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable IP forwarding (%s): %w", path, err)
	}
	// A pod reaching a Service whose chosen endpoint sits on the same bridge gets its reply
	// straight over the bridge; only with bridged traffic passing netfilter does conntrack
	// undo the Service DNAT. Kernels without br_netfilter have no such file.
	if err := os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("1"), 0o644); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("let bridged pod traffic pass netfilter: %w", err)
	}
	return nil
}

// containerIDRe is what libcni accepts as a container ID; pod UIDs are UUIDs.
var containerIDRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

func checkUID(uid string) error {
	if !containerIDRe.MatchString(uid) || len(uid) > 128 {
		return fmt.Errorf("pod UID %q: want letters, digits, '-', '_' or '.'", uid)
	}
	return nil
}

func (n *Network) netnsPath(uid string) string { return filepath.Join(n.p.netnsDir(), uid) }

func (n *Network) runtimeConf(uid, namespace, name, nsPath string) *libcni.RuntimeConf {
	args := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_UID", uid}}
	if namespace != "" || name != "" {
		args = append(args, [2]string{"K8S_POD_NAMESPACE", namespace}, [2]string{"K8S_POD_NAME", name},
			[2]string{"K8S_POD_INFRA_CONTAINER_ID", uid})
	}
	return &libcni.RuntimeConf{ContainerID: uid, NetNS: nsPath, IfName: podIfName, Args: args}
}

// SetupPod gives the pod a sandbox attached to the pod network and returns it. It is
// idempotent: a pod that has a sandbox gets it back with the same IP. A sandbox whose setup
// was cut short (agent killed) is detached and attached again; a leftover whose namespace is
// gone (host rebooted) is released and made anew, with the address it had before if that is
// still free, so that EndpointSlices, DNS and routes written before the reboot stay right
// while the host cannot reach the API.
func (n *Network) SetupPod(ctx context.Context, uid, namespace, name string) (PodNetwork, error) {
	if err := checkUID(uid); err != nil {
		return PodNetwork{}, fmt.Errorf("set up pod network: %w", err)
	}
	defer n.locks.lock(uid)()
	path := n.netnsPath(uid)
	rt := n.runtimeConf(uid, namespace, name, path)
	log := n.log.WithFields(logrus.Fields{"pod": namespace + "/" + name, "uid": uid})
	var prevIP net.IP // the address of a sandbox lost to a reboot, to ask for again
	if isNetNS(path) {
		if pn, ok := n.cached(rt); ok {
			return pn, nil
		}
		log.Warn("pod sandbox without a finished attachment: attaching again")
		if err := n.cni.DelNetworkList(ctx, n.list, rt); err != nil {
			return PodNetwork{}, fmt.Errorf("set up pod network of %s/%s: detach the unfinished sandbox: %w", namespace, name, err)
		}
	} else {
		if _, err := os.Lstat(path); err == nil {
			// Read before the release: CNI DEL drops the cached result.
			if prev, ok := n.cached(rt); ok {
				prevIP = n.reusableIP(prev.IPs, log)
			}
			if prevIP != nil {
				log.WithField("previousIP", prevIP).Warn("pod sandbox namespace is gone (host restarted?): making it anew with the same address")
			} else {
				log.Warn("pod sandbox namespace is gone (host restarted?): releasing its address and making a new one")
			}
			if err := n.release(ctx, uid, namespace, name); err != nil {
				return PodNetwork{}, fmt.Errorf("set up pod network of %s/%s: %w", namespace, name, err)
			}
		}
		if err := createNetNS(path); err != nil {
			return PodNetwork{}, fmt.Errorf("set up pod network of %s/%s: %w", namespace, name, err)
		}
	}
	if prevIP != nil {
		pn, err := n.attach(ctx, withRequestedIP(rt, prevIP))
		if err == nil {
			log.WithField("ips", pn.IPs).Info("pod network set up again with its previous address")
			return pn, nil
		}
		// Never fail the pod for its old address (taken meanwhile): a new one will do. The failed
		// attempt may have left a veth in the namespace, so start again from nothing.
		log.WithError(err).WithField("previousIP", prevIP).Warn("pod cannot have its previous address back: allocating a new one")
		if err := n.release(ctx, uid, namespace, name); err != nil {
			return PodNetwork{}, fmt.Errorf("set up pod network of %s/%s: clean up the attempt with the previous address: %w", namespace, name, err)
		}
		if err := createNetNS(path); err != nil {
			return PodNetwork{}, fmt.Errorf("set up pod network of %s/%s: %w", namespace, name, err)
		}
	}
	pn, err := n.attach(ctx, rt)
	if err == nil {
		log.WithField("ips", pn.IPs).Info("pod network set up")
		return pn, nil
	}
	// Leave nothing half made: the address goes back to the pool, the namespace away.
	if rerr := n.release(context.WithoutCancel(ctx), uid, namespace, name); rerr != nil {
		log.WithError(rerr).Warn("clean up after a failed pod network setup")
	}
	return PodNetwork{}, fmt.Errorf("set up pod network of %s/%s: %w", namespace, name, err)
}

// attach runs CNI ADD on the sandbox at rt.NetNS.
func (n *Network) attach(ctx context.Context, rt *libcni.RuntimeConf) (PodNetwork, error) {
	res, err := n.cni.AddNetworkList(ctx, n.list, rt)
	if err != nil {
		return PodNetwork{}, err
	}
	return podNetworkFrom(res, rt.NetNS)
}

// reusableIP picks, of a lost sandbox's addresses, the one to ask host-local for again: the
// first inside this host's pod CIDR and not its gateway. host-local 1.1.1 takes a single IP in
// CNI_ARGS, and the conflist has a single range, so one is all a pod has. Nil if none fits
// (the pod CIDR changed): asking would only fail.
func (n *Network) reusableIP(ips []net.IP, log *logrus.Entry) net.IP {
	for _, ip := range ips {
		a, ok := netip.AddrFromSlice(ip)
		if ok && n.p.podCIDR.Contains(a.Unmap()) && a.Unmap() != n.p.gateway {
			return ip
		}
	}
	if len(ips) > 0 {
		log.WithField("previousIPs", ips).Warn("pod's previous address is outside the pod CIDR (changed?): allocating a new one")
	}
	return nil
}

// withRequestedIP is rt asking host-local for ip (CNI_ARGS IP=; the other plugins ignore it
// under IgnoreUnknown). Only for the re-attachment after a reboot: rt is left as it was.
func withRequestedIP(rt *libcni.RuntimeConf, ip net.IP) *libcni.RuntimeConf {
	c := *rt
	c.Args = append(slices.Clone(rt.Args), [2]string{"IP", ip.String()})
	return &c
}

// cached returns the sandbox recorded by a finished ADD.
func (n *Network) cached(rt *libcni.RuntimeConf) (PodNetwork, bool) {
	res, err := n.cni.GetNetworkListCachedResult(n.list, rt)
	if err != nil || res == nil {
		return PodNetwork{}, false
	}
	pn, err := podNetworkFrom(res, rt.NetNS)
	if err != nil {
		return PodNetwork{}, false
	}
	return pn, true
}

func podNetworkFrom(res types.Result, path string) (PodNetwork, error) {
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("read CNI result: %w", err)
	}
	pn := PodNetwork{NetNSPath: path}
	for _, ip := range r.IPs {
		pn.IPs = append(pn.IPs, ip.Address.IP)
	}
	if len(pn.IPs) == 0 {
		return PodNetwork{}, errors.New("the CNI result has no IP address")
	}
	return pn, nil
}

// PodNetwork returns the pod's sandbox if it has a finished one.
func (n *Network) PodNetwork(ctx context.Context, uid string) (PodNetwork, bool) {
	if checkUID(uid) != nil {
		return PodNetwork{}, false
	}
	defer n.locks.lock(uid)()
	path := n.netnsPath(uid)
	if !isNetNS(path) {
		return PodNetwork{}, false
	}
	return n.cached(n.runtimeConf(uid, "", "", path))
}

// TeardownPod detaches the pod's sandbox, releases its address and removes its namespace.
// It is idempotent: a pod without a sandbox is fine.
func (n *Network) TeardownPod(ctx context.Context, uid string) error {
	if err := checkUID(uid); err != nil {
		return fmt.Errorf("tear down pod network: %w", err)
	}
	defer n.locks.lock(uid)()
	path := n.netnsPath(uid)
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		if _, ok := n.cached(n.runtimeConf(uid, "", "", path)); !ok {
			return nil
		}
	}
	if err := n.release(ctx, uid, "", ""); err != nil {
		return fmt.Errorf("tear down pod network of %s: %w", uid, err)
	}
	n.log.WithField("uid", uid).Info("pod network torn down")
	return nil
}

// release runs CNI DEL (which frees the address even when the namespace is gone) and removes
// the namespace. Caller holds the pod's lock.
func (n *Network) release(ctx context.Context, uid, namespace, name string) error {
	path := n.netnsPath(uid)
	nsPath := path
	if !isNetNS(path) {
		// The plugins treat an empty namespace as "nothing left inside": release IPAM only.
		nsPath = ""
	}
	if err := n.cni.DelNetworkList(ctx, n.list, n.runtimeConf(uid, namespace, name, nsPath)); err != nil {
		return fmt.Errorf("detach sandbox: %w", err)
	}
	return removeNetNS(path)
}

// Pods lists the UIDs of the pods that have sandboxes (finished or not), for garbage
// collection against the pods bound to this host.
func (n *Network) Pods() ([]string, error) {
	entries, err := os.ReadDir(n.p.netnsDir())
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	var out []string
	for _, e := range entries {
		if checkUID(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// hostExec runs the CNI plugins in the host namespace whatever thread calls libcni.
type hostExec struct {
	invoke.RawExec
	version.PluginDecoder
	ns netns.NsHandle
}

// ExecPlugin runs one plugin in the host network namespace.
func (e *hostExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	var out []byte
	err := inNetNS(e.ns, func() error {
		var err error
		out, err = e.RawExec.ExecPlugin(ctx, pluginPath, stdinData, environ)
		return err
	})
	return out, err
}

// keyedMutex serializes work per pod UID.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
