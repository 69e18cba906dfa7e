// Package services turns Services, EndpointSlices and this host's Node into Service virtual IPs:
// a pure compilation into a backend-neutral DesiredState, then a dataplane backend (nftables, or
// the IPVS model) that programs it, kept in sync by Run.
package services

import (
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// AnnotationServedByHost marks a Service whose ClusterIP the host itself listens on (cluster
// DNS): the proxy must not DNAT it away from the local listener.
const AnnotationServedByHost = "flotilla.dev/served-by-host"

// AnnotationIPVSScheduler picks the IPVS scheduler of a Service (rr, lc, dh, sh, sed, nq).
const AnnotationIPVSScheduler = "flotilla.dev/ipvs-scheduler"

// DefaultAffinityTimeout is spec.sessionAffinityConfig.clientIP.timeoutSeconds when unset (3 h).
const DefaultAffinityTimeout = 10800 * time.Second

// DesiredState is what this host's dataplane must implement, independent of the backend.
type DesiredState struct {
	NodeName string
	// NodeIPs are this host's InternalIP/ExternalIP addresses (IPv4), where NodePorts answer.
	NodeIPs []netip.Addr
	// Services holds one entry per (Service, port), sorted by Key.
	Services []ServicePort
}

// ServicePort is one port of one Service with its frontends and usable endpoints.
type ServicePort struct {
	Key       string // namespace/name/port-name-or-number/protocol, unique and stable
	Namespace string
	Name      string
	PortName  string
	Protocol  v1.Protocol
	ClusterIP netip.Addr
	Port      uint16
	NodePort  uint16 // 0: no NodePort
	// HealthCheckNodePort is spec.healthCheckNodePort of a LoadBalancer Service with
	// externalTrafficPolicy Local: where every host reports whether it has a ready endpoint.
	HealthCheckNodePort uint16
	// ExternalIPs are spec.externalIPs and status.loadBalancer.ingress[].ip: traffic to them
	// follows externalTrafficPolicy, like NodePort traffic.
	ExternalIPs []netip.Addr
	// FirewallIPs are the load-balancer addresses (status.loadBalancer.ingress[].ip, also in
	// ExternalIPs) that only SourceRanges may reach: set when the Service of type LoadBalancer
	// has spec.loadBalancerSourceRanges or its annotation, empty otherwise.
	FirewallIPs []netip.Addr
	// SourceRanges are the IPv4 ranges allowed to reach FirewallIPs; empty with FirewallIPs
	// set (only IPv6 ranges given) lets no IPv4 source through.
	SourceRanges []netip.Prefix
	// Affinity is the ClientIP session-affinity timeout; 0 means no affinity.
	Affinity      time.Duration
	InternalLocal bool // internalTrafficPolicy: Local
	ExternalLocal bool // externalTrafficPolicy: Local
	// ClusterEndpoints are the endpoints for cluster-wide traffic: the ready ones, or, when none
	// is ready, the serving-and-terminating ones (so rolling updates drain instead of drop).
	ClusterEndpoints []Endpoint
	// LocalEndpoints are the same selection among endpoints on this node only.
	LocalEndpoints []Endpoint
	Scheduler      string // IPVS scheduler from the annotation, "" for the default
}

// HasExternal reports whether the port has frontends governed by externalTrafficPolicy.
func (sp ServicePort) HasExternal() bool { return sp.NodePort != 0 || len(sp.ExternalIPs) > 0 }

// Endpoint is one backend address of a ServicePort.
type Endpoint struct {
	IP          netip.Addr
	Port        uint16
	NodeName    string
	Terminating bool
}

// String is ip:port.
func (e Endpoint) String() string { return netip.AddrPortFrom(e.IP, e.Port).String() }

// Compile computes the desired dataplane for the host described by node (nil: no NodePort
// addresses and no local endpoints). It is pure: same inputs, same output.
func Compile(services []*v1.Service, slices []*discoveryv1.EndpointSlice, node *v1.Node) DesiredState {
	return new(Compiler).Compile(services, slices, node)
}

// Compiler is Compile with a memory: a Service whose object and EndpointSlices are the same
// as in the previous call (the informer replaces an object it updates, so the same pointer is
// the same content) keeps its compiled ports, and the ports keep their order when no port
// came or went. One changed Service then costs a walk over pointers instead of compiling and
// sorting every Service again. The zero value is ready; it is not safe for concurrent use.
type Compiler struct {
	nodeName string
	nodeZone string // its topology.kubernetes.io/zone label: which endpoints trafficDistribution prefers
	cache    map[nsName]*compiled
	order    []portRef // ds.Services of the previous call
	gen      uint64
	// services is ds.Services of the previous call, sorted by Key, which compileChanged
	// updates in place; orderStale says that order no longer matches it.
	services   []ServicePort
	orderStale bool
}

type nsName struct{ ns, name string }

// compiled is one Service's compiled ports and the inputs they came from.
type compiled struct {
	svc    *v1.Service
	slices []*discoveryv1.EndpointSlice
	ports  []ServicePort
	gen    uint64 // the call that last saw the Service
}

type portRef struct {
	c *compiled
	i int
}

// Compile is the package's Compile, reusing what the previous call compiled.
func (c *Compiler) Compile(services []*v1.Service, slices []*discoveryv1.EndpointSlice, node *v1.Node) DesiredState {
	ds := DesiredState{}
	zone := ""
	if node != nil {
		ds.NodeName = node.Name
		ds.NodeIPs = nodeIPs(node)
		zone = node.Labels[v1.LabelTopologyZone]
	}
	if c.cache == nil || c.nodeName != ds.NodeName || c.nodeZone != zone {
		// Which endpoints are local, or preferred by trafficDistribution, depends on the
		// node's name and zone.
		c.cache, c.order, c.nodeName, c.nodeZone = map[nsName]*compiled{}, nil, ds.NodeName, zone
	}
	c.gen++
	bySvc := make(map[nsName][]*discoveryv1.EndpointSlice, len(slices))
	for _, s := range slices {
		if s == nil || s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		name := s.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			continue
		}
		k := nsName{s.Namespace, name}
		bySvc[k] = append(bySvc[k], s)
	}
	reordered := c.orderStale // a port came or went: sort again
	c.orderStale = false
	n := 0
	for _, svc := range services {
		if svc == nil {
			continue
		}
		k := nsName{svc.Namespace, svc.Name}
		sl := bySvc[k]
		e := c.cache[k]
		if e == nil || e.svc != svc || !sameSlices(e.slices, sl) {
			ports := compileService(svc, sl, ds.NodeName, zone)
			if e == nil || !sameKeys(e.ports, ports) {
				reordered = true
			}
			if e == nil {
				e = &compiled{}
				c.cache[k] = e
			}
			e.svc, e.slices, e.ports = svc, sl, ports
		}
		if e.gen == c.gen {
			reordered = true // the same Service listed twice: compile as Compile always did
		}
		e.gen = c.gen
		n += len(e.ports)
	}
	for k, e := range c.cache {
		if e.gen != c.gen {
			delete(c.cache, k)
			if len(e.ports) > 0 {
				reordered = true
			}
		}
	}
	if reordered || len(c.order) != n {
		c.order = c.order[:0]
		for _, svc := range services {
			if svc == nil {
				continue
			}
			e := c.cache[nsName{svc.Namespace, svc.Name}]
			for i := range e.ports {
				c.order = append(c.order, portRef{e, i})
			}
		}
		sort.SliceStable(c.order, func(i, j int) bool {
			return c.order[i].c.ports[c.order[i].i].Key < c.order[j].c.ports[c.order[j].i].Key
		})
	}
	if n > 0 {
		ds.Services = make([]ServicePort, 0, n)
	}
	for _, r := range c.order {
		ds.Services = append(ds.Services, r.c.ports[r.i])
	}
	c.services = ds.Services
	return ds
}

