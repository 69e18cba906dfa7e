package api

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/test/framework"
)

func TestServiceIPAllocation(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	c := a.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	svc := func(name, ip string, typ corev1.ServiceType, nodePort int32) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: typ, ClusterIP: ip, Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Port: 80, NodePort: nodePort}}}}
	}

	t.Run("1000 concurrent creates get 1000 distinct IPs in the range", func(t *testing.T) {
		const n, workers = 1000, 16
		cidr := netip.MustParsePrefix("10.96.0.0/12")
		var mu sync.Mutex
		seen := map[string]string{}
		var wg sync.WaitGroup
		next := make(chan int)
		errs := make(chan error, n)
		start := time.Now()
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					s, err := c.CoreV1().Services("default").Create(ctx, svc(fmt.Sprintf("many-%d", i), "", "", 0), metav1.CreateOptions{})
					if err != nil {
						errs <- err
						continue
					}
					mu.Lock()
					if other, dup := seen[s.Spec.ClusterIP]; dup {
						errs <- fmt.Errorf("%s and %s share %s", other, s.Name, s.Spec.ClusterIP)
					}
					seen[s.Spec.ClusterIP] = s.Name
					mu.Unlock()
					if ip, err := netip.ParseAddr(s.Spec.ClusterIP); err != nil || !cidr.Contains(ip) {
						errs <- fmt.Errorf("%s got %q outside %s", s.Name, s.Spec.ClusterIP, cidr)
					}
				}
			}()
		}
		for i := 0; i < n; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if len(seen) != n {
			t.Errorf("%d distinct IPs for %d services", len(seen), n)
		}
		framework.Figure(t, "%d services created by %d clients in %s", n, workers, time.Since(start).Round(time.Millisecond))
	})

	t.Run("requested IPs: honoured, 422 when taken or outside, reusable after delete", func(t *testing.T) {
		if _, err := c.CoreV1().Services("default").Create(ctx, svc("dns", "10.96.0.10", "", 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := c.CoreV1().Services("default").Create(ctx, svc("dns2", "10.96.0.10", "", 0), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.clusterIPs[0]") || !strings.Contains(err.Error(), "already allocated") {
			t.Errorf("taken IP: %v, want 422 naming spec.clusterIPs[0]", err)
		}
		_, err = c.CoreV1().Services("default").Create(ctx, svc("far", "192.168.0.10", "", 0), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.clusterIP") {
			t.Errorf("IP outside the range: %v, want 422", err)
		}
		if err := c.CoreV1().Services("default").Delete(ctx, "dns", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		s, err := c.CoreV1().Services("default").Create(ctx, svc("dns2", "10.96.0.10", "", 0), metav1.CreateOptions{})
		if err != nil || s.Spec.ClusterIP != "10.96.0.10" {
			t.Errorf("IP of a deleted Service not reusable: %v", err)
		}
		h, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "headless"},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
		if err != nil || h.Spec.ClusterIP != "None" {
			t.Errorf("headless: %v %q", err, h.Spec.ClusterIP)
		}
	})

	t.Run("node ports: allocated, honoured, 422 when taken, released", func(t *testing.T) {
		a1, err := c.CoreV1().Services("default").Create(ctx, svc("np1", "", corev1.ServiceTypeNodePort, 0), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := a1.Spec.Ports[0].NodePort
		if p < 30000 || p > 32767 {
			t.Errorf("nodePort %d outside 30000-32767", p)
		}
		_, err = c.CoreV1().Services("default").Create(ctx, svc("np2", "", corev1.ServiceTypeNodePort, p), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.ports[0].nodePort") {
			t.Errorf("taken node port: %v, want 422 naming spec.ports[0].nodePort", err)
		}
		// Updating the Service without naming its port keeps the allocation.
		a1.Spec.Ports[0].NodePort = 0
		a1.Labels = map[string]string{"touched": "yes"}
		u, err := c.CoreV1().Services("default").Update(ctx, a1, metav1.UpdateOptions{})
		if err != nil || u.Spec.Ports[0].NodePort != p {
			t.Errorf("update without nodePort: %v, port %d want %d", err, u.Spec.Ports[0].NodePort, p)
		}
		if err := c.CoreV1().Services("default").Delete(ctx, "np1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		b, err := c.CoreV1().Services("default").Create(ctx, svc("np2", "", corev1.ServiceTypeNodePort, p), metav1.CreateOptions{})
		if err != nil || b.Spec.Ports[0].NodePort != p {
			t.Errorf("released node port not reusable: %v", err)
		}
	})

	t.Run("health check node port: allocated for LoadBalancer with Local, 422 when taken, kept, wiped and released", func(t *testing.T) {
		lb := svc("hc1", "", corev1.ServiceTypeLoadBalancer, 0)
		lb.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		a1, err := c.CoreV1().Services("default").Create(ctx, lb, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hp := a1.Spec.HealthCheckNodePort
		if hp < 30000 || hp > 32767 || hp == a1.Spec.Ports[0].NodePort {
			t.Fatalf("healthCheckNodePort %d: want a port of 30000-32767 of its own (nodePort %d)", hp, a1.Spec.Ports[0].NodePort)
		}
		// Taken: as a node port and as another Service's health check port.
		if _, err := c.CoreV1().Services("default").Create(ctx, svc("hc-np", "", corev1.ServiceTypeNodePort, hp), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("node port taken by a health check port: %v, want 422", err)
		}
		lb2 := svc("hc2", "", corev1.ServiceTypeLoadBalancer, 0)
		lb2.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		lb2.Spec.HealthCheckNodePort = hp
		if _, err := c.CoreV1().Services("default").Create(ctx, lb2, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.healthCheckNodePort") {
			t.Errorf("taken health check port: %v, want 422 naming spec.healthCheckNodePort", err)
		}
		// Set where none is needed: refused.
		np := svc("hc-cluster", "", corev1.ServiceTypeNodePort, 0)
		np.Spec.HealthCheckNodePort = 31999
		if _, err := c.CoreV1().Services("default").Create(ctx, np, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.healthCheckNodePort") {
			t.Errorf("healthCheckNodePort on a NodePort Service: %v, want 422 naming spec.healthCheckNodePort", err)
		}
		// An update that does not name it keeps it.
		a1.Spec.HealthCheckNodePort = 0
		a1.Labels = map[string]string{"touched": "yes"}
		u, err := c.CoreV1().Services("default").Update(ctx, a1, metav1.UpdateOptions{})
		if err != nil || u.Spec.HealthCheckNodePort != hp {
			t.Fatalf("update without healthCheckNodePort: %v, port %d want %d", err, u.Spec.HealthCheckNodePort, hp)
		}
		// externalTrafficPolicy Cluster: wiped, and the port is free again.
		u.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		u, err = c.CoreV1().Services("default").Update(ctx, u, metav1.UpdateOptions{})
		if err != nil || u.Spec.HealthCheckNodePort != 0 {
			t.Fatalf("update to externalTrafficPolicy Cluster: %v, healthCheckNodePort %d want 0", err, u.Spec.HealthCheckNodePort)
		}
		b, err := c.CoreV1().Services("default").Create(ctx, lb2, metav1.CreateOptions{})
		if err != nil || b.Spec.HealthCheckNodePort != hp {
			t.Fatalf("released health check port not reusable: %v", err)
		}
		if err := c.CoreV1().Services("default").Delete(ctx, "hc2", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Services("default").Create(ctx, svc("hc-np", "", corev1.ServiceTypeNodePort, hp), metav1.CreateOptions{}); err != nil {
			t.Errorf("health check port of a deleted Service not reusable as a node port: %v", err)
		}
	})
}

// TestRequestedNodePortsComeFirst: a Service's own random picks never take a node port it
// asks for. The range 30000-30017 keeps 30016 and 30017 for random picks, which try them
// first; with 30016 taken, a pick made before the requested 30017 was taken would take it.
func TestRequestedNodePortsComeFirst(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers=", "--node-port-range=30000-30017"}})
	c := a.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	create := func(s *corev1.Service) *corev1.Service {
		t.Helper()
		got, err := c.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s: %v", s.Name, err)
		}
		return got
	}
	create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "filler"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, NodePort: 30016}}}})
	inStaticBand := func(p int32) bool { return p >= 30000 && p <= 30015 }

	t.Run("health check port asked for, node port picked", func(t *testing.T) {
		lb := create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, HealthCheckNodePort: 30017,
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, Ports: []corev1.ServicePort{{Port: 80}}}})
		if lb.Spec.HealthCheckNodePort != 30017 || !inStaticBand(lb.Spec.Ports[0].NodePort) {
			t.Errorf("healthCheckNodePort %d, nodePort %d: want 30017 and a port of 30000-30015", lb.Spec.HealthCheckNodePort, lb.Spec.Ports[0].NodePort)
		}
		if err := c.CoreV1().Services("default").Delete(ctx, "lb", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("second port asked for, first picked", func(t *testing.T) {
		np := create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "two"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{
				{Name: "a", Port: 80}, {Name: "b", Port: 81, NodePort: 30017}}}})
		if np.Spec.Ports[1].NodePort != 30017 || !inStaticBand(np.Spec.Ports[0].NodePort) {
			t.Errorf("nodePorts %d and %d: want a port of 30000-30015 and 30017", np.Spec.Ports[0].NodePort, np.Spec.Ports[1].NodePort)
		}
	})
}
