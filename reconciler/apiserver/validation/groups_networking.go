package validation

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	// annotationIngressClass is the legacy class selector that ingressClassName replaces.
	annotationIngressClass       = "kubernetes.io/ingress.class"
	maxIngressClassControllerLen = 250
)

var (
	ingressPathTypes = []networkingv1.PathType{networkingv1.PathTypeExact, networkingv1.PathTypePrefix, networkingv1.PathTypeImplementationSpecific}
	// Sequences an Exact or Prefix path may not contain: they would match differently before and
	// after URL normalisation.
	invalidPathSequences = []string{"//", "/./", "/../", "%2f", "%2F"}
	invalidPathSuffixes  = []string{"/..", "/."}
	portProtocols        = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
)

// ValidateIngress validates an Ingress on create: rules, hosts, paths with a pathType, backends
// naming either a Service or a resource, TLS and the class.
func ValidateIngress(ing *networkingv1.Ingress) field.ErrorList {
	errs := validateMeta(&ing.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	errs = append(errs, validateIngressSpec(&ing.Spec, specPath)...)
	if v, ok := ing.Annotations[annotationIngressClass]; ok && ing.Spec.IngressClassName != nil && v != *ing.Spec.IngressClassName {
		errs = append(errs, field.Invalid(metaPath.Child("annotations").Key(annotationIngressClass), v,
			"must match `spec.ingressClassName` when both are specified; remove the annotation"))
	}
	return errs
}

// ValidateIngressUpdate validates an Ingress update; everything in spec may change.
func ValidateIngressUpdate(ing, old *networkingv1.Ingress) field.ErrorList {
	errs := validateMetaUpdate(&ing.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateIngressSpec(&ing.Spec, specPath)...)
}

// ValidateIngressStatusUpdate validates a write to ingresses/status (the load-balancer
// addresses the Ingress proxies record).
func ValidateIngressStatusUpdate(ing, old *networkingv1.Ingress) field.ErrorList {
	errs := validateMetaUpdate(&ing.ObjectMeta, &old.ObjectMeta)
	lp := statusPath.Child("loadBalancer", "ingress")
	for i, lb := range ing.Status.LoadBalancer.Ingress {
		ip := lp.Index(i)
		if lb.IP != "" {
			errs = append(errs, utilvalidation.IsValidIP(ip.Child("ip"), lb.IP)...)
		}
		if lb.Hostname != "" {
			errs = append(errs, isDNSSubdomain(ip.Child("hostname"), lb.Hostname)...)
			if _, err := netip.ParseAddr(lb.Hostname); err == nil {
				errs = append(errs, field.Invalid(ip.Child("hostname"), lb.Hostname, "must be a DNS name, not an IP address; use `ip`"))
			}
		}
		for j, port := range lb.Ports {
			pp := ip.Child("ports").Index(j)
			errs = append(errs, nameErrsInt(pp.Child("port"), port.Port, utilvalidation.IsValidPortNum(int(port.Port)))...)
			errs = append(errs, validateProtocol(&port.Protocol, pp.Child("protocol"))...)
		}
	}
	return errs
}

func nameErrsInt(p *field.Path, v int32, msgs []string) field.ErrorList {
	var errs field.ErrorList
	for _, m := range msgs {
		errs = append(errs, field.Invalid(p, v, m))
	}
	return errs
}

func validateProtocol(proto *corev1.Protocol, p *field.Path) field.ErrorList {
	if proto == nil {
		return nil
	}
	switch *proto {
	case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		return nil
	}
	return field.ErrorList{field.NotSupported(p, *proto, portProtocols)}
}

func validateIngressSpec(s *networkingv1.IngressSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(s.Rules) == 0 && s.DefaultBackend == nil {
		errs = append(errs, field.Required(p.Child("rules"), "either `defaultBackend` or `rules` must be specified"))
	}
	if s.DefaultBackend != nil {
		errs = append(errs, validateIngressBackend(s.DefaultBackend, p.Child("defaultBackend"))...)
	}
	for i, r := range s.Rules {
		rp := p.Child("rules").Index(i)
		if r.Host != "" {
			errs = append(errs, validateIngressHost(r.Host, rp.Child("host"))...)
		}
		if r.HTTP == nil {
			continue
		}
		hp := rp.Child("http", "paths")
		if len(r.HTTP.Paths) == 0 {
			errs = append(errs, field.Required(hp, "at least one path is required under `http`"))
		}
		for j := range r.HTTP.Paths {
			errs = append(errs, validateIngressPath(&r.HTTP.Paths[j], hp.Index(j))...)
		}
	}
	for i, t := range s.TLS {
		tp := p.Child("tls").Index(i)
		for j, h := range t.Hosts {
			hp := tp.Child("hosts").Index(j)
			if strings.Contains(h, "*") {
				errs = append(errs, nameErrs(hp, h, utilvalidation.IsWildcardDNS1123Subdomain(h))...)
			} else {
				errs = append(errs, isDNSSubdomain(hp, h)...)
			}
		}
		if t.SecretName != "" {
			errs = append(errs, isDNSSubdomain(tp.Child("secretName"), t.SecretName)...)
		}
	}
	if s.IngressClassName != nil {
		errs = append(errs, isDNSSubdomain(p.Child("ingressClassName"), *s.IngressClassName)...)
	}
	return errs
}

// validateIngressHost accepts a DNS name or a wildcard covering one label ("*.foo.com").
func validateIngressHost(h string, p *field.Path) field.ErrorList {
	if _, err := netip.ParseAddr(h); err == nil {
		return field.ErrorList{field.Invalid(p, h, "must be a DNS name, not an IP address")}
	}
	if strings.Contains(h, "*") {
		return nameErrs(p, h, utilvalidation.IsWildcardDNS1123Subdomain(h))
	}
	return isDNSSubdomain(p, h)
}

func validateIngressPath(hp *networkingv1.HTTPIngressPath, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	pp := p.Child("path")
	if hp.PathType == nil {
		errs = append(errs, field.Required(p.Child("pathType"), "pathType must be specified"))
	} else {
		switch *hp.PathType {
		case networkingv1.PathTypeExact, networkingv1.PathTypePrefix:
			if !strings.HasPrefix(hp.Path, "/") {
				errs = append(errs, field.Invalid(pp, hp.Path, "must be an absolute path"))
			}
			for _, seq := range invalidPathSequences {
				if strings.Contains(hp.Path, seq) {
					errs = append(errs, field.Invalid(pp, hp.Path, fmt.Sprintf("must not contain '%s'", seq)))
				}
			}
			for _, suf := range invalidPathSuffixes {
				if strings.HasSuffix(hp.Path, suf) {
					errs = append(errs, field.Invalid(pp, hp.Path, fmt.Sprintf("cannot end with '%s'", suf)))
				}
			}
		case networkingv1.PathTypeImplementationSpecific:
			if hp.Path != "" && !strings.HasPrefix(hp.Path, "/") {
				errs = append(errs, field.Invalid(pp, hp.Path, "must be an absolute path"))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("pathType"), *hp.PathType, ingressPathTypes))
		}
	}
	return append(errs, validateIngressBackend(&hp.Backend, p.Child("backend"))...)
}

