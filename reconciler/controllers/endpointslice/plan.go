package endpointslice

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// HeadlessLabel marks the slices and Endpoints of a headless Service, as upstream.
const HeadlessLabel = "service.kubernetes.io/headless"

var serviceKind = corev1.SchemeGroupVersion.WithKind("Service")

// plan is the writes that turn the existing slices of a Service into the desired ones.
// Creates go first and deletes last, so an endpoint never disappears in between.
type plan struct {
	create, update, delete []*discoveryv1.EndpointSlice
}

func (p plan) empty() bool { return len(p.create)+len(p.update)+len(p.delete) == 0 }

// sliceLabels are the labels of the Service's slices: the Service's own labels plus the
// service-name and managed-by labels.
func sliceLabels(svc *corev1.Service) map[string]string {
	l := make(map[string]string, len(svc.Labels)+3)
	for k, v := range svc.Labels {
		if k == discoveryv1.LabelServiceName || k == discoveryv1.LabelManagedBy || k == HeadlessLabel {
			continue
		}
		l[k] = v
	}
	l[discoveryv1.LabelServiceName] = svc.Name
	l[discoveryv1.LabelManagedBy] = ControllerName
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		l[HeadlessLabel] = ""
	}
	return l
}

func ownedBy(es *discoveryv1.EndpointSlice, svc *corev1.Service) bool {
	for _, r := range es.OwnerReferences {
		if r.UID == svc.UID && r.Kind == serviceKind.Kind && r.APIVersion == "v1" {
			return true
		}
	}
	return false
}

// newSlice returns an unnamed slice of the Service for a port set; the API server names it
// "<svc>-xxxxx".
func newSlice(svc *corev1.Service, ports []discoveryv1.EndpointPort) *discoveryv1.EndpointSlice {
	prefix := svc.Name + "-"
	if len(prefix) > validation.DNS1123SubdomainMaxLength-5 {
		prefix = prefix[:validation.DNS1123SubdomainMaxLength-5]
	}
	if ports == nil {
		ports = []discoveryv1.EndpointPort{}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    prefix,
			Namespace:       svc.Namespace,
			Labels:          sliceLabels(svc),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(svc, serviceKind)},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   []discoveryv1.Endpoint{},
	}
}

// isPlaceholder reports whether a slice is the empty slice kept for a Service without
// endpoints, so consumers can tell "no endpoints" from "not reconciled yet", as upstream.
func isPlaceholder(es *discoveryv1.EndpointSlice, svc *corev1.Service) bool {
	return len(es.Endpoints) == 0 && len(es.Ports) == 0 && es.AddressType == discoveryv1.AddressTypeIPv4 &&
		ownedBy(es, svc) && apiequality.Semantic.DeepEqual(es.Labels, sliceLabels(svc))
}

