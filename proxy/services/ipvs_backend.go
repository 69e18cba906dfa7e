package services

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/moby/ipvs"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// IPVSOptions configure the IPVS backend (NewIPVS).
type IPVSOptions struct {
	// NetNS, when set, is the path of the network namespace to program instead of the caller's.
	NetNS string
	// Interface is the dummy interface holding the Service addresses; default flotilla-ipvs0.
	// It stays down: its addresses are local (the kernel adds local routes for them) without the
	// host answering ARP through it.
	Interface string
	// Table is the companion nftables table (ip family) doing what IPVS cannot: masquerade,
	// hairpin SNAT and rejecting frontends without endpoints; default flotilla-ipvs.
	Table string
	// ServiceCIDR holds the ClusterIPs; default 10.96.0.0/12.
	ServiceCIDR netip.Prefix
	// ClusterCIDR is the pod CIDR: sources outside it are masqueraded towards ClusterIPs;
	// default 10.244.0.0/16.
	ClusterCIDR netip.Prefix
	// NodePortMin and NodePortMax bound the NodePort range; default 30000-32767.
	NodePortMin, NodePortMax uint16
	// GracePeriod is how long a removed real server that still has connections stays with
	// weight 0 before it is deleted anyway; default 30s.
	GracePeriod time.Duration
	Log         *logrus.Entry
	// now is the clock (tests).
	now func() time.Time
}

// DefaultIPVSInterface is the dummy interface the IPVS backend binds Service addresses to.
const DefaultIPVSInterface = "flotilla-ipvs0"

// IPVS is the ipvs backend: one IPVS virtual server per Service frontend (masquerading
// forwarding), the frontend addresses on a dummy interface, and a small nftables table for
// masquerade and rejects.
//
// Which virtual servers are ours: those on an address inside ServiceCIDR, on an address bound
// to our dummy interface (externalIPs), or on one of this node's addresses with a port in the
// NodePort range. Everything else in the IPVS table (a load balancer someone configured by
// hand, Docker's swarm services in other namespaces) is left alone.
type IPVS struct {
	opts IPVSOptions

	mu        sync.Mutex
	ready     bool                 // NewIPVS was used
	available bool                 // the IPVS netlink family was found
	draining  map[string]time.Time // "vs|rs" -> when its weight went to 0
	// drainingVS are the virtual servers with a draining real server, with their port's Key:
	// ApplyChanged revisits them on every sync, changed or not, to end the draining.
	drainingVS map[vsKey]string
	nodeIPs    map[netip.Addr]bool // node addresses of the last Apply (ownership)
	compiler   IPVSCompiler        // recompiles only the Service ports that changed
	// nftApplied is the companion table's content as last applied, nil when unknown: an
	// Apply then sends only the set elements that changed.
	nftApplied *ipvsNftState
}

var _ Backend = (*IPVS)(nil)
var _ Resyncer = (*IPVS)(nil)

