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
	Masquerade  bool
	RealServers []RealServer
	Service     string // ServicePort.Key, for logs
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
// compiles one port's frontends, not every port's. The zero value is ready; it is not safe
// for concurrent use.
type IPVSCompiler struct {
	nodeIPs []netip.Addr
	ports   map[string]*ipvsPort
	gen     uint64
}

// ipvsPort is what one Service port compiled to.
type ipvsPort struct {
	sp        ServicePort
	frontends []VirtualServer
	reject    bool // no endpoint at all: the frontends go to IPVSState.Reject
	gen       uint64
}

// Compile is CompileIPVS, reusing the ports that did not change.
func (c *IPVSCompiler) Compile(ds DesiredState) IPVSState {
	if c.ports == nil || !slices.Equal(c.nodeIPs, ds.NodeIPs) {
		// NodePort frontends exist once per host address.
		c.ports, c.nodeIPs = map[string]*ipvsPort{}, slices.Clone(ds.NodeIPs)
	}
	c.gen++
	var st IPVSState
	bound := map[netip.Addr]bool{}
	for _, sp := range ds.Services {
		p := c.ports[sp.Key]
		if p == nil || !sameServicePort(p.sp, sp) {
			p = &ipvsPort{sp: sp, frontends: ipvsFrontends(sp, ds.NodeIPs), reject: len(sp.ClusterEndpoints) == 0}
			c.ports[sp.Key] = p
		}
		p.gen = c.gen
		bound[sp.ClusterIP] = true
		for _, ip := range sp.ExternalIPs {
			bound[ip] = true
		}
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
	for a := range bound {
		st.BoundAddresses = append(st.BoundAddresses, a)
	}
	slices.SortFunc(st.BoundAddresses, netip.Addr.Compare)
	return st
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
		frontends = append(frontends, mk(ip, sp.Port, external, !sp.ExternalLocal))
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
