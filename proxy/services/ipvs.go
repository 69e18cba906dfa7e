package services

import (
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
)

// IPVSSchedulers are the schedulers the flotilla.dev/ipvs-scheduler annotation may name.
var IPVSSchedulers = map[string]bool{"rr": true, "lc": true, "dh": true, "sh": true, "sed": true, "nq": true}

// DefaultIPVSScheduler is used when the annotation is absent or names an unknown scheduler.
const DefaultIPVSScheduler = "rr"

// IPVSState is the IPVS form of a DesiredState: virtual servers with their real servers, the
// addresses to bind on the dummy interface so the kernel accepts them as local, and what the
// companion nftables table still has to do (reject without endpoints, masquerade).
type IPVSState struct {
	VirtualServers []VirtualServer
	// BoundAddresses go on the dummy interface (ClusterIPs and externalIPs).
	BoundAddresses []netip.Addr
	// Reject lists frontends without any endpoint: new connections get a reset.
	Reject []VirtualServer
}

// VirtualServer is one IPVS service (address, protocol, port).
type VirtualServer struct {
	Address  netip.Addr
	Protocol v1.Protocol
	Port     uint16
	// Scheduler is one of IPVSSchedulers.
	Scheduler string
	// Persistence is the ClientIP affinity timeout (IPVS persistent service); 0 for none.
	Persistence time.Duration
	// Masquerade: sources of this frontend must be SNATed (externalTrafficPolicy Cluster).
	Masquerade bool
	// Firewalled: only SourceRanges may reach this frontend (a load-balancer address of a
	// Service with source ranges); the companion table drops everyone else.
	Firewalled   bool
	SourceRanges []netip.Prefix
	RealServers  []RealServer
	Service      string // ServicePort.Key, for logs
}

// RealServer is one IPVS destination.
type RealServer struct {
	Address netip.Addr
	Port    uint16
	Weight  int
}

// CompileIPVS turns ds into virtual servers: one per ClusterIP, externalIP and NodePort on each
// host address, each with the endpoints its traffic policy allows.
//
// IPVS has no per-source choice inside one virtual server, so externalTrafficPolicy Local
// gives the NodePort/externalIP servers the local endpoints only (pods and the host reaching
// them through this node see the same), and a policy that leaves no endpoint gives a virtual
// server without real servers (the kernel drops), unlike nftables' short-circuit.
func CompileIPVS(ds DesiredState) IPVSState {
	return new(IPVSCompiler).Compile(ds)
}

// IPVSCompiler is CompileIPVS with a memory: a Service port equal to the one of the previous
// call (and the same host addresses) keeps its virtual servers, so one changed Service
// compiles one port's frontends, not every port's. It also keeps the companion table's
// content and the addresses to bind as counts over all ports, so CompileChanged can say what
// one change adds and removes without a walk over every Service. The zero value is ready; it
// is not safe for concurrent use.
type IPVSCompiler struct {
	// serviceCIDR tells ClusterIP frontends apart in the companion table (NewIPVS sets it).
	serviceCIDR netip.Prefix
	nodeIPs     []netip.Addr
	ports       map[string]*ipvsPort
	gen         uint64
	idx         ipvsIndex
}

// ipvsPort is what one Service port compiled to.
type ipvsPort struct {
	sp        ServicePort
	frontends []VirtualServer
	reject    bool // no endpoint at all: the frontends go to IPVSState.Reject
	gen       uint64
}

func newIPVSPort(sp ServicePort, nodeIPs []netip.Addr) *ipvsPort {
	return &ipvsPort{sp: sp, frontends: ipvsFrontends(sp, nodeIPs), reject: len(sp.ClusterEndpoints) == 0}
}

