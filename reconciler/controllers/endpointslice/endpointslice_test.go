package endpointslice

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/test/controllertest"
)

type cluster struct {
	t      *testing.T
	client kubernetes.Interface
	c      *Controller
	ns     string
}

func (k *cluster) service(name string, selector map[string]string, mutate func(*corev1.Service)) *corev1.Service {
	k.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns},
		Spec: corev1.ServiceSpec{Selector: selector,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	}
	if mutate != nil {
		mutate(svc)
	}
	got, err := k.client.CoreV1().Services(k.ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatalf("create service %s: %v", name, err)
	}
	return got
}

// pod creates a pod with an address, ready or not, the way the node agent would report it.
func (k *cluster) pod(name, ip string, lbls map[string]string, ready bool, mutate func(*corev1.Pod)) *corev1.Pod {
	k.t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: lbls},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}}},
	}
	if mutate != nil {
		mutate(p)
	}
	p, err := k.client.CoreV1().Pods(k.ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatalf("create pod %s: %v", name, err)
	}
	return k.setStatus(p, ip, ready)
}

func (k *cluster) setStatus(p *corev1.Pod, ip string, ready bool) *corev1.Pod {
	k.t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		p = p.DeepCopy()
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
		got, err := k.client.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil {
			return got
		}
		if i == 5 {
			k.t.Fatalf("pod %s status: %v", p.Name, err)
		}
		if p, err = k.client.CoreV1().Pods(k.ns).Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
			k.t.Fatalf("get pod: %v", err)
		}
	}
}

func (k *cluster) slices(svc string) []discoveryv1.EndpointSlice {
	k.t.Helper()
	list, err := k.client.DiscoveryV1().EndpointSlices(k.ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc}).String()})
	if err != nil {
		k.t.Fatalf("list slices: %v", err)
	}
	return list.Items
}

// endpointsByPod flattens a Service's slices: pod name -> endpoint, and the ports of its slice.
type seen struct {
	ep    discoveryv1.Endpoint
	ports string
	count int
}

func byPod(slices []discoveryv1.EndpointSlice) map[string]*seen {
	out := map[string]*seen{}
	for _, es := range slices {
		var ports []string
		for _, p := range es.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d", *p.Name, *p.Port))
		}
		sort.Strings(ports)
		for _, ep := range es.Endpoints {
			s := out[ep.TargetRef.Name]
			if s == nil {
				s = &seen{}
				out[ep.TargetRef.Name] = s
			}
			s.ep, s.ports = ep, strings.Join(ports, ",")
			s.count++
		}
	}
	return out
}

func (k *cluster) endpoints(name string) (*corev1.Endpoints, error) {
	return k.client.CoreV1().Endpoints(k.ns).Get(context.Background(), name, metav1.GetOptions{})
}

func addressNames(subsets []corev1.EndpointSubset) (ready, notReady []string) {
	for _, s := range subsets {
		for _, a := range s.Addresses {
			ready = append(ready, a.TargetRef.Name)
		}
		for _, a := range s.NotReadyAddresses {
			notReady = append(notReady, a.TargetRef.Name)
		}
	}
	sort.Strings(ready)
	sort.Strings(notReady)
	return ready, notReady
}

// resourceVersions of a Service's slices and Endpoints, to prove a sync wrote nothing.
func (k *cluster) resourceVersions(svc string) string {
	var rvs []string
	for _, es := range k.slices(svc) {
		rvs = append(rvs, es.Name+"@"+es.ResourceVersion)
	}
	sort.Strings(rvs)
	if ep, err := k.endpoints(svc); err == nil {
		rvs = append(rvs, "endpoints@"+ep.ResourceVersion)
	}
	return strings.Join(rvs, " ")
}

func ready(ep discoveryv1.Endpoint) bool { return ep.Conditions.Ready != nil && *ep.Conditions.Ready }

