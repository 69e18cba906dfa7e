package validation

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// coreMaxClientIPAffinitySeconds bounds sessionAffinityConfig.clientIP.timeoutSeconds (one day).
const coreMaxClientIPAffinitySeconds = 86400

var (
	coreServiceTypes = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName}
	coreTrafficPols  = []corev1.ServiceExternalTrafficPolicy{corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal}
	coreInternalPols = []corev1.ServiceInternalTrafficPolicy{corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal}
	coreIPFamPols    = []corev1.IPFamilyPolicy{corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack}
	coreTrafficDists = []string{corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone, corev1.ServiceTrafficDistributionPreferSameNode}
)

func coreServiceValidators(opts Options) Funcs {
	return Funcs{
		Create: coreTyped(func(s *corev1.Service) field.ErrorList { return coreValidateService(s, opts) }),
		Update: coreTyped2(func(s, old *corev1.Service) field.ErrorList {
			allErrs := coreMetaUpdate(&s.ObjectMeta, &old.ObjectMeta)
			allErrs = append(allErrs, coreValidateServiceSpec(s, opts)...)
			return append(allErrs, coreValidateServiceUpdate(s, old)...)
		}),
		StatusUpdate: coreTyped2(coreValidateServiceStatusUpdate),
	}
}

func coreValidateService(s *corev1.Service, opts Options) field.ErrorList {
	allErrs := coreMeta(&s.ObjectMeta, true, apimachineryvalidation.NameIsDNS1035Label)
	return append(allErrs, coreValidateServiceSpec(s, opts)...)
}