// Compile is CompileIPVS, reusing the ports that did not change.
func (c *IPVSCompiler) Compile(ds DesiredState) IPVSState {
	if c.ports == nil || !slices.Equal(c.nodeIPs, ds.NodeIPs) {
		// NodePort frontends exist once per host address.
		c.ports, c.nodeIPs = map[string]*ipvsPort{}, slices.Clone(ds.NodeIPs)
	}
	c.gen++
	var st IPVSState
	c.idx.reset(len(ds.Services))
	for _, sp := range ds.Services {
		p := c.ports[sp.Key]
		if p == nil || !sameServicePort(p.sp, sp) {
			p = newIPVSPort(sp, ds.NodeIPs)
			c.ports[sp.Key] = p
		}
		p.gen = c.gen
		c.idx.port(p, 1, c.serviceCIDR)
		if p.reject {
			st.Reject = append(st.Reject, p.frontends...)
		} else {
			st.VirtualServers = append(st.VirtualServers, p.frontends...)
		}
	}
	for k, p := range c.ports {
		if p.gen != c.gen {
			delete(c.ports, k)
		}
	}
	st.BoundAddresses = sortedAddrs(c.idx.bound.n)
	return st
}

// IPVSChange is what a few changed Service ports do to the IPVS state (CompileChanged).
type IPVSChange struct {
	// Remove are the virtual servers no port has any longer (or that lost every endpoint).
	Remove []VirtualServer
	// Sync are the changed ports' virtual servers, to create or bring up to date.
	Sync []VirtualServer
	// Bind and Unbind are the addresses to add to and delete from the dummy interface.
	Bind, Unbind []netip.Addr
	nft          ipvsNftDelta
}

// CompileChanged recompiles the ports named by keys (ServicePort.Key; ds is the whole
// desired state, as compileChanged returns it) and returns what changed. ok is false when it
// cannot work incrementally: no Compile before, other host addresses, or two ports claiming
// one virtual server; the caller then compiles and applies everything.
func (c *IPVSCompiler) CompileChanged(ds DesiredState, keys []string) (ch IPVSChange, ok bool) {
	if c.ports == nil || !slices.Equal(c.nodeIPs, ds.NodeIPs) {
		return ch, false
	}
	c.idx.track()
	removed := map[vsKey]VirtualServer{}
	mine := map[vsKey]bool{} // the frontends of the changed ports as they are now
	done := map[string]bool{}
	for _, k := range keys {
		if done[k] {
			continue
		}
		done[k] = true
		old := c.ports[k]
		var sp *ServicePort
		if i, found := searchPorts(ds.Services, k); found {
			sp = &ds.Services[i]
		}
		if old != nil && sp != nil && sameServicePort(old.sp, *sp) {
			continue
		}
		if old != nil {
			c.idx.port(old, -1, c.serviceCIDR)
			if !old.reject {
				for _, vs := range old.frontends {
					removed[keyOf(vs)] = vs
				}
			}
			delete(c.ports, k)
		}
		if sp != nil {
			p := newIPVSPort(*sp, ds.NodeIPs)
			p.gen = c.gen
			c.ports[k] = p
			c.idx.port(p, 1, c.serviceCIDR)
			for _, vs := range p.frontends {
				mine[keyOf(vs)] = true
			}
			if !p.reject {
				ch.Sync = append(ch.Sync, p.frontends...)
			}
		}
	}
	conflict := c.idx.conflict(mine)
	for _, vs := range ch.Sync {
		delete(removed, keyOf(vs))
	}
	for _, vs := range removed {
		ch.Remove = append(ch.Remove, vs)
	}
	slices.SortFunc(ch.Remove, func(a, b VirtualServer) int { return keyOf(a).compare(keyOf(b)) })
	ch.Bind, ch.Unbind = c.idx.bound.changes()
	slices.SortFunc(ch.Bind, netip.Addr.Compare)
	slices.SortFunc(ch.Unbind, netip.Addr.Compare)
	ch.nft = c.idx.nftChanges()
	if conflict {
		// The ports stay recompiled; the caller's Compile rebuilds the counts.
		return IPVSChange{}, false
	}
	return ch, true
}

// frontend is the virtual server k of the port with key port, if it has one.
func (c *IPVSCompiler) frontend(port string, k vsKey) (VirtualServer, bool) {
	if p := c.ports[port]; p != nil && !p.reject {
		for _, vs := range p.frontends {
			if keyOf(vs) == k {
				return vs, true
			}
		}
	}
	return VirtualServer{}, false
}

