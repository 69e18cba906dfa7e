package dns

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// ttl is the lifetime of every answer and of negative answers (SOA minimum): short, because the
// records follow informers and a moved pod must not stay cached for long.
const ttl = 5

// schemaVersion is the version of the Kubernetes DNS-Based Service Discovery specification
// served at dns-version.<zone> (TXT), as the specification requires.
const schemaVersion = "1.1.0"

// rrset is everything known about one name in the cluster zone.
type rrset struct {
	exists bool        // the name exists (possibly with no records: an empty non-terminal)
	rrs    []mdns.RR   // records at the name, of every type
	extra  []mdns.RR   // additional-section records (addresses of SRV targets)
	cname  *mdns.CNAME // set for ExternalName Services: the name is an alias
}

func hdr(name string, t uint16) mdns.RR_Header {
	return mdns.RR_Header{Name: name, Rrtype: t, Class: mdns.ClassINET, Ttl: ttl}
}

// addrRR returns an A or AAAA record for ip.
func addrRR(name string, ip netip.Addr) mdns.RR {
	if ip.Is4() {
		return &mdns.A{Hdr: hdr(name, mdns.TypeA), A: ip.AsSlice()}
	}
	return &mdns.AAAA{Hdr: hdr(name, mdns.TypeAAAA), AAAA: ip.AsSlice()}
}

// dashed is the DNS label form of an IP: 10-244-1-5, or 2001-db8--5 for IPv6.
func dashed(ip netip.Addr) string {
	if ip.Is4() {
		return strings.ReplaceAll(ip.String(), ".", "-")
	}
	return strings.ReplaceAll(ip.String(), ":", "-")
}

// parseDashed is the inverse of dashed.
func parseDashed(label string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(strings.ReplaceAll(label, "-", ".")); err == nil && a.Is4() {
		return a, true
	}
	a, err := netip.ParseAddr(strings.ReplaceAll(label, "-", ":"))
	if err != nil || !a.Is6() || a.Is4In6() {
		return netip.Addr{}, false
	}
	return a, true
}

// parseReverse returns the address of an in-addr.arpa or ip6.arpa name (lower case, FQDN).
func parseReverse(name string) (netip.Addr, bool) {
	switch {
	case strings.HasSuffix(name, ".in-addr.arpa."):
		l := strings.Split(strings.TrimSuffix(name, ".in-addr.arpa."), ".")
		if len(l) != 4 {
			return netip.Addr{}, false
		}
		var b [4]byte
		for i, s := range l {
			n, err := strconv.ParseUint(s, 10, 8)
			if err != nil || (len(s) > 1 && s[0] == '0') {
				return netip.Addr{}, false
			}
			b[3-i] = byte(n)
		}
		return netip.AddrFrom4(b), true
	case strings.HasSuffix(name, ".ip6.arpa."):
		l := strings.Split(strings.TrimSuffix(name, ".ip6.arpa."), ".")
		if len(l) != 32 {
			return netip.Addr{}, false
		}
		var b [16]byte
		for i, s := range l {
			n, err := strconv.ParseUint(s, 16, 8)
			if err != nil || len(s) != 1 {
				return netip.Addr{}, false
			}
			pos := 31 - i // nibble index from the most significant end
			if pos%2 == 0 {
				b[pos/2] |= byte(n) << 4
			} else {
				b[pos/2] |= byte(n)
			}
		}
		return netip.AddrFrom16(b).Unmap(), true
	}
	return netip.Addr{}, false
}

// endpoint is one published address of a headless Service, merged over all its slices.
type endpoint struct {
	addr  netip.Addr
	name  string // endpoint hostname, else the dashed address
	ports []discoveryv1.EndpointPort
}

func (h *Handler) service(ns, name string) *corev1.Service {
	obj, ok, err := h.caches.Services.GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil
	}
	s, _ := obj.(*corev1.Service)
	return s
}

func isHeadless(s *corev1.Service) bool {
	return s.Spec.Type != corev1.ServiceTypeExternalName && s.Spec.ClusterIP == corev1.ClusterIPNone
}