func coreValidateServiceSpec(s *corev1.Service, opts Options) field.ErrorList {
	var allErrs field.ErrorList
	spec := &s.Spec
	typ := spec.Type
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	allErrs = append(allErrs, coreNotSupported(spec.Type, coreServiceTypes, true, coreSpecPath.Child("type"))...)
	nodePorts := typ == corev1.ServiceTypeNodePort || typ == corev1.ServiceTypeLoadBalancer
	headless := spec.ClusterIP == corev1.ClusterIPNone

	// Ports.
	portsPath := coreSpecPath.Child("ports")
	if len(spec.Ports) == 0 && typ != corev1.ServiceTypeExternalName && !headless {
		allErrs = append(allErrs, field.Required(portsPath, "a Service needs at least one port unless it is headless (clusterIP: None) or of type ExternalName"))
	}
	names := sets.New[string]()
	portKeys := sets.New[string]()
	nodePortKeys := sets.New[string]()
	for i := range spec.Ports {
		port := &spec.Ports[i]
		p := portsPath.Index(i)
		np := p.Child("name")
		switch {
		case port.Name == "" && len(spec.Ports) > 1:
			allErrs = append(allErrs, field.Required(np, "every port needs a name when a Service has more than one port"))
		case port.Name != "":
			if errs := coreDNSLabel(port.Name, np); len(errs) > 0 {
				allErrs = append(allErrs, errs...)
			} else if names.Has(port.Name) {
				allErrs = append(allErrs, field.Duplicate(np, port.Name))
			}
			names.Insert(port.Name)
		}
		allErrs = append(allErrs, corePortNumber(port.Port, p.Child("port"))...)
		allErrs = append(allErrs, coreProtocol(port.Protocol, p.Child("protocol"))...)
		proto := port.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		key := fmt.Sprintf("%d/%s", port.Port, proto)
		if portKeys.Has(key) {
			allErrs = append(allErrs, field.Duplicate(p, key))
		}
		portKeys.Insert(key)
		allErrs = append(allErrs, coreValidateTargetPort(port.TargetPort, p.Child("targetPort"))...)
		if port.AppProtocol != nil {
			allErrs = append(allErrs, coreQualifiedName(*port.AppProtocol, p.Child("appProtocol"))...)
		}
		if port.NodePort != 0 {
			npp := p.Child("nodePort")
			if !nodePorts {
				allErrs = append(allErrs, field.Forbidden(npp, fmt.Sprintf("may not be used when `type` is '%s'; use NodePort or LoadBalancer", typ)))
			} else {
				allErrs = append(allErrs, coreNodePortRange(port.NodePort, opts, npp)...)
				nkey := fmt.Sprintf("%d/%s", port.NodePort, proto)
				if nodePortKeys.Has(nkey) {
					allErrs = append(allErrs, field.Duplicate(npp, nkey))
				}
				nodePortKeys.Insert(nkey)
			}
		}
	}

	allErrs = append(allErrs, coreValidateClusterIPs(spec, typ, opts)...)

	if typ == corev1.ServiceTypeExternalName {
		ep := coreSpecPath.Child("externalName")
		if spec.ExternalName == "" {
			allErrs = append(allErrs, field.Required(ep, "a DNS name such as my.database.example.com"))
		} else {
			allErrs = append(allErrs, coreInvalidEach(ep, spec.ExternalName, utilvalidation.IsDNS1123Subdomain(strings.TrimSuffix(spec.ExternalName, ".")))...)
		}
	}

	allErrs = append(allErrs, metav1validation.ValidateLabels(spec.Selector, coreSpecPath.Child("selector"))...)

	// Session affinity.
	allErrs = append(allErrs, coreNotSupported(spec.SessionAffinity,
		[]corev1.ServiceAffinity{corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP}, true, coreSpecPath.Child("sessionAffinity"))...)
	sacPath := coreSpecPath.Child("sessionAffinityConfig")
	if spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			if t := *c.ClientIP.TimeoutSeconds; t < 1 || t > coreMaxClientIPAffinitySeconds {
				allErrs = append(allErrs, field.Invalid(sacPath.Child("clientIP", "timeoutSeconds"), t, fmt.Sprintf("must be greater than 0 and less than or equal to %d", coreMaxClientIPAffinitySeconds)))
			}
		}
	} else if spec.SessionAffinityConfig != nil {
		allErrs = append(allErrs, field.Invalid(sacPath, "", fmt.Sprintf("must not be set when session affinity is %s", corev1.ServiceAffinityNone)))
	}

	// Traffic policies.
	etpPath := coreSpecPath.Child("externalTrafficPolicy")
	if spec.ExternalTrafficPolicy != "" {
		if !nodePorts {
			allErrs = append(allErrs, field.Invalid(etpPath, spec.ExternalTrafficPolicy, "may only be set when `type` is 'NodePort' or 'LoadBalancer'"))
		} else {
			allErrs = append(allErrs, coreNotSupported(spec.ExternalTrafficPolicy, coreTrafficPols, false, etpPath)...)
		}
	}
	if spec.HealthCheckNodePort != 0 {
		hp := coreSpecPath.Child("healthCheckNodePort")
		if typ != corev1.ServiceTypeLoadBalancer || spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
			allErrs = append(allErrs, field.Invalid(hp, spec.HealthCheckNodePort, "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
		} else {
			allErrs = append(allErrs, coreNodePortRange(spec.HealthCheckNodePort, opts, hp)...)
		}
	}
	if spec.InternalTrafficPolicy != nil {
		allErrs = append(allErrs, coreNotSupported(*spec.InternalTrafficPolicy, coreInternalPols, false, coreSpecPath.Child("internalTrafficPolicy"))...)
	}
	if spec.TrafficDistribution != nil {
		allErrs = append(allErrs, coreNotSupported(*spec.TrafficDistribution, coreTrafficDists, false, coreSpecPath.Child("trafficDistribution"))...)
	}

	// IP families.
	if spec.IPFamilyPolicy != nil {
		allErrs = append(allErrs, coreNotSupported(*spec.IPFamilyPolicy, coreIPFamPols, false, coreSpecPath.Child("ipFamilyPolicy"))...)
	}
	famPath := coreSpecPath.Child("ipFamilies")
	fams := sets.New[corev1.IPFamily]()
	for i, f := range spec.IPFamilies {
		allErrs = append(allErrs, coreNotSupported(f, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, false, famPath.Index(i))...)
		if fams.Has(f) {
			allErrs = append(allErrs, field.Duplicate(famPath.Index(i), f))
		}
		fams.Insert(f)
	}
	if len(spec.IPFamilies) > 2 {
		allErrs = append(allErrs, field.TooMany(famPath, len(spec.IPFamilies), 2))
	}
	if spec.IPFamilyPolicy != nil && *spec.IPFamilyPolicy == corev1.IPFamilyPolicySingleStack && len(spec.IPFamilies) > 1 {
		allErrs = append(allErrs, field.Invalid(famPath, spec.IPFamilies, "must contain at most one entry when `ipFamilyPolicy` is 'SingleStack'"))
	}

	// External addresses and LoadBalancer-only fields.
	for i, ip := range spec.ExternalIPs {
		allErrs = append(allErrs, coreNonSpecialIP(ip, coreSpecPath.Child("externalIPs").Index(i))...)
	}
	lbOnly := func(name string) {
		allErrs = append(allErrs, field.Forbidden(coreSpecPath.Child(name), fmt.Sprintf("may only be used when `type` is 'LoadBalancer' (type is '%s')", typ)))
	}
	if typ != corev1.ServiceTypeLoadBalancer {
		if len(spec.LoadBalancerSourceRanges) > 0 {
			lbOnly("loadBalancerSourceRanges")
		}
		if spec.LoadBalancerClass != nil {
			lbOnly("loadBalancerClass")
		}
		if spec.AllocateLoadBalancerNodePorts != nil && typ != corev1.ServiceTypeExternalName {
			lbOnly("allocateLoadBalancerNodePorts")
		}
		if spec.LoadBalancerIP != "" {
			lbOnly("loadBalancerIP")
		}
	}
	for i, cidr := range spec.LoadBalancerSourceRanges {
		allErrs = append(allErrs, coreCIDR(strings.TrimSpace(cidr), coreSpecPath.Child("loadBalancerSourceRanges").Index(i))...)
	}
	if spec.LoadBalancerClass != nil {
		allErrs = append(allErrs, coreQualifiedName(*spec.LoadBalancerClass, coreSpecPath.Child("loadBalancerClass"))...)
	}
	if spec.LoadBalancerIP != "" && typ == corev1.ServiceTypeLoadBalancer {
		allErrs = append(allErrs, coreIP(spec.LoadBalancerIP, coreSpecPath.Child("loadBalancerIP"))...)
	}
	return allErrs
}