func validateIngressBackend(b *networkingv1.IngressBackend, p *field.Path) field.ErrorList {
	switch {
	case b.Service != nil && b.Resource != nil:
		return field.ErrorList{field.Invalid(p, "", "cannot set both resource and service backends; keep one")}
	case b.Resource != nil:
		return validateTypedLocalObjectReference(b.Resource, p.Child("resource"))
	case b.Service != nil:
		var errs field.ErrorList
		sp := p.Child("service")
		if b.Service.Name == "" {
			errs = append(errs, field.Required(sp.Child("name"), "name the Service to route to"))
		} else {
			errs = append(errs, nameErrs(sp.Child("name"), b.Service.Name, utilvalidation.IsDNS1035Label(b.Service.Name))...)
		}
		port := b.Service.Port
		pp := sp.Child("port")
		switch {
		case port.Name != "" && port.Number != 0:
			errs = append(errs, field.Invalid(pp, "", "cannot set both port name & port number; keep one"))
		case port.Name != "":
			errs = append(errs, nameErrs(pp.Child("name"), port.Name, utilvalidation.IsValidPortName(port.Name))...)
		case port.Number != 0:
			errs = append(errs, nameErrsInt(pp.Child("number"), port.Number, utilvalidation.IsValidPortNum(int(port.Number)))...)
		default:
			errs = append(errs, field.Required(pp, "port name or number is required"))
		}
		return errs
	}
	return field.ErrorList{field.Invalid(p, "", "resource or service backend is required")}
}