// compileChanged is Compile for a caller that knows which Services may have changed since the
// previous call (from the informers' events): it recompiles those alone, so one change costs
// what changed rather than a walk over every Service. get returns a Service (nil when it is
// gone) and its EndpointSlices. It also returns the Keys of the ports that may differ from the
// previous call. ok is false when it cannot work incrementally (no previous call, or another
// node): then the caller compiles everything.
//
// ds.Services is the Compiler's own slice, updated in place by the next call: use it before.
func (c *Compiler) compileChanged(changed map[nsName]bool, get func(nsName) (*v1.Service, []*discoveryv1.EndpointSlice), node *v1.Node) (ds DesiredState, keys []string, ok bool) {
	if c.cache == nil || node == nil || node.Name != c.nodeName || node.Labels[v1.LabelTopologyZone] != c.nodeZone {
		return ds, nil, false
	}
	ds.NodeName, ds.NodeIPs = node.Name, nodeIPs(node)
	for k := range changed {
		svc, all := get(k)
		var sl []*discoveryv1.EndpointSlice
		for _, s := range all {
			if s != nil && s.AddressType == discoveryv1.AddressTypeIPv4 {
				sl = append(sl, s)
			}
		}
		e := c.cache[k]
		if e != nil && e.svc == svc && sameSlices(e.slices, sl) {
			continue
		}
		var ports []ServicePort
		if svc != nil {
			ports = compileService(svc, sl, c.nodeName, c.nodeZone)
		}
		var old []ServicePort
		if e != nil {
			old = e.ports
		}
		if !sameKeys(old, ports) {
			c.orderStale = true
		}
		for _, p := range old {
			if i, found := c.findPort(p.Key); found {
				c.services = slices.Delete(c.services, i, i+1)
			}
			keys = append(keys, p.Key)
		}
		for _, p := range ports {
			i, found := c.findPort(p.Key)
			if found {
				c.services[i] = p // two Services claiming one Key: the last one wins
			} else {
				c.services = slices.Insert(c.services, i, p)
			}
			keys = append(keys, p.Key)
		}
		switch {
		case svc == nil:
			delete(c.cache, k)
		case e == nil:
			c.cache[k] = &compiled{svc: svc, slices: sl, ports: ports, gen: c.gen}
		default:
			e.svc, e.slices, e.ports = svc, sl, ports
		}
	}
	ds.Services = c.services
	return ds, keys, true
}