func coreValidateTargetPort(tp intstr.IntOrString, p *field.Path) field.ErrorList {
	if tp.Type == intstr.String {
		if tp.StrVal == "" {
			return nil // defaulted to the port number
		}
		return coreInvalidEach(p, tp.StrVal, utilvalidation.IsValidPortName(tp.StrVal))
	}
	if tp.IntVal == 0 {
		return nil // defaulted to the port number
	}
	return corePortNumber(tp.IntVal, p)
}

func coreNodePortRange(port int32, opts Options, p *field.Path) field.ErrorList {
	if opts.NodePortMax == 0 {
		return corePortNumber(port, p)
	}
	if port < opts.NodePortMin || port > opts.NodePortMax {
		return field.ErrorList{field.Invalid(p, port, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", opts.NodePortMin, opts.NodePortMax))}
	}
	return nil
}

// coreValidateClusterIPs checks spec.clusterIP and spec.clusterIPs against the type and the
// site's service CIDR.
func coreValidateClusterIPs(spec *corev1.ServiceSpec, typ corev1.ServiceType, opts Options) field.ErrorList {
	var allErrs field.ErrorList
	ipPath, ipsPath := coreSpecPath.Child("clusterIP"), coreSpecPath.Child("clusterIPs")
	if typ == corev1.ServiceTypeExternalName {
		if spec.ClusterIP != "" {
			allErrs = append(allErrs, field.Forbidden(ipPath, "may not be set for ExternalName services"))
		}
		if len(spec.ClusterIPs) > 0 {
			allErrs = append(allErrs, field.Forbidden(ipsPath, "may not be set for ExternalName services"))
		}
		return allErrs
	}
	if len(spec.ClusterIPs) > 0 && spec.ClusterIPs[0] != spec.ClusterIP {
		allErrs = append(allErrs, field.Invalid(ipsPath.Index(0), spec.ClusterIPs[0], fmt.Sprintf("first value must match `clusterIP` (%q)", spec.ClusterIP)))
	}
	if len(spec.ClusterIPs) > 2 {
		allErrs = append(allErrs, field.TooMany(ipsPath, len(spec.ClusterIPs), 2))
	}
	ips := spec.ClusterIPs
	paths := make([]*field.Path, len(ips))
	for i := range ips {
		paths[i] = ipsPath.Index(i)
	}
	if len(ips) == 0 && spec.ClusterIP != "" {
		ips, paths = []string{spec.ClusterIP}, []*field.Path{ipPath}
	}
	for i, ip := range ips {
		p := paths[i]
		if ip == corev1.ClusterIPNone {
			if i > 0 {
				allErrs = append(allErrs, field.Invalid(p, ip, "'None' may only be the only value"))
			} else if typ != corev1.ServiceTypeClusterIP {
				allErrs = append(allErrs, field.Invalid(p, ip, fmt.Sprintf("may not be set to 'None' for %s services", typ)))
			}
			continue
		}
		if ip == "" {
			continue // allocated later
		}
		if errs := coreIP(ip, p); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
			continue
		}
		if msg := coreServiceIPRangeError(ip, opts.ServiceCIDR); msg != "" {
			allErrs = append(allErrs, field.Invalid(p, ip, msg))
		}
	}
	return allErrs
}

// coreServiceIPRangeError says why ip cannot be allocated from cidr, in the allocator's words.
func coreServiceIPRangeError(ip string, cidr netip.Prefix) string {
	if !cidr.IsValid() {
		return ""
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	addr = addr.Unmap()
	cidr = cidr.Masked()
	inRange := cidr.Contains(addr) && addr != cidr.Addr()
	if inRange && addr.Is4() && cidr.Bits() < 31 {
		// The broadcast address of an IPv4 range is not allocatable either.
		b := addr.As4()
		last := cidr.Addr().As4()
		hostBits := 32 - cidr.Bits()
		for i := 3; i >= 0 && hostBits > 0; i-- {
			n := min(hostBits, 8)
			last[i] |= byte(1<<n - 1)
			hostBits -= n
		}
		inRange = b != last
	}
	if inRange {
		return ""
	}
	return fmt.Sprintf("failed to allocate IP %s: the provided IP (%s) is not in the valid range. The range of valid IPs is %s", ip, ip, cidr)
}

func coreValidateServiceUpdate(s, old *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	oldExt := old.Spec.Type == corev1.ServiceTypeExternalName
	newExt := s.Spec.Type == corev1.ServiceTypeExternalName
	if !oldExt && !newExt {
		// A cluster IP is only released by deleting the Service or by turning it into ExternalName.
		if s.Spec.ClusterIP != old.Spec.ClusterIP {
			allErrs = append(allErrs, field.Invalid(coreSpecPath.Child("clusterIP"), s.Spec.ClusterIP, fmt.Sprintf("field is immutable (was %q); delete and recreate the Service to change it", old.Spec.ClusterIP)))
		}
		for i := range min(len(s.Spec.ClusterIPs), len(old.Spec.ClusterIPs)) {
			if s.Spec.ClusterIPs[i] != old.Spec.ClusterIPs[i] {
				allErrs = append(allErrs, field.Invalid(coreSpecPath.Child("clusterIPs").Index(i), s.Spec.ClusterIPs[i], "may not change once set"))
			}
		}
	}
	if old.Spec.LoadBalancerClass != nil && old.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.Type == corev1.ServiceTypeLoadBalancer {
		if s.Spec.LoadBalancerClass == nil || *s.Spec.LoadBalancerClass != *old.Spec.LoadBalancerClass {
			allErrs = append(allErrs, field.Invalid(coreSpecPath.Child("loadBalancerClass"), s.Spec.LoadBalancerClass, "may not change once set"))
		}
	}
	return allErrs
}

func coreValidateServiceStatusUpdate(s, old *corev1.Service) field.ErrorList {
	allErrs := coreMetaUpdate(&s.ObjectMeta, &old.ObjectMeta)
	ip := field.NewPath("status", "loadBalancer", "ingress")
	for i, ing := range s.Status.LoadBalancer.Ingress {
		p := ip.Index(i)
		if ing.IP != "" {
			allErrs = append(allErrs, coreIP(ing.IP, p.Child("ip"))...)
		}
		if ing.Hostname != "" {
			allErrs = append(allErrs, coreDNSSubdomain(ing.Hostname, p.Child("hostname"))...)
			if _, err := netip.ParseAddr(ing.Hostname); err == nil {
				allErrs = append(allErrs, field.Invalid(p.Child("hostname"), ing.Hostname, "must be a DNS name, not an IP address"))
			}
		}
		if ing.IPMode != nil {
			if ing.IP == "" {
				allErrs = append(allErrs, field.Forbidden(p.Child("ipMode"), "may only be set when `ip` is set"))
			}
			allErrs = append(allErrs, coreNotSupported(*ing.IPMode, []corev1.LoadBalancerIPMode{corev1.LoadBalancerIPModeVIP, corev1.LoadBalancerIPModeProxy}, false, p.Child("ipMode"))...)
		}
	}
	return allErrs
}

// Endpoints (legacy API, still written by users for selectorless Services).

func coreValidateEndpoints(e *corev1.Endpoints) field.ErrorList {
	allErrs := coreMeta(&e.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(allErrs, coreValidateEndpointSubsets(e.Subsets)...)
}

func coreValidateEndpointSubsets(subsets []corev1.EndpointSubset) field.ErrorList {
	var allErrs field.ErrorList
	sp := field.NewPath("subsets")
	for i := range subsets {
		ss := &subsets[i]
		p := sp.Index(i)
		if len(ss.Addresses) == 0 && len(ss.NotReadyAddresses) == 0 {
			allErrs = append(allErrs, field.Required(p, "must specify `addresses` or `notReadyAddresses`"))
		}
		for j := range ss.Addresses {
			allErrs = append(allErrs, coreValidateEndpointAddress(&ss.Addresses[j], p.Child("addresses").Index(j))...)
		}
		for j := range ss.NotReadyAddresses {
			allErrs = append(allErrs, coreValidateEndpointAddress(&ss.NotReadyAddresses[j], p.Child("notReadyAddresses").Index(j))...)
		}
		names := sets.New[string]()
		for j, port := range ss.Ports {
			pp := p.Child("ports").Index(j)
			np := pp.Child("name")
			switch {
			case port.Name == "" && len(ss.Ports) > 1:
				allErrs = append(allErrs, field.Required(np, "every port needs a name when a subset has more than one port"))
			case port.Name != "":
				if errs := coreDNSLabel(port.Name, np); len(errs) > 0 {
					allErrs = append(allErrs, errs...)
				} else if names.Has(port.Name) {
					allErrs = append(allErrs, field.Duplicate(np, port.Name))
				}
				names.Insert(port.Name)
			}
			allErrs = append(allErrs, corePortNumber(port.Port, pp.Child("port"))...)
			allErrs = append(allErrs, coreProtocol(port.Protocol, pp.Child("protocol"))...)
			if port.AppProtocol != nil {
				allErrs = append(allErrs, coreQualifiedName(*port.AppProtocol, pp.Child("appProtocol"))...)
			}
		}
	}
	return allErrs
}

func coreValidateEndpointAddress(a *corev1.EndpointAddress, p *field.Path) field.ErrorList {
	allErrs := coreNonSpecialIP(a.IP, p.Child("ip"))
	if a.Hostname != "" {
		allErrs = append(allErrs, coreDNSLabel(a.Hostname, p.Child("hostname"))...)
	}
	if a.NodeName != nil && *a.NodeName != "" {
		allErrs = append(allErrs, coreDNSSubdomain(*a.NodeName, p.Child("nodeName"))...)
	}
	return allErrs
}