// NewIPVS returns the IPVS backend; nothing touches the kernel before Apply.
func NewIPVS(o IPVSOptions) *IPVS {
	if o.Interface == "" {
		o.Interface = DefaultIPVSInterface
	}
	if o.Table == "" {
		o.Table = "flotilla-ipvs"
	}
	if !o.ServiceCIDR.IsValid() {
		o.ServiceCIDR = netip.MustParsePrefix("10.96.0.0/12")
	}
	if !o.ClusterCIDR.IsValid() {
		o.ClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
	if o.NodePortMin == 0 && o.NodePortMax == 0 {
		o.NodePortMin, o.NodePortMax = 30000, 32767
	}
	if o.GracePeriod <= 0 {
		o.GracePeriod = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	if o.now == nil {
		o.now = time.Now
	}
	return &IPVS{opts: o, ready: true, draining: map[string]time.Time{}, drainingVS: map[vsKey]string{}, nodeIPs: map[netip.Addr]bool{},
		compiler: IPVSCompiler{serviceCIDR: o.ServiceCIDR}}
}

// CheckIPVS reports whether the kernel offers the IPVS generic netlink family, loading the
// ip_vs module first if it can. github.com/moby/ipvs cannot be asked: without the family it
// logs and then answers every request with success. The error wraps ErrIPVSUnavailable.
func CheckIPVS() error {
	if _, err := netlink.GenlFamilyGet("IPVS"); err == nil {
		return nil
	}
	// A host with the module on disk but not loaded yet (kube-proxy loads it the same way).
	if p, err := exec.LookPath("modprobe"); err == nil {
		_ = exec.Command(p, "-q", "ip_vs").Run()
	}
	if _, err := netlink.GenlFamilyGet("IPVS"); err != nil {
		return fmt.Errorf("%w: the kernel has no IPVS generic netlink family (%v): load ip_vs (modprobe ip_vs) or use --proxy-mode=nftables", ErrIPVSUnavailable, err)
	}
	return nil
}

// vsKey identifies a virtual server.
type vsKey struct {
	addr  netip.Addr
	proto uint16
	port  uint16
}

func (k vsKey) compare(o vsKey) int {
	if c := k.addr.Compare(o.addr); c != 0 {
		return c
	}
	if c := cmp.Compare(k.proto, o.proto); c != 0 {
		return c
	}
	return cmp.Compare(k.port, o.port)
}

func (k vsKey) String() string {
	return fmt.Sprintf("%d/%s", k.proto, netip.AddrPortFrom(k.addr, k.port))
}

func ipvsProto(p v1.Protocol) uint16 {
	switch p {
	case v1.ProtocolUDP:
		return syscall.IPPROTO_UDP
	case v1.ProtocolSCTP:
		return 132
	}
	return syscall.IPPROTO_TCP
}

func keyOf(vs VirtualServer) vsKey {
	return vsKey{addr: vs.Address, proto: ipvsProto(vs.Protocol), port: vs.Port}
}

// ipvsSvcFlagPersistent is IP_VS_SVC_F_PERSISTENT: ClientIP affinity.
const ipvsSvcFlagPersistent = 0x1

func toIPVSService(vs VirtualServer) *ipvs.Service {
	s := &ipvs.Service{
		Address: net.IP(vs.Address.AsSlice()), Protocol: ipvsProto(vs.Protocol), Port: vs.Port,
		SchedName: vs.Scheduler, AddressFamily: syscall.AF_INET,
		// The kernel groups persistent clients by this mask: /32 means per client address.
		Netmask: 0xffffffff,
	}
	if vs.Persistence > 0 {
		s.Flags = ipvsSvcFlagPersistent
		s.Timeout = uint32((vs.Persistence + time.Second - 1) / time.Second)
	}
	return s
}

func toIPVSDest(r RealServer) *ipvs.Destination {
	return &ipvs.Destination{
		Address: net.IP(r.Address.AsSlice()), Port: r.Port, Weight: r.Weight,
		ConnectionFlags: ipvs.ConnectionFlagMasq, AddressFamily: syscall.AF_INET,
	}
}

// serviceDiffers says whether the kernel's service needs an update to match want.
func serviceDiffers(have *ipvs.Service, want *ipvs.Service) bool {
	if have.SchedName != want.SchedName || have.Flags&ipvsSvcFlagPersistent != want.Flags&ipvsSvcFlagPersistent {
		return true
	}
	return want.Flags&ipvsSvcFlagPersistent != 0 && have.Timeout != want.Timeout
}

// PlanRealServersGrace is PlanRealServers with a deadline on draining: a real server that is
// no longer wanted keeps weight 0 while it has connections, but only for grace after it was
// first seen draining (since records when, keyed by ip:port, and is updated in place); then it
// is deleted with whatever connections it still has.
func PlanRealServersGrace(have []KernelRealServer, want []RealServer, since map[netip.AddrPort]time.Time, now time.Time, grace time.Duration) RealServerOps {
	ops := PlanRealServers(have, want)
	key := func(r RealServer) netip.AddrPort { return netip.AddrPortFrom(r.Address, r.Port) }
	wanted := map[netip.AddrPort]bool{}
	for _, r := range want {
		wanted[key(r)] = true
		delete(since, key(r))
	}
	deleted := map[netip.AddrPort]bool{}
	for _, d := range ops.Delete {
		deleted[key(d)] = true
		delete(since, key(d))
	}
	for _, u := range ops.Update {
		if u.Weight == 0 && !wanted[key(u)] {
			if _, ok := since[key(u)]; !ok {
				since[key(u)] = now
			}
		}
	}
	for _, h := range have {
		k := key(h.RealServer)
		if wanted[k] || deleted[k] || h.Weight != 0 {
			continue
		}
		t, ok := since[k]
		if !ok {
			// Draining before we knew (agent restart): the grace starts now.
			since[k] = now
			continue
		}
		if now.Sub(t) >= grace {
			ops.Delete = append(ops.Delete, h.RealServer)
			delete(since, k)
		}
	}
	for k := range since {
		present := false
		for _, h := range have {
			if key(h.RealServer) == k {
				present = true
				break
			}
		}
		if !present {
			delete(since, k)
		}
	}
	return ops
}

// withNetNS runs fn on a thread inside the network namespace at path ("" runs it in place).
func withNetNS(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current network namespace: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromPath(path)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open network namespace %s: %w", path, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace %s: %w", path, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: the runtime discards it rather than reuse it in the
		// wrong namespace.
		return fmt.Errorf("return from network namespace %s: %w", path, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// ipvsSysctls are set in the programmed namespace. conntrack keeps conntrack entries for IPVS
// connections so the nftables masquerade applies; the expire settings make connections to a
// deleted real server fail fast and stop persistence templates pinning clients to a server
// with weight 0.
var ipvsSysctls = map[string]string{
	"net/ipv4/vs/conntrack":                 "1",
	"net/ipv4/vs/expire_nodest_conn":        "1",
	"net/ipv4/vs/expire_quiescent_template": "1",
}

func (b *IPVS) setSysctls() error {
	return withNetNS(b.opts.NetNS, func() error {
		keys := make([]string, 0, len(ipvsSysctls))
		for k := range ipvsSysctls {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := filepath.Join("/proc/sys", k)
			if cur, err := os.ReadFile(p); err == nil && string(cur) == ipvsSysctls[k]+"\n" {
				continue
			}
			if err := os.WriteFile(p, []byte(ipvsSysctls[k]), 0o644); err != nil {
				return fmt.Errorf("set sysctl %s: %w", k, err)
			}
		}
		return nil
	})
}

// handles opens the IPVS and rtnetlink handles for the programmed namespace.
func (b *IPVS) handles() (*ipvs.Handle, *netlink.Handle, error) {
	ih, err := ipvs.New(b.opts.NetNS)
	if err != nil {
		return nil, nil, fmt.Errorf("open IPVS netlink socket: %w", err)
	}
	var nh *netlink.Handle
	if b.opts.NetNS == "" {
		nh, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		var ns netns.NsHandle
		ns, err = netns.GetFromPath(b.opts.NetNS)
		if err == nil {
			// Only rtnetlink: NewHandleAt would also open xfrm, absent from small kernels.
			nh, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
			ns.Close()
		}
	}
	if err != nil {
		ih.Close()
		return nil, nil, fmt.Errorf("open rtnetlink socket: %w", err)
	}
	return ih, nh, nil
}

func (b *IPVS) check() error {
	if !b.available {
		if err := CheckIPVS(); err != nil {
			return err
		}
		b.available = true
	}
	if !b.ready {
		return errors.New("ipvs backend: create it with NewIPVS")
	}
	return nil
}

// Apply makes the kernel match ds: virtual servers, real servers, bound addresses and the
// companion nftables table. It reads the kernel state every time, so it also repairs drift.
func (b *IPVS) Apply(ds DesiredState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return err
	}
	return b.apply(ds)
}

func (b *IPVS) apply(ds DesiredState) error {
	st := b.compiler.Compile(ds)
	if err := b.setSysctls(); err != nil {
		return err
	}
	ih, nh, link, done, err := b.open()
	if err != nil {
		return err
	}
	defer done()
	bound, err := linkAddrs(nh, link)
	if err != nil {
		return err
	}
	for ip := range b.nodeIPs {
		delete(b.nodeIPs, ip)
	}
	for _, ip := range ds.NodeIPs {
		b.nodeIPs[ip] = true
	}
	want := map[netip.Addr]bool{}
	for _, a := range st.BoundAddresses {
		want[a] = true
		if !bound[a] {
			if err := nh.AddrAdd(link, hostAddr(a)); err != nil && !errors.Is(err, syscall.EEXIST) {
				return fmt.Errorf("bind %s to %s: %w", a, b.opts.Interface, err)
			}
		}
	}
	if err := b.syncVirtualServers(ih, st, bound); err != nil {
		return err
	}
	for a := range bound {
		if !want[a] {
			if err := nh.AddrDel(link, hostAddr(a)); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
				return fmt.Errorf("unbind %s from %s: %w", a, b.opts.Interface, err)
			}
		}
	}
	if err := b.applyNft(b.compiler.nftState(b.opts.ClusterCIDR)); err != nil {
		return fmt.Errorf("companion nftables table ip %s: %w", b.opts.Table, err)
	}
	return nil
}

// ApplyChanged is Apply for the ports named by keys (changeApplier): it recompiles those and
// asks the kernel about their virtual servers alone, binds and unbinds the addresses that
// came and went, and sends the companion table's element changes. Drift elsewhere is left to
// the next Resync. Without a successful Apply before it (or when the change cannot be
// applied alone, see IPVSCompiler.CompileChanged) it is Apply.
func (b *IPVS) ApplyChanged(ds DesiredState, keys []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return err
	}
	if b.nftApplied == nil || b.nftApplied.clusterCIDR != b.opts.ClusterCIDR {
		return b.apply(ds)
	}
	ch, ok := b.compiler.CompileChanged(ds, keys)
	if !ok {
		return b.apply(ds)
	}
	if err := b.applyChange(ch); err != nil {
		b.nftApplied = nil // the next Apply compares everything and rebuilds the table
		return err
	}
	return nil
}

func (b *IPVS) applyChange(ch IPVSChange) error {
	if len(ch.Remove)+len(ch.Sync)+len(ch.Bind)+len(ch.Unbind)+len(b.drainingVS) > 0 {
		ih, nh, link, done, err := b.open()
		if err != nil {
			return err
		}
		defer done()
		for _, a := range ch.Bind {
			if err := nh.AddrAdd(link, hostAddr(a)); err != nil && !errors.Is(err, syscall.EEXIST) {
				return fmt.Errorf("bind %s to %s: %w", a, b.opts.Interface, err)
			}
		}
		for _, vs := range ch.Remove {
			k, ws := keyOf(vs), toIPVSService(vs)
			if _, err := ih.GetService(ws); err != nil {
				continue // gone already
			}
			if err := ih.DelService(ws); err != nil {
				return fmt.Errorf("delete IPVS service %s: %w", k, err)
			}
			b.forgetDraining(k)
			b.opts.Log.WithField("virtualServer", k.String()).Info("IPVS virtual server removed")
		}
		synced := map[vsKey]bool{}
		for _, vs := range ch.Sync {
			k, ws := keyOf(vs), toIPVSService(vs)
			have, err := ih.GetService(ws)
			if err != nil {
				if err := b.createVirtualServer(ih, k, vs); err != nil {
					return err
				}
				continue
			}
			if serviceDiffers(have, ws) {
				if err := ih.UpdateService(ws); err != nil {
					return fmt.Errorf("update IPVS service %s (%s): %w", k, vs.Service, err)
				}
			}
			if err := b.syncRealServers(ih, k, vs, ws); err != nil {
				return err
			}
			synced[k] = true
		}
		// Draining real servers end by time or when their connections do: look again.
		for k, port := range b.drainingVS {
			vs, ok := b.compiler.frontend(port, k)
			if !ok {
				delete(b.drainingVS, k) // its port is gone: the virtual server went with it
				continue
			}
			if !synced[k] {
				if err := b.syncRealServers(ih, k, vs, toIPVSService(vs)); err != nil {
					return err
				}
			}
		}
		for _, a := range ch.Unbind {
			if err := nh.AddrDel(link, hostAddr(a)); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
				return fmt.Errorf("unbind %s from %s: %w", a, b.opts.Interface, err)
			}
		}
	}
	if err := b.patchNftDelta(ch.nft); err != nil {
		return fmt.Errorf("companion nftables table ip %s: %w", b.opts.Table, err)
	}
	return nil
}