// findPort is the index of the port with key in c.services, or where it would go.
func (c *Compiler) findPort(key string) (int, bool) { return searchPorts(c.services, key) }

// searchPorts is the index of the port with key in ports (sorted by Key, as Compile makes
// them), or where it would go.
func searchPorts(ports []ServicePort, key string) (int, bool) {
	return slices.BinarySearchFunc(ports, key, func(p ServicePort, k string) int { return strings.Compare(p.Key, k) })
}

// sameSlices reports whether a and b hold the same EndpointSlice objects, in any order (the
// lister's order is a map's).
func sameSlices(a, b []*discoveryv1.EndpointSlice) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			if x == y {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func sameKeys(a, b []ServicePort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key {
			return false
		}
	}
	return true
}

// compileService compiles the ports of one Service from its EndpointSlices.
func compileService(svc *v1.Service, slices []*discoveryv1.EndpointSlice, nodeName, zone string) []ServicePort {
	if !proxied(svc) {
		return nil
	}
	cip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil || !cip.Is4() {
		return nil // IPv4 only for now
	}
	ext := externalIPs(svc)
	fwIPs, ranges := firewall(svc)
	var aff time.Duration
	if svc.Spec.SessionAffinity == v1.ServiceAffinityClientIP {
		aff = DefaultAffinityTimeout
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
			aff = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	itpLocal := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal
	etpLocal := svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
	var out []ServicePort
	for _, p := range svc.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = v1.ProtocolTCP
		}
		if p.Port <= 0 || p.Port > 65535 {
			continue
		}
		sp := ServicePort{
			Namespace: svc.Namespace, Name: svc.Name, PortName: p.Name, Protocol: proto,
			ClusterIP: cip, Port: uint16(p.Port), ExternalIPs: ext, FirewallIPs: fwIPs, SourceRanges: ranges, Affinity: aff,
			InternalLocal: itpLocal, ExternalLocal: etpLocal,
			Scheduler: svc.Annotations[AnnotationIPVSScheduler],
		}
		portID := p.Name
		if portID == "" {
			portID = strconv.Itoa(int(p.Port))
		}
		sp.Key = svc.Namespace + "/" + svc.Name + "/" + portID + "/" + string(proto)
		if (svc.Spec.Type == v1.ServiceTypeNodePort || svc.Spec.Type == v1.ServiceTypeLoadBalancer) && p.NodePort > 0 && p.NodePort <= 65535 {
			sp.NodePort = uint16(p.NodePort)
		}
		if svc.Spec.Type == v1.ServiceTypeLoadBalancer && etpLocal && svc.Spec.HealthCheckNodePort > 0 && svc.Spec.HealthCheckNodePort <= 65535 {
			sp.HealthCheckNodePort = uint16(svc.Spec.HealthCheckNodePort)
		}
		all := endpointsFor(slices, p.Name, proto)
		sp.ClusterEndpoints = clusterEndpoints(all, nodeName, zone)
		if nodeName != "" {
			sp.LocalEndpoints = usable(all, nodeName)
		}
		out = append(out, sp)
	}
	return out
}