// endpoints returns the addresses a headless Service publishes: ready endpoints of its
// EndpointSlices (all of them with publishNotReadyAddresses), each address once even when
// several slices carry it, sorted by address.
func (h *Handler) endpoints(s *corev1.Service) []endpoint {
	objs, _ := h.caches.EndpointSlices.ByIndex(IndexService, s.Namespace+"/"+s.Name)
	byAddr := map[netip.Addr]*endpoint{}
	for _, o := range objs {
		sl, ok := o.(*discoveryv1.EndpointSlice)
		if !ok || sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		for _, ep := range sl.Endpoints {
			// A nil ready condition means "unknown", which the API says to treat as ready.
			if !s.Spec.PublishNotReadyAddresses && ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, raw := range ep.Addresses {
				a, err := netip.ParseAddr(raw)
				if err != nil {
					continue
				}
				a = a.Unmap()
				e := byAddr[a]
				if e == nil {
					e = &endpoint{addr: a, name: dashed(a)}
					byAddr[a] = e
				}
				if ep.Hostname != nil && *ep.Hostname != "" {
					e.name = strings.ToLower(*ep.Hostname)
				}
				for _, p := range sl.Ports {
					if !slices.ContainsFunc(e.ports, func(q discoveryv1.EndpointPort) bool { return samePort(p, q) }) {
						e.ports = append(e.ports, p)
					}
				}
			}
		}
	}
	out := make([]endpoint, 0, len(byAddr))
	for _, e := range byAddr {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b endpoint) int { return a.addr.Compare(b.addr) })
	return out
}

