package endpointslice

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// portKey identifies a set of slice ports: endpoints that resolve to the same set share
// slices.
type portKey string

// group is the desired content of the slices of one port set.
type group struct {
	ports     []discoveryv1.EndpointPort
	endpoints []discoveryv1.Endpoint
}

// keyOfPorts is order-independent, so a slice written with its ports in any order still
// lands in its group.
func keyOfPorts(ports []discoveryv1.EndpointPort) portKey {
	parts := make([]string, 0, len(ports))
	for _, p := range ports {
		var name, proto, app string
		var num int32
		if p.Name != nil {
			name = *p.Name
		}
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		if p.Port != nil {
			num = *p.Port
		}
		if p.AppProtocol != nil {
			app = *p.AppProtocol
		}
		parts = append(parts, fmt.Sprintf("%s/%s/%d/%s", name, proto, num, app))
	}
	sort.Strings(parts)
	return portKey(strings.Join(parts, ","))
}

// endpointKey identifies an endpoint across syncs: the pod it stands for and its address.
func endpointKey(ep *discoveryv1.Endpoint) string {
	var ref string
	if ep.TargetRef != nil {
		ref = ep.TargetRef.Namespace + "/" + ep.TargetRef.Name
	}
	return ref + "|" + strings.Join(ep.Addresses, ",")
}

// selectorless reports whether the controller leaves the Service's endpoints to the user
// (Services without a selector, and ExternalName Services). An empty selector counts as none: a round trip through JSON with
// omitempty would turn it into nil anyway.
func selectorless(svc *corev1.Service) bool {
	return len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName
}

// includePod reports whether a pod can be an endpoint at all: it has an address and has not
// finished. Terminating pods are included only when includeTerminating.
func includePod(pod *corev1.Pod, includeTerminating bool) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if podIPv4(pod) == "" {
		return false
	}
	return includeTerminating || pod.DeletionTimestamp == nil
}

// podIPv4 returns the pod's IPv4 address, or "".
func podIPv4(pod *corev1.Pod) string {
	candidates := make([]string, 0, len(pod.Status.PodIPs)+1)
	for _, ip := range pod.Status.PodIPs {
		candidates = append(candidates, ip.IP)
	}
	candidates = append(candidates, pod.Status.PodIP)
	for _, s := range candidates {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			return a.String()
		}
	}
	return ""
}

// findPort resolves a Service port's targetPort on one pod: a number is used as is (0 means
// the Service port), a name is looked up among the pod's container ports of the same
// protocol, sidecar init containers included.
func findPort(pod *corev1.Pod, sp *corev1.ServicePort) (int32, bool) {
	tp := sp.TargetPort
	if tp.Type == intstr.Int {
		if tp.IntVal == 0 {
			return sp.Port, true
		}
		return tp.IntVal, true
	}
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	match := func(cs []corev1.Container, sidecarsOnly bool) (int32, bool) {
		for _, c := range cs {
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, p := range c.Ports {
				pp := p.Protocol
				if pp == "" {
					pp = corev1.ProtocolTCP
				}
				if p.Name == tp.StrVal && pp == proto {
					return p.ContainerPort, true
				}
			}
		}
		return 0, false
	}
	if n, ok := match(pod.Spec.Containers, false); ok {
		return n, true
	}
	return match(pod.Spec.InitContainers, true)
}

// slicePorts returns the ports of a pod's endpoint: one per Service port whose target
// resolves on this pod; a port that does not resolve is left out, as upstream.
func slicePorts(svc *corev1.Service, pod *corev1.Pod) []discoveryv1.EndpointPort {
	ports := make([]discoveryv1.EndpointPort, 0, len(svc.Spec.Ports))
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		n, ok := findPort(pod, sp)
		if !ok {
			continue
		}
		name, proto := sp.Name, sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		ports = append(ports, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &n, AppProtocol: sp.AppProtocol})
	}
	return ports
}

// setsHostname reports whether a pod's hostname is published for this Service: the pod
// names the Service as its subdomain.
func setsHostname(pod *corev1.Pod, svc *corev1.Service) bool {
	return pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name && pod.Namespace == svc.Namespace
}

func podRef(pod *corev1.Pod) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

// podEndpoint is the slice endpoint of a pod: serving while the pod is ready, ready only while
// also not terminating (or always with publishNotReadyAddresses), with its node, its zone and,
// when the pod has a hostname and its subdomain names the Service, its hostname.
func podEndpoint(svc *corev1.Service, pod *corev1.Pod, zoneOf func(node string) string) discoveryv1.Endpoint {
	serving := internal.IsPodReady(pod)
	terminating := pod.DeletionTimestamp != nil
	ready := svc.Spec.PublishNotReadyAddresses || (serving && !terminating)
	ep := discoveryv1.Endpoint{
		Addresses:  []string{podIPv4(pod)},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		TargetRef:  podRef(pod),
	}
	if n := pod.Spec.NodeName; n != "" {
		ep.NodeName = &n
		if z := zoneOf(n); z != "" {
			ep.Zone = &z
		}
	}
	if setsHostname(pod, svc) {
		h := pod.Spec.Hostname
		ep.Hostname = &h
	}
	ep.Hints = trafficHints(svc, ep)
	return ep
}

// trafficHints are the hints spec.trafficDistribution asks for, as upstream's controller
// writes them: the endpoint's own zone for PreferSameZone (and PreferClose, its older name),
// also its own node for PreferSameNode. A Service proxy then sends a host's connections to
// the endpoints hinted for it, when it has any.
func trafficHints(svc *corev1.Service, ep discoveryv1.Endpoint) *discoveryv1.EndpointHints {
	d := svc.Spec.TrafficDistribution
	if d == nil {
		return nil
	}
	var h discoveryv1.EndpointHints
	switch *d {
	case corev1.ServiceTrafficDistributionPreferSameNode:
		if ep.NodeName != nil {
			h.ForNodes = []discoveryv1.ForNode{{Name: *ep.NodeName}}
		}
		fallthrough
	case corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone:
		if ep.Zone != nil {
			h.ForZones = []discoveryv1.ForZone{{Name: *ep.Zone}}
		}
	}
	if h.ForNodes == nil && h.ForZones == nil {
		return nil
	}
	return &h
}

// desiredGroups computes the endpoints a Service should have, grouped by port set.
func desiredGroups(svc *corev1.Service, pods []*corev1.Pod, zoneOf func(node string) string) map[portKey]*group {
	out := map[portKey]*group{}
	for _, pod := range pods {
		if !includePod(pod, true) {
			continue
		}
		ports := slicePorts(svc, pod)
		k := keyOfPorts(ports)
		g := out[k]
		if g == nil {
			g = &group{ports: ports}
			out[k] = g
		}
		g.endpoints = append(g.endpoints, podEndpoint(svc, pod, zoneOf))
	}
	for _, g := range out {
		sort.Slice(g.endpoints, func(i, j int) bool { return endpointKey(&g.endpoints[i]) < endpointKey(&g.endpoints[j]) })
	}
	return out
}