// hostAddr is a as a /32 interface address.
func hostAddr(a netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(32, 32)}}
}

// Resync is Apply, which always compares the IPVS state against the kernel, with the
// companion table rebuilt whole (someone may have changed it).
func (b *IPVS) Resync(ds DesiredState) error {
	b.mu.Lock()
	b.nftApplied = nil
	b.mu.Unlock()
	return b.Apply(ds)
}

// open returns the IPVS and netlink handles and the dummy interface, created if missing;
// done closes the handles.
func (b *IPVS) open() (ih *ipvs.Handle, nh *netlink.Handle, link netlink.Link, done func(), err error) {
	if ih, nh, err = b.handles(); err != nil {
		return nil, nil, nil, nil, err
	}
	if link, err = b.ensureLink(nh); err != nil {
		ih.Close()
		nh.Close()
		return nil, nil, nil, nil, err
	}
	return ih, nh, link, func() { ih.Close(); nh.Close() }, nil
}

func (b *IPVS) ensureLink(nh *netlink.Handle) (netlink.Link, error) {
	link, err := nh.LinkByName(b.opts.Interface)
	if err == nil {
		return link, nil
	}
	var nf netlink.LinkNotFoundError
	if !errors.As(err, &nf) {
		return nil, fmt.Errorf("look up interface %s: %w", b.opts.Interface, err)
	}
	if err := nh.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: b.opts.Interface}}); err != nil && !errors.Is(err, syscall.EEXIST) {
		return nil, fmt.Errorf("create dummy interface %s (needs the dummy kernel module): %w", b.opts.Interface, err)
	}
	link, err = nh.LinkByName(b.opts.Interface)
	if err != nil {
		return nil, fmt.Errorf("look up interface %s: %w", b.opts.Interface, err)
	}
	return link, nil
}