func samePort(a, b discoveryv1.EndpointPort) bool {
	return deref(a.Name) == deref(b.Name) && deref(a.Port) == deref(b.Port) && deref(a.Protocol) == deref(b.Protocol)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func protoLabel(p corev1.Protocol) string {
	if p == "" {
		p = corev1.ProtocolTCP
	}
	return "_" + strings.ToLower(string(p))
}

// podPublished reports whether a pod's addresses may be published for Service s.
func podPublished(p *corev1.Pod, s *corev1.Service) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if s.Spec.PublishNotReadyAddresses {
		return true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podHostname is the pod's hostname: spec.hostname, else metadata.name.
func podHostname(p *corev1.Pod) string {
	if p.Spec.Hostname != "" {
		return strings.ToLower(p.Spec.Hostname)
	}
	return strings.ToLower(p.Name)
}

// subdomainPods returns the addresses of the pods whose FQDN is host.<s>.<ns>.svc.<zone>:
// pods with spec.subdomain naming the headless Service s.
func (h *Handler) subdomainPods(s *corev1.Service, host string) []netip.Addr {
	objs, _ := h.caches.Pods.ByIndex(IndexSubdomain, s.Namespace+"/"+s.Name)
	var out []netip.Addr
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok || podHostname(p) != host || !podPublished(p, s) {
			continue
		}
		for _, a := range podAddrs(p) {
			if !containsAddr(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

func (h *Handler) svcFQDN(name, ns string) string {
	return name + "." + ns + ".svc." + h.zone
}

// recordsAt returns the records at qname, which lies in the cluster zone: all of them, except
// that SRV records at a Service's own name are built only for SRV and ANY queries. Lookups are
// case insensitive; records carry qname as asked.
func (h *Handler) recordsAt(qname string, qtype uint16) rrset {
	lname := strings.ToLower(qname)
	var labels []string
	if lname != h.zone {
		labels = mdns.SplitDomainName(strings.TrimSuffix(lname, "."+h.zone))
	}
	slices.Reverse(labels) // most significant first: svc, <ns>, <service>, ...
	switch {
	case len(labels) == 0:
		return rrset{exists: true, rrs: []mdns.RR{h.soa(), &mdns.NS{Hdr: hdr(qname, mdns.TypeNS), Ns: "ns.dns." + h.zone}}}
	case len(labels) == 1 && labels[0] == "dns-version":
		return rrset{exists: true, rrs: []mdns.RR{&mdns.TXT{Hdr: hdr(qname, mdns.TypeTXT), Txt: []string{schemaVersion}}}}
	case len(labels) == 1 && labels[0] == "dns":
		return rrset{exists: true}
	case len(labels) == 2 && labels[0] == "dns" && labels[1] == "ns":
		r := rrset{exists: true}
		if ip, ok := netip.AddrFromSlice(h.listenIP); ok {
			r.rrs = append(r.rrs, addrRR(qname, ip.Unmap()))
		}
		return r
	case labels[0] == "svc":
		return h.svcRecords(qname, qtype, labels[1:])
	case labels[0] == "pod":
		return h.podRecords(qname, labels[1:])
	}
	return rrset{}
}

// podRecords answers <dashed-ip>.<ns>.pod.<zone> for pods that exist with that IP in <ns>.
func (h *Handler) podRecords(qname string, l []string) rrset {
	switch len(l) {
	case 0:
		return rrset{exists: true}
	case 1:
		objs, _ := h.caches.Pods.ByIndex(cache.NamespaceIndex, l[0])
		return rrset{exists: len(objs) > 0}
	case 2:
		ip, ok := parseDashed(l[1])
		if !ok {
			return rrset{}
		}
		objs, _ := h.caches.Pods.ByIndex(IndexIP, ip.String())
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok && p.Namespace == l[0] &&
				p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				return rrset{exists: true, rrs: []mdns.RR{addrRR(qname, ip)}}
			}
		}
	}
	return rrset{}
}

// svcRecords answers the names under svc.<zone>; l is [<ns>, <service>, ...].
func (h *Handler) svcRecords(qname string, qtype uint16, l []string) rrset {
	switch len(l) {
	case 0:
		return rrset{exists: true}
	case 1:
		objs, _ := h.caches.Services.ByIndex(cache.NamespaceIndex, l[0])
		return rrset{exists: len(objs) > 0}
	}
	s := h.service(l[0], l[1])
	if s == nil {
		return rrset{}
	}
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		if len(l) > 2 || s.Spec.ExternalName == "" {
			return rrset{}
		}
		c := &mdns.CNAME{Hdr: hdr(qname, mdns.TypeCNAME), Target: mdns.Fqdn(strings.ToLower(s.Spec.ExternalName))}
		return rrset{exists: true, rrs: []mdns.RR{c}, cname: c}
	}
	switch len(l) {
	case 2: // <service>.<ns>.svc.<zone>: addresses, and SRV for every named port
		r := rrset{exists: true}
		if isHeadless(s) {
			for _, e := range h.endpoints(s) {
				r.rrs = append(r.rrs, addrRR(qname, e.addr))
			}
		} else {
			for _, ip := range clusterIPs(s) {
				r.rrs = append(r.rrs, addrRR(qname, ip))
			}
		}
		if qtype == mdns.TypeSRV || qtype == mdns.TypeANY { // only then worth building
			srv, extra, _ := h.srv(qname, s, "", "")
			r.rrs = append(r.rrs, srv...)
			r.extra = extra
		}
		return r
	case 3:
		if strings.HasPrefix(l[2], "_") { // _<proto>: exists when a named port uses it
			_, _, known := h.srv(qname, s, "", l[2])
			return rrset{exists: known}
		}
		if !isHeadless(s) {
			return rrset{}
		}
		// <host>.<service>.<ns>.svc.<zone>: endpoint hostnames (StatefulSet pods), dashed
		// endpoint addresses, and pods naming the Service as their subdomain.
		var addrs []netip.Addr
		for _, e := range h.endpoints(s) {
			if e.name == l[2] || dashed(e.addr) == l[2] {
				addrs = append(addrs, e.addr)
			}
		}
		for _, a := range h.subdomainPods(s, l[2]) {
			if !containsAddr(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		r := rrset{exists: len(addrs) > 0}
		for _, a := range addrs {
			r.rrs = append(r.rrs, addrRR(qname, a))
		}
		return r
	case 4: // _<port>._<proto>.<service>.<ns>.svc.<zone>
		if !strings.HasPrefix(l[3], "_") || !strings.HasPrefix(l[2], "_") {
			return rrset{}
		}
		srv, extra, known := h.srv(qname, s, strings.TrimPrefix(l[3], "_"), l[2])
		return rrset{exists: known, rrs: srv, extra: extra}
	}
	return rrset{}
}

// srv returns the SRV records of Service s for named ports matching port and proto ("" matches
// any), their targets' addresses, and whether any named port matches at all (the name exists
// even when a headless Service has no ready endpoints). Normal Services point at their own
// name and port; headless ones have one record per endpoint, pointing at
// <endpoint>.<service>.<ns>.svc with the endpoint's port.
func (h *Handler) srv(qname string, s *corev1.Service, port, proto string) (rrs, extra []mdns.RR, known bool) {
	match := func(name string, p corev1.Protocol) bool {
		return name != "" && (port == "" || strings.EqualFold(name, port)) && (proto == "" || protoLabel(p) == proto)
	}
	for _, sp := range s.Spec.Ports {
		known = known || match(sp.Name, sp.Protocol)
	}
	svcName := h.svcFQDN(s.Name, s.Namespace)
	if !isHeadless(s) {
		ips := clusterIPs(s)
		if len(ips) == 0 {
			return nil, nil, known
		}
		for _, sp := range s.Spec.Ports {
			if match(sp.Name, sp.Protocol) {
				rrs = append(rrs, &mdns.SRV{Hdr: hdr(qname, mdns.TypeSRV), Priority: 0, Port: uint16(sp.Port), Target: svcName})
			}
		}
		if len(rrs) > 0 {
			for _, ip := range ips {
				extra = append(extra, addrRR(svcName, ip))
			}
		}
		setWeights(rrs)
		return rrs, extra, known
	}
	for _, e := range h.endpoints(s) {
		target := e.name + "." + svcName
		added := false
		for _, ep := range e.ports {
			if !match(deref(ep.Name), deref(ep.Protocol)) || ep.Port == nil {
				continue
			}
			known = true
			rrs = append(rrs, &mdns.SRV{Hdr: hdr(qname, mdns.TypeSRV), Priority: 0, Port: uint16(*ep.Port), Target: target})
			added = true
		}
		if added {
			extra = append(extra, addrRR(target, e.addr))
		}
	}
	setWeights(rrs)
	return rrs, extra, known
}

// setWeights spreads a weight of 100 evenly over equal-priority records, as CoreDNS does.
func setWeights(rrs []mdns.RR) {
	if len(rrs) == 0 {
		return
	}
	w := uint16(max(1, 100/len(rrs)))
	for _, rr := range rrs {
		rr.(*mdns.SRV).Weight = w
	}
}

// ptrTargets returns the names of an IP in the cluster: the Services it is a ClusterIP of, the
// headless Service endpoints it is published as, and pod FQDNs from hostname+subdomain.
func (h *Handler) ptrTargets(ip netip.Addr) []string {
	var out []string
	add := func(n string) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	objs, _ := h.caches.Services.ByIndex(IndexIP, ip.String())
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			add(h.svcFQDN(s.Name, s.Namespace))
		}
	}
	objs, _ = h.caches.EndpointSlices.ByIndex(IndexIP, ip.String())
	for _, o := range objs {
		sl, ok := o.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		s := h.service(sl.Namespace, sl.Labels[discoveryv1.LabelServiceName])
		if s == nil || !isHeadless(s) {
			continue
		}
		for _, e := range h.endpoints(s) {
			if e.addr == ip {
				add(e.name + "." + h.svcFQDN(s.Name, s.Namespace))
			}
		}
	}
	objs, _ = h.caches.Pods.ByIndex(IndexIP, ip.String())
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok || p.Spec.Subdomain == "" {
			continue
		}
		if s := h.service(p.Namespace, p.Spec.Subdomain); s != nil && isHeadless(s) && podPublished(p, s) {
			add(podHostname(p) + "." + h.svcFQDN(s.Name, s.Namespace))
		}
	}
	// A dashed name is only a stand-in: drop it when the same Service gives the address a
	// real hostname (a pod's hostname+subdomain).
	out = slices.DeleteFunc(out, func(n string) bool {
		rest, ok := strings.CutPrefix(n, dashed(ip)+".")
		return ok && slices.ContainsFunc(out, func(o string) bool { return o != n && strings.HasSuffix(o, "."+rest) })
	})
	slices.Sort(out)
	return out
}

func (h *Handler) soa() *mdns.SOA {
	return &mdns.SOA{Hdr: hdr(h.zone, mdns.TypeSOA), Ns: "ns.dns." + h.zone, Mbox: "hostmaster." + h.zone,
		Serial: h.serial, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: ttl}
}