// planSlices decides the writes for one Service, as upstream: existing slices keep the
// endpoints they hold, updated in place; slices that changed are filled up first; what is left
// goes into the one unchanged slice it fits best, else into new slices of at most max
// endpoints. Slices left empty are deleted, except one placeholder when nothing remains.
// Slices not owned by this Service or of another address type are deleted. existing holds
// only slices managed by this controller for the Service's name.
func planSlices(svc *corev1.Service, existing []*discoveryv1.EndpointSlice, desired map[portKey]*group, max int) plan {
	var p plan
	labels := sliceLabels(svc)
	byKey := map[portKey][]*discoveryv1.EndpointSlice{}
	var keys []portKey
	for _, es := range existing {
		if !ownedBy(es, svc) || es.AddressType != discoveryv1.AddressTypeIPv4 {
			p.delete = append(p.delete, es)
			continue
		}
		k := keyOfPorts(es.Ports)
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], es)
	}
	for k := range desired {
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })

	var kept []*discoveryv1.EndpointSlice
	for _, k := range keys {
		g := desired[k]
		remaining := map[string]*discoveryv1.Endpoint{}
		var order []string
		var ports []discoveryv1.EndpointPort
		if g != nil {
			ports = g.ports
			for i := range g.endpoints {
				ek := endpointKey(&g.endpoints[i])
				remaining[ek] = &g.endpoints[i]
				order = append(order, ek)
			}
		}
		slices := byKey[k]
		sort.Slice(slices, func(i, j int) bool { return slices[i].Name < slices[j].Name })

		// 1. Update and remove endpoints in place.
		var changed, unchanged []*discoveryv1.EndpointSlice
		for _, es := range slices {
			eps := make([]discoveryv1.Endpoint, 0, len(es.Endpoints))
			dirty := !apiequality.Semantic.DeepEqual(es.Labels, labels)
			for i := range es.Endpoints {
				ek := endpointKey(&es.Endpoints[i])
				want, ok := remaining[ek]
				if !ok {
					dirty = true // gone, or a duplicate of one already placed
					continue
				}
				if !apiequality.Semantic.DeepEqual(*want, es.Endpoints[i]) {
					dirty = true
				}
				eps = append(eps, *want)
				delete(remaining, ek)
			}
			if !dirty {
				unchanged = append(unchanged, es)
				continue
			}
			if len(eps) == 0 {
				p.delete = append(p.delete, es)
				continue
			}
			es = es.DeepCopy()
			es.Labels = labels
			es.Endpoints = eps
			changed = append(changed, es)
		}
		var todo []discoveryv1.Endpoint
		for _, ek := range order {
			if ep, ok := remaining[ek]; ok {
				todo = append(todo, *ep)
			}
		}

		// 2. Fill the slices that are written anyway, fullest first.
		sort.SliceStable(changed, func(i, j int) bool { return len(changed[i].Endpoints) > len(changed[j].Endpoints) })
		for _, es := range changed {
			n := min(max-len(es.Endpoints), len(todo))
			if n > 0 {
				es.Endpoints = append(es.Endpoints, todo[:n]...)
				todo = todo[n:]
			}
		}
		p.update = append(p.update, changed...)

		// 3. The rest goes into the unchanged slice it fits best, or new slices.
		for len(todo) > 0 {
			var target *discoveryv1.EndpointSlice
			if len(todo) < max {
				unchanged, target = sliceToFill(unchanged, len(todo), max)
			}
			if target == nil {
				target = newSlice(svc, ports)
			} else {
				target = target.DeepCopy()
			}
			n := min(max-len(target.Endpoints), len(todo))
			target.Endpoints = append(target.Endpoints, todo[:n]...)
			todo = todo[n:]
			if target.Name == "" {
				p.create = append(p.create, target)
			} else {
				p.update = append(p.update, target)
			}
		}
		for _, es := range unchanged {
			if len(es.Endpoints) == 0 {
				p.delete = append(p.delete, es)
			} else {
				kept = append(kept, es)
			}
		}
	}

	// Nothing would remain: keep (or make) one empty placeholder slice.
	if len(kept)+len(p.update)+len(p.create) == 0 {
		for i, es := range p.delete {
			if isPlaceholder(es, svc) {
				p.delete = append(p.delete[:i:i], p.delete[i+1:]...)
				return p
			}
		}
		p.create = append(p.create, newSlice(svc, nil))
	}
	return p
}

// sliceToFill picks the slice that comes closest to full when n endpoints are added, and
// returns the other slices; nil when none has room.
func sliceToFill(slices []*discoveryv1.EndpointSlice, n, max int) ([]*discoveryv1.EndpointSlice, *discoveryv1.EndpointSlice) {
	best, bestDiff := -1, max
	for i, es := range slices {
		diff := max - (n + len(es.Endpoints))
		if diff >= 0 && diff < bestDiff {
			best, bestDiff = i, diff
			if diff == 0 {
				break
			}
		}
	}
	if best < 0 {
		return slices, nil
	}
	target := slices[best]
	rest := append(slices[:best:best], slices[best+1:]...)
	return rest, target
}