// nftState is the companion table's content for the ports of the last call.
func (c *IPVSCompiler) nftState(clusterCIDR netip.Prefix) *ipvsNftState {
	return &ipvsNftState{masq: present(c.idx.masq.n), cluster: present(c.idx.cluster.n), reject: present(c.idx.reject.n),
		firewall: present(c.idx.firewall.n), allow: present(c.idx.allow.n), hairpin: present(c.idx.hairpin.n), clusterCIDR: clusterCIDR}
}

// ipvsIndex counts what the compiled ports add up to. Counts, because ports share: the
// ClusterIP of a multi-port Service, a pod behind several Services.
type ipvsIndex struct {
	frontends             counted[vsKey]
	bound                 counted[netip.Addr]
	masq, cluster, reject counted[vipKey]
	firewall              counted[vipKey]
	allow                 counted[fwAllow]
	hairpin               counted[netip.Addr]
}

// reset empties the counts, sized for about n ports.
func (x *ipvsIndex) reset(n int) {
	x.frontends.clear(n)
	x.bound.clear(n)
	x.masq.clear(0)
	x.cluster.clear(n)
	x.reject.clear(0)
	x.firewall.clear(0)
	x.allow.clear(0)
	x.hairpin.clear(n)
}

// track starts recording which keys appear and disappear (changes, nftChanges).
func (x *ipvsIndex) track() {
	x.frontends.track()
	x.bound.track()
	x.masq.track()
	x.cluster.track()
	x.reject.track()
	x.firewall.track()
	x.allow.track()
	x.hairpin.track()
}

// port adds (sign 1) or takes away (sign -1) one port's share.
func (x *ipvsIndex) port(p *ipvsPort, sign int, serviceCIDR netip.Prefix) {
	x.bound.add(p.sp.ClusterIP, sign)
	for _, ip := range p.sp.ExternalIPs {
		x.bound.add(ip, sign)
	}
	for _, vs := range p.frontends {
		x.frontends.add(keyOf(vs), sign)
		k := vipKey{ip: vs.Address, proto: protoNum(vs.Protocol), port: vs.Port}
		switch {
		case p.reject:
			x.reject.add(k, sign)
		case vs.Masquerade:
			x.masq.add(k, sign)
		case serviceCIDR.Contains(vs.Address):
			x.cluster.add(k, sign)
		}
		if vs.Firewalled {
			x.firewall.add(k, sign)
			for _, r := range vs.SourceRanges {
				x.allow.add(fwAllow{k, r}, sign)
			}
		}
		for _, r := range vs.RealServers {
			x.hairpin.add(r.Address, sign)
		}
	}
}

// conflict says whether a virtual server touched since track is claimed by two frontends,
// or by one that is not among mine (the changed ports' frontends): a port that did not change
// keeps a virtual server another port had claimed too, and only a full sync restores its
// content.
func (x *ipvsIndex) conflict(mine map[vsKey]bool) bool {
	defer func() { x.frontends.was = nil }()
	for k := range x.frontends.was {
		if n := x.frontends.n[k]; n > 1 || n == 1 && !mine[k] {
			return true
		}
	}
	return false
}

func (x *ipvsIndex) nftChanges() ipvsNftDelta {
	var d ipvsNftDelta
	for i, c := range []*counted[vipKey]{&x.masq, &x.cluster, &x.reject, &x.firewall} {
		d.add[i], d.del[i] = c.changes()
	}
	d.allowAdd, d.allowDel = x.allow.changes()
	d.hairpinAdd, d.hairpinDel = x.hairpin.changes()
	return d
}

// counted is a multiset. While tracking, was holds whether each key touched since track was
// present before.
type counted[K comparable] struct {
	n   map[K]int
	was map[K]bool
}

func (c *counted[K]) clear(size int) { c.n, c.was = make(map[K]int, size), nil }

func (c *counted[K]) track() { c.was = map[K]bool{} }