func validateTypedLocalObjectReference(r *corev1.TypedLocalObjectReference, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.APIGroup != nil && *r.APIGroup != "" {
		errs = append(errs, isDNSSubdomain(p.Child("apiGroup"), *r.APIGroup)...)
	}
	errs = append(errs, validatePathSegment(r.Kind, p.Child("kind"))...)
	return append(errs, validatePathSegment(r.Name, p.Child("name"))...)
}

func validatePathSegment(v string, p *field.Path) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	return nameErrs(p, v, path.ValidatePathSegmentName(v, false))
}

// ValidateIngressClass validates an IngressClass on create: controller and parameters.
func ValidateIngressClass(ic *networkingv1.IngressClass) field.ErrorList {
	errs := validateMeta(&ic.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateIngressClassSpec(&ic.Spec, specPath)...)
}

// ValidateIngressClassUpdate validates an IngressClass update; spec.controller is immutable.
func ValidateIngressClassUpdate(ic, old *networkingv1.IngressClass) field.ErrorList {
	errs := validateMetaUpdate(&ic.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateIngressClassSpec(&ic.Spec, specPath)...)
	return append(errs, apimachineryvalidation.ValidateImmutableField(ic.Spec.Controller, old.Spec.Controller, specPath.Child("controller"))...)
}

func validateIngressClassSpec(s *networkingv1.IngressClassSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	cp := p.Child("controller")
	if len(s.Controller) > maxIngressClassControllerLen {
		errs = append(errs, field.TooLong(cp, s.Controller, maxIngressClassControllerLen))
	}
	// Required when empty, else a domain-prefixed path such as "example.com/ingress-controller".
	errs = append(errs, utilvalidation.IsDomainPrefixedPath(cp, s.Controller)...)
	if r := s.Parameters; r != nil {
		pp := p.Child("parameters")
		if r.APIGroup != nil && *r.APIGroup != "" {
			errs = append(errs, isDNSSubdomain(pp.Child("apiGroup"), *r.APIGroup)...)
		}
		errs = append(errs, validatePathSegment(r.Kind, pp.Child("kind"))...)
		errs = append(errs, validatePathSegment(r.Name, pp.Child("name"))...)
		// An unset scope means Cluster.
		scope := networkingv1.IngressClassParametersReferenceScopeCluster
		if r.Scope != nil {
			scope = *r.Scope
		}
		switch scope {
		case networkingv1.IngressClassParametersReferenceScopeCluster:
			if r.Namespace != nil {
				errs = append(errs, field.Forbidden(pp.Child("namespace"), "`parameters.scope` is set to 'Cluster'; remove namespace or set scope to 'Namespace'"))
			}
		case networkingv1.IngressClassParametersReferenceScopeNamespace:
			if r.Namespace == nil || *r.Namespace == "" {
				errs = append(errs, field.Required(pp.Child("namespace"), "`parameters.scope` is set to 'Namespace'; name the namespace of the parameters object"))
			} else {
				errs = append(errs, isDNSLabel(pp.Child("namespace"), *r.Namespace)...)
			}
		default:
			errs = append(errs, field.NotSupported(pp.Child("scope"), scope, []string{
				networkingv1.IngressClassParametersReferenceScopeCluster, networkingv1.IngressClassParametersReferenceScopeNamespace}))
		}
	}
	return errs
}

// ValidateNetworkPolicy validates a NetworkPolicy on create: selectors, peers, ports and
// endPort (a numeric port not above it).
func ValidateNetworkPolicy(np *networkingv1.NetworkPolicy) field.ErrorList {
	errs := validateMeta(&np.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateNetworkPolicySpec(&np.Spec, nil, specPath)...)
}

