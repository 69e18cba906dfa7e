package dns

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Index names the Handler relies on; every cache in Caches must carry its kind's indexes.
const (
	// IndexIP indexes Services by cluster IP, EndpointSlices by endpoint address and Pods by pod IP.
	IndexIP = "ip"
	// IndexService indexes EndpointSlices by "<namespace>/<kubernetes.io/service-name>".
	IndexService = "service"
	// IndexSubdomain indexes Pods by "<namespace>/<spec.subdomain>".
	IndexSubdomain = "subdomain"
)

// Caches are the indexed object stores the Handler answers from (informer stores in Run).
type Caches struct {
	Services       cache.Indexer
	EndpointSlices cache.Indexer
	Pods           cache.Indexer
}

// ServiceIndexers are the indexes the Handler needs on the Service cache.
func ServiceIndexers() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, IndexIP: serviceIPs}
}

// EndpointSliceIndexers are the indexes the Handler needs on the EndpointSlice cache.
func EndpointSliceIndexers() cache.Indexers {
	return cache.Indexers{IndexService: sliceService, IndexIP: sliceAddresses}
}

// PodIndexers are the indexes the Handler needs on the Pod cache.
func PodIndexers() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, IndexIP: podIPs, IndexSubdomain: podSubdomain}
}

// NewCaches returns empty in-memory caches with the Handler's indexes (tests, tools).
func NewCaches() Caches {
	key := cache.MetaNamespaceKeyFunc
	return Caches{
		Services:       cache.NewIndexer(key, ServiceIndexers()),
		EndpointSlices: cache.NewIndexer(key, EndpointSliceIndexers()),
		Pods:           cache.NewIndexer(key, PodIndexers()),
	}
}

// InformerCaches registers the Handler's informers and indexes on f and returns their stores
// and sync functions. Call it before f.Start. On a shared factory whose informers other users
// started already, the indexes are still added and filled from what the stores hold. The
// Handler only reads the stores, so they may be shared.
//
// Pods come from podFactory: nothing else on a host watches every Pod of the cluster, so DNS
// holds them slimmed (SlimObjects) in a factory of its own even when the rest is shared.
func InformerCaches(f, podFactory informers.SharedInformerFactory) (Caches, []cache.InformerSynced, error) {
	svc := f.Core().V1().Services().Informer()
	eps := f.Discovery().V1().EndpointSlices().Informer()
	pods := podFactory.Core().V1().Pods().Informer()
	for _, x := range []struct {
		name string
		inf  cache.SharedIndexInformer
		idx  cache.Indexers
	}{{"Services", svc, ServiceIndexers()}, {"EndpointSlices", eps, EndpointSliceIndexers()}, {"Pods", pods, PodIndexers()}} {
		// The factory may already have added the namespace index; add only what is missing.
		missing := cache.Indexers{}
		have := x.inf.GetIndexer().GetIndexers()
		for k, v := range x.idx {
			if _, ok := have[k]; !ok {
				missing[k] = v
			}
		}
		if err := x.inf.AddIndexers(missing); err != nil {
			return Caches{}, nil, fmt.Errorf("add DNS indexes to the %s informer: %w", x.name, err)
		}
	}
	c := Caches{Services: svc.GetIndexer(), EndpointSlices: eps.GetIndexer(), Pods: pods.GetIndexer()}
	return c, []cache.InformerSynced{svc.HasSynced, eps.HasSynced, pods.HasSynced}, nil
}

// SlimObjects is an informer transform that keeps only what the DNS server and the network
// policy controller read (names, labels, node, addresses, phase, readiness, container
// ports), so a host holding every Pod of the cluster does not hold their specs. Use it only
// on a factory that nothing else reads: other users of the objects need what it drops.
func SlimObjects(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, UID: o.UID, Labels: o.Labels,
				ResourceVersion: o.ResourceVersion, DeletionTimestamp: o.DeletionTimestamp},
			Spec: corev1.PodSpec{Hostname: o.Spec.Hostname, Subdomain: o.Spec.Subdomain,
				NodeName: o.Spec.NodeName, HostNetwork: o.Spec.HostNetwork},
			Status: corev1.PodStatus{Phase: o.Status.Phase, PodIP: o.Status.PodIP, PodIPs: o.Status.PodIPs},
		}
		// Network policies select pods by labels, place them by node and resolve named ports.
		p.Spec.InitContainers = slimPorts(o.Spec.InitContainers)
		p.Spec.Containers = slimPorts(o.Spec.Containers)
		for _, c := range o.Status.Conditions {
			if c.Type == corev1.PodReady {
				p.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
			}
		}
		return p, nil
	case metav1.Object:
		o.SetManagedFields(nil)
		return obj, nil
	}
	return obj, nil
}

// slimPorts keeps of each container its name and ports, and only those that have ports.
func slimPorts(cs []corev1.Container) []corev1.Container {
	var out []corev1.Container
	for _, c := range cs {
		if len(c.Ports) > 0 {
			out = append(out, corev1.Container{Name: c.Name, Ports: c.Ports})
		}
	}
	return out
}

// canonIP returns the canonical text of an IP address, or "" when s is not one.
func canonIP(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return ""
	}
	return a.Unmap().String()
}

func serviceIPs(obj any) ([]string, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, ip := range clusterIPs(s) {
		out = append(out, ip.String())
	}
	return out, nil
}

func sliceService(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]}, nil
}

func sliceAddresses(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.AddressType == discoveryv1.AddressTypeFQDN {
		return nil, nil
	}
	seen := map[string]bool{}
	var out []string
	for _, ep := range s.Endpoints {
		for _, a := range ep.Addresses {
			if c := canonIP(a); c != "" && !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	return out, nil
}

func podIPs(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, ip := range podAddrs(p) {
		out = append(out, ip.String())
	}
	return out, nil
}

func podSubdomain(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.Subdomain == "" {
		return nil, nil
	}
	return []string{p.Namespace + "/" + p.Spec.Subdomain}, nil
}

// podAddrs returns the distinct IPs of a pod (status.podIPs, else status.podIP).
func podAddrs(p *corev1.Pod) []netip.Addr {
	var raw []string
	for _, ip := range p.Status.PodIPs {
		raw = append(raw, ip.IP)
	}
	if len(raw) == 0 && p.Status.PodIP != "" {
		raw = append(raw, p.Status.PodIP)
	}
	var out []netip.Addr
	for _, r := range raw {
		if a, err := netip.ParseAddr(r); err == nil && !containsAddr(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// clusterIPs returns a Service's virtual IPs; none for headless and ExternalName Services.
func clusterIPs(s *corev1.Service) []netip.Addr {
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	raw := s.Spec.ClusterIPs
	if len(raw) == 0 && s.Spec.ClusterIP != "" {
		raw = []string{s.Spec.ClusterIP}
	}
	var out []netip.Addr
	for _, r := range raw {
		if a, err := netip.ParseAddr(r); err == nil && !containsAddr(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}
