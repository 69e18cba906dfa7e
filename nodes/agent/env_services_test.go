package agent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func serviceLister(t *testing.T, svcs ...*corev1.Service) corelisters.ServiceLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, s := range svcs {
		if err := idx.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewServiceLister(idx)
}

func service(ns, name, ip string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: ports}}
}

// TestServiceEnvironment: every container sees default/kubernetes, with or without
// enableServiceLinks; with it (the default) the Services of its own namespace too, and only
// those; explicit env wins over service variables.
func TestServiceEnvironment(t *testing.T) {
	https := corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}
	lister := serviceLister(t,
		service("default", "kubernetes", "10.96.0.1", https),
		service("default", "web", "10.96.0.20", corev1.ServicePort{Port: 80}),
		service("shop", "cart", "10.96.0.30", corev1.ServicePort{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}),
		service("shop", "cart-headless", corev1.ClusterIPNone, corev1.ServicePort{Port: 8080}),
		service("other", "db", "10.96.0.40", corev1.ServicePort{Port: 5432}),
	)
	master := map[string]string{
		"KUBERNETES_SERVICE_HOST":       "10.96.0.1",
		"KUBERNETES_SERVICE_PORT":       "443",
		"KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT":               "tcp://10.96.0.1:443",
		"KUBERNETES_PORT_443_TCP":       "tcp://10.96.0.1:443",
		"KUBERNETES_PORT_443_TCP_PROTO": "tcp",
		"KUBERNETES_PORT_443_TCP_PORT":  "443",
		"KUBERNETES_PORT_443_TCP_ADDR":  "10.96.0.1",
	}
	env := func(t *testing.T, pod *corev1.Pod) map[string]string {
		t.Helper()
		svcs, err := envServices(pod, lister)
		if err != nil {
			t.Fatal(err)
		}
		list, err := containerEnv(pod, &pod.Spec.Containers[0], envSources{Services: svcs})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range list {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = v
		}
		return out
	}
	prefixes := func(got map[string]string) []string {
		seen := map[string]bool{}
		var out []string
		for k := range got {
			p, _, _ := strings.Cut(k, "_")
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		ns       string
		links    *bool
		services []string // variable prefixes expected besides KUBERNETES
	}{
		{"links off", "shop", ptr.To(false), nil},
		{"links off in default", "default", ptr.To(false), nil},
		{"links unset", "shop", nil, []string{"CART"}},
		{"links on", "shop", ptr.To(true), []string{"CART"}},
		{"links on in default", "default", ptr.To(true), []string{"WEB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod()
			pod.Namespace = tc.ns
			pod.Spec.EnableServiceLinks = tc.links
			got := env(t, pod)
			for k, v := range master {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			want := map[string]bool{"KUBERNETES": true}
			for _, p := range tc.services {
				want[p] = true
			}
			for _, p := range prefixes(got) {
				if !want[p] {
					t.Errorf("unexpected variables %s_* (got %v)", p, prefixes(got))
				}
				delete(want, p)
			}
			for p := range want {
				t.Errorf("no %s_* variables", p)
			}
		})
	}

	t.Run("explicit env wins", func(t *testing.T) {
		pod := testPod()
		pod.Spec.EnableServiceLinks = ptr.To(false)
		pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "api.example"},
			{Name: "API", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}}
		got := env(t, pod)
		if got["KUBERNETES_SERVICE_HOST"] != "api.example" || got["API"] != "https://api.example:443" {
			t.Errorf("KUBERNETES_SERVICE_HOST=%q API=%q", got["KUBERNETES_SERVICE_HOST"], got["API"])
		}
	})

	t.Run("the namespace's own kubernetes Service wins", func(t *testing.T) {
		l := serviceLister(t, service("default", "kubernetes", "10.96.0.1", https), service("shop", "kubernetes", "10.96.0.99", https))
		pod := testPod()
		svcs, err := envServices(pod, l)
		if err != nil || len(svcs) != 1 || svcs[0].Namespace != "shop" {
			t.Fatalf("services %v, %v: want shop/kubernetes alone", svcs, err)
		}
		pod.Spec.EnableServiceLinks = ptr.To(false)
		if svcs, _ := envServices(pod, l); len(svcs) != 1 || svcs[0].Namespace != "default" {
			t.Errorf("without service links: %v, want default/kubernetes", svcs)
		}
	})

	t.Run("no master Service yet", func(t *testing.T) {
		pod := testPod()
		pod.Spec.EnableServiceLinks = ptr.To(false)
		svcs, err := envServices(pod, serviceLister(t))
		if err != nil || len(svcs) != 0 {
			t.Errorf("services %v, %v: want none and no error", svcs, err)
		}
	})

	t.Run("Services not listed yet", func(t *testing.T) {
		m := &PodManager{services: lister, servicesSynced: func() bool { return false }}
		if _, err := m.serviceEnvSources(testPod()); err == nil {
			t.Error("a container must not get an environment before the Services were listed")
		}
		m.servicesSynced = func() bool { return true }
		if svcs, err := m.serviceEnvSources(testPod()); err != nil || len(svcs) != 2 {
			t.Errorf("services %v, %v: want default/kubernetes and shop/cart", svcs, err)
		}
	})

	t.Run("IPv6", func(t *testing.T) {
		got := serviceEnv([]*corev1.Service{service("default", "kubernetes", "fd00:10:96::1", https)})
		want := map[string]string{"KUBERNETES_PORT": "tcp://[fd00:10:96::1]:443", "KUBERNETES_PORT_443_TCP": "tcp://[fd00:10:96::1]:443",
			"KUBERNETES_PORT_443_TCP_ADDR": "fd00:10:96::1", "KUBERNETES_SERVICE_HOST": "fd00:10:96::1"}
		for _, kv := range got {
			if w, ok := want[kv[0]]; ok && kv[1] != w {
				t.Errorf("%s = %q, want %q", kv[0], kv[1], w)
			}
		}
	})
}