// ValidateNetworkPolicyUpdate validates a NetworkPolicy update; CIDRs already stored are
// accepted as they are.
func ValidateNetworkPolicyUpdate(np, old *networkingv1.NetworkPolicy) field.ErrorList {
	errs := validateMetaUpdate(&np.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateNetworkPolicySpec(&np.Spec, networkPolicyCIDRs(&old.Spec), specPath)...)
}

func networkPolicyCIDRs(s *networkingv1.NetworkPolicySpec) map[string]bool {
	out := map[string]bool{}
	add := func(peers []networkingv1.NetworkPolicyPeer) {
		for _, p := range peers {
			if p.IPBlock != nil {
				out[p.IPBlock.CIDR] = true
				for _, e := range p.IPBlock.Except {
					out[e] = true
				}
			}
		}
	}
	for _, r := range s.Ingress {
		add(r.From)
	}
	for _, r := range s.Egress {
		add(r.To)
	}
	return out
}

func validateNetworkPolicySpec(s *networkingv1.NetworkPolicySpec, oldCIDRs map[string]bool, p *field.Path) field.ErrorList {
	errs := validateSelector(&s.PodSelector, p.Child("podSelector"))
	for i, r := range s.Ingress {
		rp := p.Child("ingress").Index(i)
		for j := range r.Ports {
			errs = append(errs, validateNetworkPolicyPort(&r.Ports[j], rp.Child("ports").Index(j))...)
		}
		for j := range r.From {
			errs = append(errs, validateNetworkPolicyPeer(&r.From[j], oldCIDRs, rp.Child("from").Index(j))...)
		}
	}
	for i, r := range s.Egress {
		rp := p.Child("egress").Index(i)
		for j := range r.Ports {
			errs = append(errs, validateNetworkPolicyPort(&r.Ports[j], rp.Child("ports").Index(j))...)
		}
		for j := range r.To {
			errs = append(errs, validateNetworkPolicyPeer(&r.To[j], oldCIDRs, rp.Child("to").Index(j))...)
		}
	}
	tp := p.Child("policyTypes")
	if len(s.PolicyTypes) > 2 {
		errs = append(errs, field.Invalid(tp, s.PolicyTypes, "may not specify more than two policyTypes"))
	}
	seen := map[networkingv1.PolicyType]bool{}
	for i, t := range s.PolicyTypes {
		switch {
		case t != networkingv1.PolicyTypeIngress && t != networkingv1.PolicyTypeEgress:
			errs = append(errs, field.NotSupported(tp.Index(i), t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}))
		case seen[t]:
			errs = append(errs, field.Duplicate(tp.Index(i), t))
		}
		seen[t] = true
	}
	return errs
}

func validateNetworkPolicyPort(port *networkingv1.NetworkPolicyPort, p *field.Path) field.ErrorList {
	errs := validateProtocol(port.Protocol, p.Child("protocol"))
	ep := p.Child("endPort")
	switch {
	case port.Port == nil:
		if port.EndPort != nil {
			errs = append(errs, field.Invalid(ep, *port.EndPort, "may not be specified when `port` is not specified"))
		}
	case port.Port.Type == intstr.Int:
		errs = append(errs, nameErrsInt(p.Child("port"), port.Port.IntVal, utilvalidation.IsValidPortNum(int(port.Port.IntVal)))...)
		if port.EndPort != nil {
			if *port.EndPort < port.Port.IntVal {
				errs = append(errs, field.Invalid(ep, *port.EndPort, "must be greater than or equal to `port`"))
			}
			errs = append(errs, nameErrsInt(ep, *port.EndPort, utilvalidation.IsValidPortNum(int(*port.EndPort)))...)
		}
	default:
		if port.EndPort != nil {
			errs = append(errs, field.Invalid(ep, *port.EndPort, "may not be specified when `port` is non-numeric; use a port number"))
		}
		errs = append(errs, nameErrs(p.Child("port"), port.Port.StrVal, utilvalidation.IsValidPortName(port.Port.StrVal))...)
	}
	return errs
}

