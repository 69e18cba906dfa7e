package endpointslice

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

const (
	// SkipMirrorLabel keeps the mirroring controller away from the Endpoints this controller
	// writes.
	SkipMirrorLabel = discoveryv1.LabelSkipMirror
	// OverCapacityAnnotation marks an Endpoints object cut to MaxEndpointsAddresses, as upstream.
	OverCapacityAnnotation = corev1.EndpointsOverCapacity
	// MaxEndpointsAddresses caps the addresses of one legacy Endpoints object, as upstream.
	MaxEndpointsAddresses = 1000
)

// endpointsLabels are the labels of the legacy Endpoints: the Service's plus skip-mirror.
func endpointsLabels(svc *corev1.Service) map[string]string {
	l := make(map[string]string, len(svc.Labels)+2)
	for k, v := range svc.Labels {
		if k != HeadlessLabel {
			l[k] = v
		}
	}
	l[SkipMirrorLabel] = "true"
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		l[HeadlessLabel] = ""
	}
	return l
}

type epAddr struct {
	addr  corev1.EndpointAddress
	ready bool
	ports []corev1.EndpointPort
}

// desiredSubsets computes the subsets of the legacy Endpoints (still maintained): ready pods under
// addresses, the others under notReadyAddresses, grouped by the ports they resolve. Unlike
// slices, terminating pods are left out unless publishNotReadyAddresses. It also reports
// whether addresses were cut to max.
func desiredSubsets(svc *corev1.Service, pods []*corev1.Pod, max int) ([]corev1.EndpointSubset, bool) {
	var addrs []epAddr
	for _, pod := range pods {
		if !includePod(pod, svc.Spec.PublishNotReadyAddresses) {
			continue
		}
		a := corev1.EndpointAddress{IP: podIPv4(pod), TargetRef: podRef(pod)}
		if n := pod.Spec.NodeName; n != "" {
			a.NodeName = &n
		}
		if setsHostname(pod, svc) {
			a.Hostname = pod.Spec.Hostname
		}
		e := epAddr{addr: a, ready: svc.Spec.PublishNotReadyAddresses || internal.IsPodReady(pod)}
		if len(svc.Spec.Ports) == 0 {
			// Only a headless Service may have endpoints without ports.
			if svc.Spec.ClusterIP != corev1.ClusterIPNone {
				continue
			}
		} else {
			for _, p := range slicePorts(svc, pod) {
				e.ports = append(e.ports, corev1.EndpointPort{Name: *p.Name, Port: *p.Port, Protocol: *p.Protocol, AppProtocol: p.AppProtocol})
			}
			if len(e.ports) == 0 {
				continue
			}
		}
		addrs = append(addrs, e)
	}
	truncated := false
	if len(addrs) > max {
		// Keep ready addresses first, as upstream does.
		sort.SliceStable(addrs, func(i, j int) bool { return addrs[i].ready && !addrs[j].ready })
		addrs, truncated = addrs[:max], true
	}
	return repack(addrs), truncated
}

func endpointPortsKey(ports []corev1.EndpointPort) string {
	parts := make([]string, 0, len(ports))
	for _, p := range ports {
		app := ""
		if p.AppProtocol != nil {
			app = *p.AppProtocol
		}
		parts = append(parts, fmt.Sprintf("%s/%s/%d/%s", p.Name, p.Protocol, p.Port, app))
	}
	return strings.Join(parts, ",")
}

// repack groups addresses with the same ports into one subset, in a stable order so the
// same pods always give the same object.
func repack(addrs []epAddr) []corev1.EndpointSubset {
	byKey := map[string]*corev1.EndpointSubset{}
	var keys []string
	for _, a := range addrs {
		ports := append([]corev1.EndpointPort(nil), a.ports...)
		sort.Slice(ports, func(i, j int) bool {
			return endpointPortsKey(ports[i:i+1]) < endpointPortsKey(ports[j:j+1])
		})
		k := endpointPortsKey(ports)
		s := byKey[k]
		if s == nil {
			s = &corev1.EndpointSubset{Ports: ports}
			byKey[k] = s
			keys = append(keys, k)
		}
		if a.ready {
			s.Addresses = append(s.Addresses, a.addr)
		} else {
			s.NotReadyAddresses = append(s.NotReadyAddresses, a.addr)
		}
	}
	sort.Strings(keys)
	out := make([]corev1.EndpointSubset, 0, len(keys))
	for _, k := range keys {
		s := byKey[k]
		sortAddresses(s.Addresses)
		sortAddresses(s.NotReadyAddresses)
		out = append(out, *s)
	}
	return out
}

func sortAddresses(a []corev1.EndpointAddress) {
	sort.Slice(a, func(i, j int) bool {
		x, errX := netip.ParseAddr(a[i].IP)
		y, errY := netip.ParseAddr(a[j].IP)
		if errX == nil && errY == nil && x != y {
			return x.Less(y)
		}
		if a[i].IP != a[j].IP {
			return a[i].IP < a[j].IP
		}
		return a[i].TargetRef.UID < a[j].TargetRef.UID
	})
}
