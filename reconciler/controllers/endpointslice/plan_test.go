package endpointslice

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func testService(ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "svc-uid", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: ports, ClusterIP: "10.96.0.20"},
	}
}

func httpPort(target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: target}
}

type podOpt func(*corev1.Pod)

func testPod(i int, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%03d", i), Namespace: "ns", UID: types.UID(fmt.Sprintf("uid-%d", i)),
			Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.244.%d.%d", i/250, i%250+1),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func notReady(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
func terminating(p *corev1.Pod) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
}
func containerPort(name string, n int32, proto corev1.Protocol) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: name, ContainerPort: n, Protocol: proto})
	}
}

func TestFindPort(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	sidecar := func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: &always,
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100}}}}
	}
	plainInit := func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100}}}}
	}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		port   corev1.ServicePort
		want   int32
		wantOK bool
	}{
		{"number", testPod(1), httpPort(intstr.FromInt32(9376)), 9376, true},
		{"zero means the service port", testPod(1), httpPort(intstr.IntOrString{}), 80, true},
		{"name found", testPod(1, containerPort("http-web", 8080, "")), httpPort(intstr.FromString("http-web")), 8080, true},
		{"name with another protocol", testPod(1, containerPort("dns", 53, corev1.ProtocolUDP)), httpPort(intstr.FromString("dns")), 0, false},
		{"name missing", testPod(1, containerPort("other", 8080, "")), httpPort(intstr.FromString("http-web")), 0, false},
		{"sidecar init container", testPod(1, sidecar), httpPort(intstr.FromString("metrics")), 9100, true},
		{"plain init container ignored", testPod(1, plainInit), httpPort(intstr.FromString("metrics")), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := findPort(tt.pod, &tt.port)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("findPort = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestDesiredGroups(t *testing.T) {
	zone := func(n string) string { return map[string]string{"n1": "zone-a"}[n] }
	svc := testService(httpPort(intstr.FromString("http-web")), corev1.ServicePort{Name: "admin", Port: 9000, TargetPort: intstr.FromInt32(9000), Protocol: corev1.ProtocolTCP})
	pods := []*corev1.Pod{
		testPod(1, containerPort("http-web", 8080, "")),
		testPod(2, containerPort("http-web", 8080, ""), notReady),
		testPod(3, containerPort("http-web", 8081, ""), terminating),
		testPod(4), // name unresolved: only the admin port
		testPod(5, func(p *corev1.Pod) { p.Status.PodIP = "" }),
		testPod(6, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		testPod(7, containerPort("http-web", 8080, ""), func(p *corev1.Pod) {
			p.Spec.Hostname, p.Spec.Subdomain = "h7", "web"
			p.Status.PodIP, p.Status.PodIPs = "fd00::7", []corev1.PodIP{{IP: "fd00::7"}, {IP: "10.244.9.7"}}
		}),
	}
	groups := desiredGroups(svc, pods, zone)

	type epView struct {
		pod                         string
		ip                          string
		ready, serving, terminating bool
		hostname, zone              string
	}
	view := func(g *group) (ports []string, eps []epView) {
		for _, p := range g.ports {
			ports = append(ports, fmt.Sprintf("%s:%d", *p.Name, *p.Port))
		}
		sort.Strings(ports)
		for _, e := range g.endpoints {
			v := epView{pod: e.TargetRef.Name, ip: e.Addresses[0], ready: *e.Conditions.Ready, serving: *e.Conditions.Serving,
				terminating: *e.Conditions.Terminating}
			if e.Hostname != nil {
				v.hostname = *e.Hostname
			}
			if e.Zone != nil {
				v.zone = *e.Zone
			}
			eps = append(eps, v)
		}
		return ports, eps
	}
	got := map[string][]epView{}
	for _, g := range groups {
		ports, eps := view(g)
		got[fmt.Sprint(ports)] = eps
	}
	want := map[string][]epView{
		"[admin:9000 http:8080]": {
			{"p001", "10.244.0.2", true, true, false, "", "zone-a"},
			{"p002", "10.244.0.3", false, false, false, "", "zone-a"},
			{"p007", "10.244.9.7", true, true, false, "h7", "zone-a"},
		},
		"[admin:9000 http:8081]": {{"p003", "10.244.0.4", false, true, true, "", "zone-a"}},
		"[admin:9000]":           {{"p004", "10.244.0.5", true, true, false, "", "zone-a"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("groups:\n got %+v\nwant %+v", got, want)
	}

	svc.Spec.PublishNotReadyAddresses = true
	for _, g := range desiredGroups(svc, pods, zone) {
		for _, e := range g.endpoints {
			if !*e.Conditions.Ready {
				t.Errorf("publishNotReadyAddresses: %s not ready", e.TargetRef.Name)
			}
		}
	}
}

// slicesOf builds existing slices of svc holding the endpoints of pods [from, to) per entry.
func existingSlices(svc *corev1.Service, ranges ...[2]int) ([]*discoveryv1.EndpointSlice, []*corev1.Pod) {
	var slices []*discoveryv1.EndpointSlice
	var pods []*corev1.Pod
	for i, r := range ranges {
		es := newSlice(svc, slicePorts(svc, testPod(0)))
		es.Name, es.UID = fmt.Sprintf("web-%d", i), types.UID(fmt.Sprintf("es-%d", i))
		for j := r[0]; j < r[1]; j++ {
			p := testPod(j)
			pods = append(pods, p)
			es.Endpoints = append(es.Endpoints, podEndpoint(svc, p, func(string) string { return "" }))
		}
		slices = append(slices, es)
	}
	return slices, pods
}

func podRange(from, to int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := from; i < to; i++ {
		out = append(out, testPod(i))
	}
	return out
}

func sizes(slices []*discoveryv1.EndpointSlice) []int {
	out := []int{}
	for _, es := range slices {
		out = append(out, len(es.Endpoints))
	}
	return out
}

func names(slices []*discoveryv1.EndpointSlice) []string {
	out := []string{}
	for _, es := range slices {
		out = append(out, es.Name)
	}
	return out
}

func TestPlanSlices(t *testing.T) {
	svc := testService(httpPort(intstr.FromInt32(8080)))
	noZone := func(string) string { return "" }
	tests := []struct {
		name     string
		existing func() []*discoveryv1.EndpointSlice
		pods     func() []*corev1.Pod
		create   []int    // sizes of new slices
		update   []string // names of updated slices
		upSizes  []int
		delete   []string
	}{
		{
			name:     "250 endpoints make 3 slices",
			existing: func() []*discoveryv1.EndpointSlice { return nil },
			pods:     func() []*corev1.Pod { return podRange(0, 250) },
			create:   []int{100, 100, 50}, update: []string{}, upSizes: []int{}, delete: []string{},
		},
		{
			name: "nothing changed writes nothing",
			existing: func() []*discoveryv1.EndpointSlice {
				s, _ := existingSlices(svc, [2]int{0, 100}, [2]int{100, 130})
				return s
			},
			pods:   func() []*corev1.Pod { return podRange(0, 130) },
			create: []int{}, update: []string{}, upSizes: []int{}, delete: []string{},
		},
		{
			// 10 new endpoints, 2 slices with 5 free places each: one new slice.
			name: "prefer a new slice over touching two",
			existing: func() []*discoveryv1.EndpointSlice {
				s, _ := existingSlices(svc, [2]int{0, 95}, [2]int{95, 190})
				return s
			},
			pods:   func() []*corev1.Pod { return podRange(0, 200) },
			create: []int{10}, update: []string{}, upSizes: []int{}, delete: []string{},
		},
		{
			name: "new endpoints go to the unchanged slice they fit best",
			existing: func() []*discoveryv1.EndpointSlice {
				s, _ := existingSlices(svc, [2]int{0, 95}, [2]int{95, 145}, [2]int{145, 230})
				return s
			},
			pods:   func() []*corev1.Pod { return podRange(0, 240) },
			create: []int{}, update: []string{"web-2"}, upSizes: []int{95}, delete: []string{},
		},
		{
			name: "a changed slice is filled first",
			existing: func() []*discoveryv1.EndpointSlice {
				s, _ := existingSlices(svc, [2]int{0, 100}, [2]int{100, 150})
				return s
			},
			// p010 is gone, p020 turned not ready, five new pods.
			pods: func() []*corev1.Pod {
				ps := append(podRange(0, 10), podRange(11, 155)...)
				notReady(ps[19])
				return ps
			},
			create: []int{}, update: []string{"web-0", "web-1"}, upSizes: []int{100, 54}, delete: []string{},
		},
		{
			name: "emptied slices are deleted",
			existing: func() []*discoveryv1.EndpointSlice {
				s, _ := existingSlices(svc, [2]int{0, 100}, [2]int{100, 200}, [2]int{200, 250})
				return s
			},
			pods:   func() []*corev1.Pod { return podRange(0, 100) },
			create: []int{}, update: []string{}, upSizes: []int{}, delete: []string{"web-1", "web-2"},
		},
		{
			name: "no endpoints left: one placeholder",
			existing: func() []*discoveryv1.EndpointSlice {
				s, _ := existingSlices(svc, [2]int{0, 3})
				return s
			},
			pods:   func() []*corev1.Pod { return nil },
			create: []int{0}, update: []string{}, upSizes: []int{}, delete: []string{"web-0"},
		},
		{
			name: "placeholder is kept",
			existing: func() []*discoveryv1.EndpointSlice {
				es := newSlice(svc, nil)
				es.Name, es.UID = "web-p", "es-p"
				return []*discoveryv1.EndpointSlice{es}
			},
			pods:   func() []*corev1.Pod { return nil },
			create: []int{}, update: []string{}, upSizes: []int{}, delete: []string{},
		},
		{
			name: "placeholder goes once there are endpoints",
			existing: func() []*discoveryv1.EndpointSlice {
				es := newSlice(svc, nil)
				es.Name, es.UID = "web-p", "es-p"
				return []*discoveryv1.EndpointSlice{es}
			},
			pods:   func() []*corev1.Pod { return podRange(0, 2) },
			create: []int{2}, update: []string{}, upSizes: []int{}, delete: []string{"web-p"},
		},
		{
			name: "slices of an older service of that name are deleted",
			existing: func() []*discoveryv1.EndpointSlice {
				s, _ := existingSlices(svc, [2]int{0, 2})
				s[0].OwnerReferences[0].UID = "old-uid"
				return s
			},
			pods:   func() []*corev1.Pod { return podRange(0, 2) },
			create: []int{2}, update: []string{}, upSizes: []int{}, delete: []string{"web-0"},
		},
		{
			name: "a duplicate endpoint is dropped from the second slice",
			existing: func() []*discoveryv1.EndpointSlice {
				s, _ := existingSlices(svc, [2]int{0, 3}, [2]int{2, 5})
				return s
			},
			pods:   func() []*corev1.Pod { return podRange(0, 5) },
			create: []int{}, update: []string{"web-1"}, upSizes: []int{2}, delete: []string{},
		},
		{
			name: "label drift is repaired",
			existing: func() []*discoveryv1.EndpointSlice {
				s, _ := existingSlices(svc, [2]int{0, 3})
				s[0].Labels["extra"] = "x"
				return s
			},
			pods:   func() []*corev1.Pod { return podRange(0, 3) },
			create: []int{}, update: []string{"web-0"}, upSizes: []int{3}, delete: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := planSlices(svc, tt.existing(), desiredGroups(svc, tt.pods(), noZone), MaxEndpointsPerSlice)
			if got := sizes(p.create); !reflect.DeepEqual(got, tt.create) {
				t.Errorf("create sizes = %v, want %v", got, tt.create)
			}
			if got := names(p.update); !reflect.DeepEqual(got, tt.update) {
				t.Errorf("updated = %v, want %v", got, tt.update)
			}
			if got := sizes(p.update); !reflect.DeepEqual(got, tt.upSizes) {
				t.Errorf("update sizes = %v, want %v", got, tt.upSizes)
			}
			if got := names(p.delete); !reflect.DeepEqual(got, tt.delete) {
				t.Errorf("deleted = %v, want %v", got, tt.delete)
			}
			for _, es := range append(p.create, p.update...) {
				if es.Labels[discoveryv1.LabelServiceName] != "web" || es.Labels[discoveryv1.LabelManagedBy] != ControllerName {
					t.Errorf("slice %q labels %v", es.Name, es.Labels)
				}
				if len(es.Endpoints) > MaxEndpointsPerSlice {
					t.Errorf("slice %q holds %d endpoints", es.Name, len(es.Endpoints))
				}
			}
		})
	}
}

func TestDesiredSubsets(t *testing.T) {
	svc := testService(httpPort(intstr.FromString("http-web")))
	pods := []*corev1.Pod{
		testPod(2, containerPort("http-web", 8080, "")),
		testPod(1, containerPort("http-web", 8080, ""), notReady),
		testPod(3, containerPort("http-web", 8081, "")),
		testPod(4, containerPort("http-web", 8080, ""), terminating),
		testPod(5), // no port resolves: no address
	}
	type sub struct {
		ports           string
		ready, notReady []string
	}
	view := func(subsets []corev1.EndpointSubset) []sub {
		var out []sub
		for _, s := range subsets {
			v := sub{ports: endpointPortsKey(s.Ports)}
			for _, a := range s.Addresses {
				v.ready = append(v.ready, a.TargetRef.Name)
			}
			for _, a := range s.NotReadyAddresses {
				v.notReady = append(v.notReady, a.TargetRef.Name)
			}
			out = append(out, v)
		}
		return out
	}
	got, truncated := desiredSubsets(svc, pods, MaxEndpointsAddresses)
	want := []sub{
		{ports: "http/TCP/8080/", ready: []string{"p002"}, notReady: []string{"p001"}},
		{ports: "http/TCP/8081/", ready: []string{"p003"}},
	}
	if !reflect.DeepEqual(view(got), want) || truncated {
		t.Fatalf("subsets = %+v (truncated %v), want %+v", view(got), truncated, want)
	}

	svc.Spec.PublishNotReadyAddresses = true
	got, _ = desiredSubsets(svc, pods, MaxEndpointsAddresses)
	want = []sub{
		{ports: "http/TCP/8080/", ready: []string{"p001", "p002", "p004"}},
		{ports: "http/TCP/8081/", ready: []string{"p003"}},
	}
	if !reflect.DeepEqual(view(got), want) {
		t.Fatalf("publishNotReadyAddresses: subsets = %+v, want %+v", view(got), want)
	}

	svc.Spec.PublishNotReadyAddresses = false
	got, truncated = desiredSubsets(svc, pods[:3], 2)
	if n := len(got[0].Addresses) + len(got[0].NotReadyAddresses) + len(got[1].Addresses); !truncated || n != 2 || len(got[0].NotReadyAddresses) != 0 {
		t.Fatalf("truncated to 2: %+v (truncated %v)", view(got), truncated)
	}
}