func validateNetworkPolicyPeer(peer *networkingv1.NetworkPolicyPeer, oldCIDRs map[string]bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if peer.PodSelector != nil {
		n++
		errs = append(errs, validateSelector(peer.PodSelector, p.Child("podSelector"))...)
	}
	if peer.NamespaceSelector != nil {
		n++
		errs = append(errs, validateSelector(peer.NamespaceSelector, p.Child("namespaceSelector"))...)
	}
	if peer.IPBlock != nil {
		n++
		errs = append(errs, validateIPBlock(peer.IPBlock, oldCIDRs, p.Child("ipBlock"))...)
	}
	switch {
	case n == 0:
		errs = append(errs, field.Required(p, "must specify a peer: podSelector, namespaceSelector or ipBlock"))
	case n > 1 && peer.IPBlock != nil:
		errs = append(errs, field.Forbidden(p, "may not specify both ipBlock and another peer; use separate peer entries"))
	}
	return errs
}

func validateIPBlock(b *networkingv1.IPBlock, oldCIDRs map[string]bool, p *field.Path) field.ErrorList {
	cp := p.Child("cidr")
	if b.CIDR == "" {
		return field.ErrorList{field.Required(cp, `a CIDR such as "10.0.0.0/24"`)}
	}
	var errs field.ErrorList
	if !oldCIDRs[b.CIDR] {
		errs = append(errs, utilvalidation.IsValidCIDR(cp, b.CIDR)...)
	}
	cidr, cerr := netip.ParsePrefix(b.CIDR)
	for i, e := range b.Except {
		xp := p.Child("except").Index(i)
		if !oldCIDRs[e] {
			if xerrs := utilvalidation.IsValidCIDR(xp, e); len(xerrs) > 0 {
				errs = append(errs, xerrs...)
				continue
			}
		}
		x, err := netip.ParsePrefix(e)
		if cerr != nil || err != nil {
			continue
		}
		if x.Bits() <= cidr.Bits() || !cidr.Contains(x.Addr()) {
			errs = append(errs, field.Invalid(xp, e, fmt.Sprintf("must be a strict subset of `cidr` (%s)", b.CIDR)))
		}
	}
	return errs
}

const (
	maxEndpointsPerSlice = 1000
	maxAddressesPerEnd   = 100
	maxPortsPerSlice     = 20000
	maxZoneHints         = 8
)

var addressTypes = []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN}