// proxied is false for the Services the proxy must leave alone.
func proxied(svc *v1.Service) bool {
	if svc == nil || svc.Spec.Type == v1.ServiceTypeExternalName {
		return false
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == v1.ClusterIPNone {
		return false
	}
	return svc.Annotations[AnnotationServedByHost] != "true"
}

func nodeIPs(node *v1.Node) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, a := range node.Status.Addresses {
		if a.Type != v1.NodeInternalIP && a.Type != v1.NodeExternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil || !ip.Is4() || seen[ip] {
			continue
		}
		seen[ip] = true
		out = append(out, ip)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

func externalIPs(svc *v1.Service) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	add := func(s string) {
		ip, err := netip.ParseAddr(s)
		if err != nil || !ip.Is4() || seen[ip] {
			return
		}
		seen[ip] = true
		out = append(out, ip)
	}
	for _, s := range svc.Spec.ExternalIPs {
		add(s)
	}
	if svc.Spec.Type == v1.ServiceTypeLoadBalancer {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			add(in.IP)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// firewall is the load-balancer addresses of svc that only ranges may reach, as kube-proxy
// reads them: spec.loadBalancerSourceRanges, or else the annotation (comma-separated); nil
// when neither restricts anything. Only a Service of type LoadBalancer has them; NodePorts,
// spec.externalIPs and the ClusterIP stay open to every source. The API server has validated
// the ranges; an entry that does not parse, or an IPv6 one, lets nothing through.
func firewall(svc *v1.Service) (ips []netip.Addr, ranges []netip.Prefix) {
	if svc.Spec.Type != v1.ServiceTypeLoadBalancer {
		return nil, nil
	}
	given := svc.Spec.LoadBalancerSourceRanges
	if len(given) == 0 {
		if a := strings.TrimSpace(svc.Annotations[v1.AnnotationLoadBalancerSourceRangesKey]); a != "" {
			given = strings.Split(a, ",")
		}
	}
	for _, g := range given {
		p, err := netip.ParsePrefix(strings.TrimSpace(g))
		if err != nil || !p.Addr().Is4() {
			continue
		}
		if p = p.Masked(); p.Bits() == 0 {
			return nil, nil // 0.0.0.0/0: every source
		}
		ranges = append(ranges, p)
	}
	// A range inside another adds nothing, and an interval set refuses overlapping elements.
	ranges = slices.DeleteFunc(slices.Clone(ranges), func(p netip.Prefix) bool {
		for _, q := range ranges {
			if q != p && q.Bits() < p.Bits() && q.Contains(p.Addr()) {
				return true
			}
		}
		return false
	})
	if len(given) == 0 {
		return nil, nil
	}
	seen := map[netip.Addr]bool{}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(in.IP); err == nil && ip.Is4() && !seen[ip] {
			seen[ip] = true
			ips = append(ips, ip)
		}
	}
	if len(ips) == 0 {
		return nil, nil
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	slices.SortFunc(ranges, netip.Prefix.Compare)
	return ips, slices.Compact(ranges)
}

// candidate is an endpoint with its conditions and topology hints, before the
// ready/terminating selection.
type candidate struct {
	Endpoint
	ready, serving bool
	hints          *discoveryv1.EndpointHints
}

func (c candidate) hintedFor(nodeName, zone string) (forNode, forZone, nodeHints, zoneHints bool) {
	if c.hints == nil {
		return false, false, false, false
	}
	forNode = slices.ContainsFunc(c.hints.ForNodes, func(n discoveryv1.ForNode) bool { return n.Name == nodeName })
	forZone = zone != "" && slices.ContainsFunc(c.hints.ForZones, func(z discoveryv1.ForZone) bool { return z.Name == zone })
	return forNode, forZone, len(c.hints.ForNodes) > 0, len(c.hints.ForZones) > 0
}

// endpointsFor collects the endpoints of the slices for one Service port, deduplicated by
// ip:port (the same endpoint may sit in two slices while the controller moves it); a
// duplicate keeps the most usable conditions seen.
func endpointsFor(slices []*discoveryv1.EndpointSlice, portName string, proto v1.Protocol) []candidate {
	idx := map[netip.AddrPort]int{}
	var out []candidate
	for _, s := range slices {
		var port int32 = -1
		for _, sp := range s.Ports {
			n := ""
			if sp.Name != nil {
				n = *sp.Name
			}
			pr := v1.ProtocolTCP
			if sp.Protocol != nil {
				pr = *sp.Protocol
			}
			if n == portName && pr == proto && sp.Port != nil {
				port = *sp.Port
				break
			}
		}
		if port <= 0 || port > 65535 {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			ip, err := netip.ParseAddr(e.Addresses[0])
			if err != nil || !ip.Is4() {
				continue
			}
			// Unknown conditions count as ready/serving, as the EndpointSlice API says.
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			serving := ready
			if e.Conditions.Serving != nil {
				serving = *e.Conditions.Serving
			}
			term := e.Conditions.Terminating != nil && *e.Conditions.Terminating
			node := ""
			if e.NodeName != nil {
				node = *e.NodeName
			}
			c := candidate{Endpoint: Endpoint{IP: ip, Port: uint16(port), NodeName: node, Terminating: term}, ready: ready, serving: serving, hints: e.Hints}
			key := netip.AddrPortFrom(ip, uint16(port))
			if i, ok := idx[key]; ok {
				old := out[i]
				if !old.ready && c.ready || !old.serving && c.serving {
					out[i] = c
				}
				continue
			}
			idx[key] = len(out)
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].IP != out[j].IP {
			return out[i].IP.Less(out[j].IP)
		}
		return out[i].Port < out[j].Port
	})
	return out
}

// clusterEndpoints are the endpoints for cluster-wide traffic from host nodeName in zone, with
// the topology hints of the EndpointSlices (spec.trafficDistribution), as kube-proxy reads
// them: when every ready endpoint has node hints and one is hinted for this host, those
// hinted for it; else when every ready endpoint has zone hints and one is for this zone,
// those hinted for the zone; else every ready one. Without ready endpoints, the serving and
// terminating ones, whatever their hints.
func clusterEndpoints(all []candidate, nodeName, zone string) []Endpoint {
	allNode, allZone, anyNode, anyZone := true, true, false, false
	for _, c := range all {
		if !c.ready {
			continue
		}
		forNode, forZone, nodeHints, zoneHints := c.hintedFor(nodeName, zone)
		allNode, allZone = allNode && nodeHints, allZone && zoneHints
		anyNode, anyZone = anyNode || forNode, anyZone || forZone
	}
	var keep func(candidate) bool
	switch {
	case allNode && anyNode && nodeName != "":
		keep = func(c candidate) bool { forNode, _, _, _ := c.hintedFor(nodeName, zone); return forNode }
	case allZone && anyZone:
		keep = func(c candidate) bool { _, forZone, _, _ := c.hintedFor(nodeName, zone); return forZone }
	default:
		return usable(all, "")
	}
	var out []Endpoint
	for _, c := range all {
		if c.ready && keep(c) {
			out = append(out, c.Endpoint)
		}
	}
	return out
}

// usable picks the ready endpoints (of node, when node != ""), falling back to the serving and
// terminating ones when none is ready.
func usable(all []candidate, node string) []Endpoint {
	var ready, draining []Endpoint
	for _, c := range all {
		if node != "" && c.NodeName != node {
			continue
		}
		switch {
		case c.ready:
			ready = append(ready, c.Endpoint)
		case c.serving && c.Terminating:
			draining = append(draining, c.Endpoint)
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return draining
}