func (c *counted[K]) add(k K, d int) {
	if c.n == nil {
		c.n = map[K]int{}
	}
	if c.was != nil {
		if _, ok := c.was[k]; !ok {
			c.was[k] = c.n[k] > 0
		}
	}
	if v := c.n[k] + d; v > 0 {
		c.n[k] = v
	} else {
		delete(c.n, k)
	}
}

// changes are the keys that appeared and disappeared since track, which it ends.
func (c *counted[K]) changes() (added, gone []K) {
	for k, was := range c.was {
		switch now := c.n[k] > 0; {
		case now && !was:
			added = append(added, k)
		case !now && was:
			gone = append(gone, k)
		}
	}
	c.was = nil
	return added, gone
}

func present[K comparable](n map[K]int) map[K]bool {
	m := make(map[K]bool, len(n))
	for k := range n {
		m[k] = true
	}
	return m
}

// ipvsFrontends are the virtual servers of one Service port.
func ipvsFrontends(sp ServicePort, nodeIPs []netip.Addr) []VirtualServer {
	sched := sp.Scheduler
	if !IPVSSchedulers[sched] {
		sched = DefaultIPVSScheduler
	}
	mk := func(addr netip.Addr, port uint16, eps []Endpoint, masq bool) VirtualServer {
		vs := VirtualServer{Address: addr, Protocol: sp.Protocol, Port: port, Scheduler: sched, Persistence: sp.Affinity, Masquerade: masq, Service: sp.Key}
		for _, e := range eps {
			vs.RealServers = append(vs.RealServers, RealServer{Address: e.IP, Port: e.Port, Weight: 1})
		}
		return vs
	}
	var frontends []VirtualServer
	internal := sp.ClusterEndpoints
	if sp.InternalLocal {
		internal = sp.LocalEndpoints
	}
	external := sp.ClusterEndpoints
	if sp.ExternalLocal {
		external = sp.LocalEndpoints
	}
	frontends = append(frontends, mk(sp.ClusterIP, sp.Port, internal, false))
	for _, ip := range sp.ExternalIPs {
		vs := mk(ip, sp.Port, external, !sp.ExternalLocal)
		if slices.Contains(sp.FirewallIPs, ip) {
			vs.Firewalled, vs.SourceRanges = true, sp.SourceRanges
		}
		frontends = append(frontends, vs)
	}
	if sp.NodePort != 0 {
		for _, ip := range nodeIPs {
			frontends = append(frontends, mk(ip, sp.NodePort, external, !sp.ExternalLocal))
		}
	}
	return frontends
}

// KernelRealServer is a real server as the kernel reports it.
type KernelRealServer struct {
	RealServer
	ActiveConns, InactiveConns int
}

// RealServerOps are the changes that turn the kernel's real servers of one virtual server into
// the desired ones.
type RealServerOps struct {
	Add, Update, Delete []RealServer
}

// PlanRealServers diffs one virtual server's real servers. A real server that is no longer
// wanted but still carries connections is kept with weight 0 (graceful termination: no new
// connections, existing ones finish) and deleted on a later sync once it has none.
func PlanRealServers(have []KernelRealServer, want []RealServer) RealServerOps {
	var ops RealServerOps
	key := func(r RealServer) netip.AddrPort { return netip.AddrPortFrom(r.Address, r.Port) }
	wanted := map[netip.AddrPort]RealServer{}
	for _, r := range want {
		wanted[key(r)] = r
	}
	present := map[netip.AddrPort]bool{}
	for _, h := range have {
		k := key(h.RealServer)
		present[k] = true
		if w, ok := wanted[k]; ok {
			if w.Weight != h.Weight {
				ops.Update = append(ops.Update, w)
			}
			continue
		}
		switch {
		case h.ActiveConns+h.InactiveConns == 0:
			ops.Delete = append(ops.Delete, h.RealServer)
		case h.Weight != 0:
			d := h.RealServer
			d.Weight = 0
			ops.Update = append(ops.Update, d)
		}
	}
	for _, r := range want {
		if !present[key(r)] {
			ops.Add = append(ops.Add, r)
		}
	}
	return ops
}