func TestEndpointSliceController(t *testing.T) {
	_, client, c := controllertest.StartController(t, NewController)
	ctx := context.Background()
	k := &cluster{t: t, client: client, c: c, ns: "eps"}
	controllertest.Namespace(t, client, k.ns)

	t.Run("250 ready pods", func(t *testing.T) {
		k.t = t
		sel := map[string]string{"app": "big"}
		svc := k.service("big", sel, nil)
		var pods []*corev1.Pod
		for i := 0; i < 250; i++ {
			pods = append(pods, k.pod(fmt.Sprintf("big-%03d", i), fmt.Sprintf("10.244.%d.%d", 1+i/200, 2+i%200), sel, true, nil))
		}
		controllertest.Eventually(t, 60*time.Second, "3 slices holding 250 ready endpoints", func() (bool, error) {
			slices := k.slices("big")
			eps := byPod(slices)
			if len(slices) != 3 || len(eps) != 250 {
				return false, fmt.Errorf("%d slices, %d endpoints", len(slices), len(eps))
			}
			for name, s := range eps {
				if s.count != 1 || !ready(s.ep) {
					return false, fmt.Errorf("%s: %d times, ready %v", name, s.count, ready(s.ep))
				}
			}
			return true, nil
		})
		for _, es := range k.slices("big") {
			if len(es.Endpoints) > MaxEndpointsPerSlice {
				t.Errorf("slice %s holds %d endpoints", es.Name, len(es.Endpoints))
			}
			if es.Labels[discoveryv1.LabelManagedBy] != ControllerName || !strings.HasPrefix(es.Name, "big-") ||
				es.AddressType != discoveryv1.AddressTypeIPv4 {
				t.Errorf("slice %s: labels %v, addressType %s", es.Name, es.Labels, es.AddressType)
			}
			ref := metav1.GetControllerOf(&es)
			if ref == nil || ref.UID != svc.UID || ref.Kind != "Service" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
				t.Errorf("slice %s owner %+v", es.Name, es.OwnerReferences)
			}
			if len(es.Ports) != 1 || *es.Ports[0].Port != 8080 || *es.Ports[0].Name != "http" {
				t.Errorf("slice %s ports %+v", es.Name, es.Ports)
			}
		}
		controllertest.Eventually(t, 30*time.Second, "Endpoints with 250 addresses", func() (bool, error) {
			ep, err := k.endpoints("big")
			if err != nil {
				return false, err
			}
			r, nr := addressNames(ep.Subsets)
			return len(r) == 250 && len(nr) == 0 && ep.Labels[SkipMirrorLabel] == "true", nil
		})

		// Idempotent: a sync of a converged Service writes nothing.
		before := k.resourceVersions("big")
		if err := c.sync(ctx, k.ns+"/big"); err != nil {
			t.Fatalf("sync: %v", err)
		}
		if after := k.resourceVersions("big"); after != before {
			t.Fatalf("a sync without changes wrote:\n before %s\n after  %s", before, after)
		}

		// Readiness flips move the endpoint between conditions.
		sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
		p0 := k.setStatus(pods[0], pods[0].Status.PodIP, false)
		controllertest.Eventually(t, 30*time.Second, "big-000 not ready", func() (bool, error) {
			s := byPod(k.slices("big"))["big-000"]
			ep, err := k.endpoints("big")
			if err != nil || s == nil {
				return false, err
			}
			_, nr := addressNames(ep.Subsets)
			return !ready(s.ep) && !*s.ep.Conditions.Serving && len(nr) == 1 && nr[0] == "big-000", nil
		})
		k.setStatus(p0, p0.Status.PodIP, true)
		controllertest.Eventually(t, 30*time.Second, "big-000 ready again", func() (bool, error) {
			s := byPod(k.slices("big"))["big-000"]
			ep, err := k.endpoints("big")
			if err != nil || s == nil {
				return false, err
			}
			r, nr := addressNames(ep.Subsets)
			return ready(s.ep) && *s.ep.Conditions.Serving && len(r) == 250 && len(nr) == 0, nil
		})

		// Deleting pods shrinks the slices; deleting all leaves one empty placeholder.
		zero := int64(0)
		for _, p := range pods[:120] {
			if err := client.CoreV1().Pods(k.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatalf("delete %s: %v", p.Name, err)
			}
		}
		controllertest.Eventually(t, 30*time.Second, "130 endpoints left", func() (bool, error) {
			slices := k.slices("big")
			eps := byPod(slices)
			if len(eps) != 130 || len(slices) > 3 {
				return false, fmt.Errorf("%d slices, %d endpoints", len(slices), len(eps))
			}
			for _, es := range slices {
				if len(es.Endpoints) == 0 {
					return false, fmt.Errorf("empty slice %s", es.Name)
				}
			}
			return true, nil
		})
		for _, p := range pods[120:] {
			if err := client.CoreV1().Pods(k.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatalf("delete %s: %v", p.Name, err)
			}
		}
		controllertest.Eventually(t, 30*time.Second, "one empty placeholder slice", func() (bool, error) {
			slices := k.slices("big")
			ep, err := k.endpoints("big")
			if err != nil {
				return false, err
			}
			return len(slices) == 1 && len(slices[0].Endpoints) == 0 && len(ep.Subsets) == 0, nil
		})
	})

	t.Run("named targetPort, hostname, zone and terminating", func(t *testing.T) {
		k.t = t
		if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "eps-node",
			Labels: map[string]string{corev1.LabelTopologyZone: "rack-1"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create node: %v", err)
		}
		sel := map[string]string{"app": "named"}
		k.service("named", sel, func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("http-web") })
		withPort := func(n int32) func(*corev1.Pod) {
			return func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http-web", ContainerPort: n}}
				p.Spec.NodeName = "eps-node"
			}
		}
		k.pod("named-a", "10.244.5.1", sel, true, func(p *corev1.Pod) {
			withPort(8080)(p)
			p.Spec.Hostname, p.Spec.Subdomain = "a", "named"
		})
		k.pod("named-b", "10.244.5.2", sel, true, withPort(8081))
		k.pod("named-c", "10.244.5.3", sel, true, nil) // no port of that name
		controllertest.Eventually(t, 30*time.Second, "endpoints grouped by resolved port", func() (bool, error) {
			eps := byPod(k.slices("named"))
			if len(eps) != 3 {
				return false, fmt.Errorf("%d endpoints", len(eps))
			}
			got := fmt.Sprintf("%s|%s|%s", eps["named-a"].ports, eps["named-b"].ports, eps["named-c"].ports)
			if got != "http:8080|http:8081|" {
				return false, fmt.Errorf("ports %s", got)
			}
			// One slice per port set.
			if n := len(k.slices("named")); n != 3 {
				return false, fmt.Errorf("%d slices", n)
			}
			return true, nil
		})
		eps := byPod(k.slices("named"))
		a, b := eps["named-a"].ep, eps["named-b"].ep
		if a.Hostname == nil || *a.Hostname != "a" || b.Hostname != nil {
			t.Errorf("hostnames: a %v, b %v", a.Hostname, b.Hostname)
		}
		if a.Zone == nil || *a.Zone != "rack-1" || a.NodeName == nil || *a.NodeName != "eps-node" {
			t.Errorf("topology of a: node %v zone %v", a.NodeName, a.Zone)
		}
		if a.Hints != nil {
			t.Errorf("hints without trafficDistribution: %+v", a.Hints)
		}
		// trafficDistribution: PreferSameNode hints each endpoint for its node and zone;
		// PreferSameZone for its zone only; unset, none.
		for _, tc := range []struct{ dist, want string }{
			{corev1.ServiceTrafficDistributionPreferSameNode, "nodes [eps-node] zones [rack-1]"},
			{corev1.ServiceTrafficDistributionPreferSameZone, "nodes [] zones [rack-1]"},
			{"", "no hints"},
		} {
			svc, err := client.CoreV1().Services(k.ns).Get(ctx, "named", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			svc.Spec.TrafficDistribution = nil
			if tc.dist != "" {
				svc.Spec.TrafficDistribution = &tc.dist
			}
			if _, err := client.CoreV1().Services(k.ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			controllertest.Eventually(t, 30*time.Second, "hints for "+tc.want, func() (bool, error) {
				got := "no hints"
				if h := byPod(k.slices("named"))["named-a"].ep.Hints; h != nil {
					var nodes, zones []string
					for _, n := range h.ForNodes {
						nodes = append(nodes, n.Name)
					}
					for _, z := range h.ForZones {
						zones = append(zones, z.Name)
					}
					got = fmt.Sprintf("nodes %v zones %v", nodes, zones)
				}
				if got != tc.want {
					return false, fmt.Errorf("trafficDistribution %q: %s", tc.dist, got)
				}
				return true, nil
			})
		}

		// A bound pod being deleted stays (no node agent) and is terminating: serving, not ready.
		if err := client.CoreV1().Pods(k.ns).Delete(ctx, "named-b", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		controllertest.Eventually(t, 30*time.Second, "named-b terminating", func() (bool, error) {
			s := byPod(k.slices("named"))["named-b"]
			if s == nil {
				return false, fmt.Errorf("named-b gone")
			}
			ep, err := k.endpoints("named")
			if err != nil {
				return false, err
			}
			r, nr := addressNames(ep.Subsets)
			c := s.ep.Conditions
			return *c.Terminating && *c.Serving && !*c.Ready && fmt.Sprint(r) == "[named-a]" && len(nr) == 0, nil
		})
	})

	t.Run("publishNotReadyAddresses", func(t *testing.T) {
		k.t = t
		sel := map[string]string{"app": "pnr"}
		k.service("pnr", sel, func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true })
		k.pod("pnr-a", "10.244.6.1", sel, false, nil)
		controllertest.Eventually(t, 30*time.Second, "not-ready pod published as ready", func() (bool, error) {
			s := byPod(k.slices("pnr"))["pnr-a"]
			ep, err := k.endpoints("pnr")
			if err != nil || s == nil {
				return false, err
			}
			r, _ := addressNames(ep.Subsets)
			return ready(s.ep) && !*s.ep.Conditions.Serving && fmt.Sprint(r) == "[pnr-a]", nil
		})
	})

	t.Run("selectorless service is left alone", func(t *testing.T) {
		k.t = t
		k.service("manual", nil, nil)
		name, port, proto := "http", int32(9376), corev1.ProtocolTCP
		own := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "manual-1", Namespace: k.ns, Labels: map[string]string{
				discoveryv1.LabelServiceName: "manual", discoveryv1.LabelManagedBy: "staff.example.com"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.42"}}},
		}
		own, err := client.DiscoveryV1().EndpointSlices(k.ns).Create(ctx, own, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create own slice: %v", err)
		}
		// Wait until the controller's cache holds the Service, then sync it directly.
		controllertest.Eventually(t, 10*time.Second, "service in cache", func() (bool, error) {
			_, err := c.svcLister.Services(k.ns).Get("manual")
			return err == nil, nil
		})
		if err := c.sync(ctx, k.ns+"/manual"); err != nil {
			t.Fatalf("sync: %v", err)
		}
		slices := k.slices("manual")
		if len(slices) != 1 || slices[0].Name != "manual-1" || slices[0].ResourceVersion != own.ResourceVersion {
			t.Errorf("slices of a selectorless service: %v", names(ptrs(slices)))
		}
		if _, err := k.endpoints("manual"); err == nil {
			t.Errorf("Endpoints created for a selectorless service")
		}
	})
}

func ptrs(s []discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	out := make([]*discoveryv1.EndpointSlice, len(s))
	for i := range s {
		out[i] = &s[i]
	}
	return out
}