// ValidateEndpointSlice validates an EndpointSlice on create: address type, addresses, ports,
// conditions, at most 1000 endpoints per slice and 100 addresses per endpoint.
func ValidateEndpointSlice(es *discoveryv1.EndpointSlice) field.ErrorList {
	errs := validateMeta(&es.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	if v, ok := es.Labels[discoveryv1.LabelServiceName]; ok {
		errs = append(errs, nameErrs(metaPath.Child("labels").Key(discoveryv1.LabelServiceName), v, utilvalidation.IsDNS1035Label(v))...)
	}
	return append(errs, validateEndpointSliceBody(es)...)
}

// ValidateEndpointSliceUpdate validates an EndpointSlice update; addressType is immutable.
func ValidateEndpointSliceUpdate(es, old *discoveryv1.EndpointSlice) field.ErrorList {
	errs := validateMetaUpdate(&es.ObjectMeta, &old.ObjectMeta)
	if v, ok := es.Labels[discoveryv1.LabelServiceName]; ok {
		errs = append(errs, nameErrs(metaPath.Child("labels").Key(discoveryv1.LabelServiceName), v, utilvalidation.IsDNS1035Label(v))...)
	}
	errs = append(errs, validateEndpointSliceBody(es)...)
	return append(errs, apimachineryvalidation.ValidateImmutableField(es.AddressType, old.AddressType, field.NewPath("addressType"))...)
}

func validateEndpointSliceBody(es *discoveryv1.EndpointSlice) field.ErrorList {
	var errs field.ErrorList
	ap := field.NewPath("addressType")
	knownType := true
	switch es.AddressType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
	case "":
		knownType = false
		errs = append(errs, field.Required(ap, `set "IPv4", "IPv6" or "FQDN"`))
	default:
		knownType = false
		errs = append(errs, field.NotSupported(ap, es.AddressType, addressTypes))
	}

	ep := field.NewPath("endpoints")
	if len(es.Endpoints) > maxEndpointsPerSlice {
		errs = append(errs, field.TooMany(ep, len(es.Endpoints), maxEndpointsPerSlice))
	}
	for i := range es.Endpoints {
		e, ip := &es.Endpoints[i], ep.Index(i)
		adp := ip.Child("addresses")
		switch {
		case len(e.Addresses) == 0:
			errs = append(errs, field.Required(adp, "must contain at least 1 address"))
		case len(e.Addresses) > maxAddressesPerEnd:
			errs = append(errs, field.TooMany(adp, len(e.Addresses), maxAddressesPerEnd))
		}
		for j, a := range e.Addresses {
			if knownType {
				errs = append(errs, validateEndpointAddress(a, es.AddressType, adp.Index(j))...)
			}
		}
		if e.Hostname != nil {
			errs = append(errs, isDNSLabel(ip.Child("hostname"), *e.Hostname)...)
		}
		if e.NodeName != nil {
			errs = append(errs, isDNSSubdomain(ip.Child("nodeName"), *e.NodeName)...)
		}
		errs = append(errs, metav1validation.ValidateLabels(e.DeprecatedTopology, ip.Child("deprecatedTopology"))...)
		if e.Hints != nil {
			hp := ip.Child("hints")
			if len(e.Hints.ForZones) > maxZoneHints {
				errs = append(errs, field.TooMany(hp.Child("forZones"), len(e.Hints.ForZones), maxZoneHints))
			}
			for j, z := range e.Hints.ForZones {
				if z.Name == "" {
					errs = append(errs, field.Required(hp.Child("forZones").Index(j).Child("name"), ""))
				}
			}
			if len(e.Hints.ForNodes) > maxZoneHints {
				errs = append(errs, field.TooMany(hp.Child("forNodes"), len(e.Hints.ForNodes), maxZoneHints))
			}
			for j, n := range e.Hints.ForNodes {
				errs = append(errs, isDNSSubdomain(hp.Child("forNodes").Index(j).Child("name"), n.Name)...)
			}
		}
	}

	pp := field.NewPath("ports")
	if len(es.Ports) > maxPortsPerSlice {
		errs = append(errs, field.TooMany(pp, len(es.Ports), maxPortsPerSlice))
	}
	names := map[string]bool{}
	for i, port := range es.Ports {
		ip := pp.Index(i)
		name := ""
		if port.Name != nil {
			name = *port.Name
		}
		if name != "" {
			errs = append(errs, isDNSLabel(ip.Child("name"), name)...)
		}
		// Consumers key ports by name; the empty name counts too.
		if names[name] {
			errs = append(errs, field.Duplicate(ip.Child("name"), name))
		}
		names[name] = true
		errs = append(errs, validateProtocol(port.Protocol, ip.Child("protocol"))...)
		if port.Port != nil {
			errs = append(errs, nameErrsInt(ip.Child("port"), *port.Port, utilvalidation.IsValidPortNum(int(*port.Port)))...)
		}
		if port.AppProtocol != nil {
			errs = append(errs, nameErrs(ip.Child("appProtocol"), *port.AppProtocol, utilvalidation.IsQualifiedName(*port.AppProtocol))...)
		}
	}
	return errs
}

func validateEndpointAddress(a string, t discoveryv1.AddressType, p *field.Path) field.ErrorList {
	switch t {
	case discoveryv1.AddressTypeFQDN:
		return utilvalidation.IsFullyQualifiedDomainName(p, a)
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
		if errs := utilvalidation.IsValidIP(p, a); len(errs) > 0 {
			return errs
		}
		addr, _ := netip.ParseAddr(a)
		if t == discoveryv1.AddressTypeIPv4 && !addr.Is4() {
			return field.ErrorList{field.Invalid(p, a, "must be an IPv4 address (addressType is IPv4)")}
		}
		if t == discoveryv1.AddressTypeIPv6 && !addr.Is6() {
			return field.ErrorList{field.Invalid(p, a, "must be an IPv6 address (addressType is IPv6)")}
		}
	}
	return nil
}