func linkAddrs(nh *netlink.Handle, link netlink.Link) (map[netip.Addr]bool, error) {
	addrs, err := nh.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", link.Attrs().Name, err)
	}
	out := map[netip.Addr]bool{}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok {
			out[ip] = true
		}
	}
	return out, nil
}

// owned says whether a kernel virtual server is one this backend manages (see IPVS).
func (b *IPVS) owned(k vsKey, bound map[netip.Addr]bool) bool {
	if b.opts.ServiceCIDR.Contains(k.addr) || bound[k.addr] {
		return true
	}
	return b.nodeIPs[k.addr] && k.port >= b.opts.NodePortMin && k.port <= b.opts.NodePortMax
}

func (b *IPVS) syncVirtualServers(ih *ipvs.Handle, st IPVSState, bound map[netip.Addr]bool) error {
	want := map[vsKey]VirtualServer{}
	for _, vs := range st.VirtualServers {
		want[keyOf(vs)] = vs
	}
	have, err := ih.GetServices()
	if err != nil {
		return fmt.Errorf("list IPVS services: %w", err)
	}
	present := map[vsKey]bool{}
	log := b.opts.Log
	for _, s := range have {
		if s.FWMark != 0 || s.AddressFamily != syscall.AF_INET {
			continue
		}
		addr, ok := netip.AddrFromSlice(s.Address.To4())
		if !ok {
			continue
		}
		k := vsKey{addr: addr, proto: s.Protocol, port: s.Port}
		vs, wanted := want[k]
		if !wanted {
			if b.owned(k, bound) {
				if err := ih.DelService(s); err != nil {
					return fmt.Errorf("delete IPVS service %s: %w", k, err)
				}
				b.forgetDraining(k)
				log.WithField("virtualServer", k.String()).Info("IPVS virtual server removed")
			}
			continue
		}
		present[k] = true
		ws := toIPVSService(vs)
		if serviceDiffers(s, ws) {
			if err := ih.UpdateService(ws); err != nil {
				return fmt.Errorf("update IPVS service %s (%s): %w", k, vs.Service, err)
			}
		}
		if err := b.syncRealServers(ih, k, vs, ws); err != nil {
			return err
		}
	}
	keys := make([]vsKey, 0, len(want))
	for k := range want {
		if !present[k] {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		if err := b.createVirtualServer(ih, k, want[k]); err != nil {
			return err
		}
	}
	return nil
}

// createVirtualServer creates vs with its real servers.
func (b *IPVS) createVirtualServer(ih *ipvs.Handle, k vsKey, vs VirtualServer) error {
	ws := toIPVSService(vs)
	if err := ih.NewService(ws); err != nil {
		return fmt.Errorf("create IPVS service %s (%s, scheduler %s: is ip_vs_%s loaded?): %w", k, vs.Service, vs.Scheduler, vs.Scheduler, err)
	}
	for _, r := range vs.RealServers {
		if err := ih.NewDestination(ws, toIPVSDest(r)); err != nil {
			return fmt.Errorf("add real server %s to IPVS service %s: %w", netip.AddrPortFrom(r.Address, r.Port), k, err)
		}
	}
	b.opts.Log.WithFields(logrus.Fields{"virtualServer": k.String(), "service": vs.Service, "realServers": len(vs.RealServers)}).Debug("IPVS virtual server created")
	return nil
}

func drainPrefix(k vsKey) string { return k.String() + "|" }

func (b *IPVS) forgetDraining(k vsKey) {
	delete(b.drainingVS, k)
	p := drainPrefix(k)
	for d := range b.draining {
		if len(d) > len(p) && d[:len(p)] == p {
			delete(b.draining, d)
		}
	}
}

func (b *IPVS) syncRealServers(ih *ipvs.Handle, k vsKey, vs VirtualServer, ws *ipvs.Service) error {
	dests, err := ih.GetDestinations(ws)
	if err != nil {
		return fmt.Errorf("list real servers of IPVS service %s: %w", k, err)
	}
	var have []KernelRealServer
	for _, d := range dests {
		ip, ok := netip.AddrFromSlice(d.Address.To4())
		if !ok {
			continue
		}
		have = append(have, KernelRealServer{RealServer: RealServer{Address: ip, Port: d.Port, Weight: d.Weight}, ActiveConns: d.ActiveConnections, InactiveConns: d.InactiveConnections})
	}
	// The grace bookkeeping lives per virtual server; translate to the pure planner's keys.
	p := drainPrefix(k)
	since := map[netip.AddrPort]time.Time{}
	for d, t := range b.draining {
		if len(d) > len(p) && d[:len(p)] == p {
			if ap, err := netip.ParseAddrPort(d[len(p):]); err == nil {
				since[ap] = t
			}
			delete(b.draining, d)
		}
	}
	ops := PlanRealServersGrace(have, vs.RealServers, since, b.opts.now(), b.opts.GracePeriod)
	for ap, t := range since {
		b.draining[p+ap.String()] = t
	}
	if len(since) > 0 {
		b.drainingVS[k] = vs.Service
	} else {
		delete(b.drainingVS, k)
	}
	log := b.opts.Log.WithFields(logrus.Fields{"virtualServer": k.String(), "service": vs.Service})
	for _, r := range ops.Delete {
		if err := ih.DelDestination(ws, toIPVSDest(r)); err != nil {
			return fmt.Errorf("delete real server %s of IPVS service %s: %w", netip.AddrPortFrom(r.Address, r.Port), k, err)
		}
		log.WithField("realServer", netip.AddrPortFrom(r.Address, r.Port).String()).Debug("IPVS real server deleted")
	}
	for _, r := range ops.Update {
		if err := ih.UpdateDestination(ws, toIPVSDest(r)); err != nil {
			return fmt.Errorf("set weight %d on real server %s of IPVS service %s: %w", r.Weight, netip.AddrPortFrom(r.Address, r.Port), k, err)
		}
		if r.Weight == 0 {
			log.WithField("realServer", netip.AddrPortFrom(r.Address, r.Port).String()).Info("IPVS real server draining (weight 0)")
		}
	}
	for _, r := range ops.Add {
		if err := ih.NewDestination(ws, toIPVSDest(r)); err != nil {
			return fmt.Errorf("add real server %s to IPVS service %s: %w", netip.AddrPortFrom(r.Address, r.Port), k, err)
		}
	}
	return nil
}

// Cleanup deletes our virtual servers (by the ownership rule), the dummy interface and the
// companion nftables table.
func (b *IPVS) Cleanup() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return err
	}
	ih, nh, err := b.handles()
	if err != nil {
		return err
	}
	defer ih.Close()
	defer nh.Close()
	bound := map[netip.Addr]bool{}
	link, lerr := nh.LinkByName(b.opts.Interface)
	if lerr == nil {
		if bound, err = linkAddrs(nh, link); err != nil {
			return err
		}
	}
	if err := b.syncVirtualServers(ih, IPVSState{}, bound); err != nil {
		return err
	}
	if lerr == nil {
		if err := nh.LinkDel(link); err != nil {
			return fmt.Errorf("delete interface %s: %w", b.opts.Interface, err)
		}
	}
	b.nftApplied = nil
	return b.deleteNft()
}
