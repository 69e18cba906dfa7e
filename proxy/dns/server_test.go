package dns

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/test/framework"
	mdns "github.com/miekg/dns"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ask sends one query to addr and returns the reply (nil on a transport error).
func ask(addr, network, name string, qtype uint16) *mdns.Msg {
	cl := &mdns.Client{Net: network, Timeout: time.Second}
	r, _, err := cl.Exchange(query(name, qtype), addr)
	if err != nil {
		return nil
	}
	return r
}

// firstA returns the first A record of r as text, or "".
func firstA(r *mdns.Msg) string {
	if r == nil {
		return ""
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*mdns.A); ok {
			return a.A.String()
		}
	}
	return ""
}

func createReadyPod(ctx context.Context, t *testing.T, c kubernetes.Interface, name, ip, hostname, subdomain string, labels map[string]string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{NodeName: "host-1", Hostname: hostname, Subdomain: subdomain,
			Containers: []corev1.Container{{Name: "c", Image: "example/app:1"}}}}
	p, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := c.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s status: %v", name, err)
	}
}

// TestRunAgainstAPIServer runs the server on loopback against a real API server (with its
// EndpointSlice controller) and a fake upstream, and measures how fast new objects resolve.
func TestRunAgainstAPIServer(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{})
	c := a.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	web, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "nginx"},
			Ports: []corev1.ServicePort{{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createReadyPod(ctx, t, c, "web-0", "10.244.0.5", "web-0", "nginx", map[string]string{"app": "nginx"})
	for range 2 { // idempotent
		if err := EnsureService(ctx, c, DefaultListenIP); err != nil {
			t.Fatalf("EnsureService: %v", err)
		}
	}
	kd, err := c.CoreV1().Services(ServiceNamespace).Get(ctx, ServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if kd.Spec.ClusterIP != "10.96.0.10" || kd.Spec.Selector != nil || len(kd.Spec.Ports) != 2 ||
		kd.Labels["k8s-app"] != "kube-dns" || kd.Annotations[AnnotationServedByHost] != "true" {
		t.Errorf("kube-dns Service: %+v", kd)
	}
	if err := EnsureService(ctx, c, net.ParseIP("10.96.0.11")); err == nil {
		t.Error("EnsureService with another IP than the existing Service's: no error")
	}

	up := fakeUpstream(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(framework.FreePort(t)))
	host, portStr, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(portStr)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, c, Config{ListenIP: net.ParseIP(host), Port: p, Upstreams: []string{up},
			Log: logrus.NewEntry(logrus.StandardLogger())})
	}()
	defer stop()
	if !waitFor(30*time.Second, func() bool { return firstA(ask(addr, "udp", "web.default.svc.cluster.local.", mdns.TypeA)) != "" }) {
		t.Fatal("the server did not answer within 30s")
	}

	if got := firstA(ask(addr, "udp", "web.default.svc.cluster.local.", mdns.TypeA)); got != web.Spec.ClusterIP {
		t.Errorf("web A %s, want ClusterIP %s", got, web.Spec.ClusterIP)
	}
	if got := firstA(ask(addr, "tcp", "kube-dns.kube-system.svc.cluster.local.", mdns.TypeA)); got != "10.96.0.10" {
		t.Errorf("kube-dns over TCP: %q, want 10.96.0.10", got)
	}
	// Headless + StatefulSet-style name through the real EndpointSlice controller.
	if !waitFor(10*time.Second, func() bool {
		return firstA(ask(addr, "udp", "web-0.nginx.default.svc.cluster.local.", mdns.TypeA)) == "10.244.0.5"
	}) {
		t.Error("web-0.nginx.default.svc.cluster.local did not resolve to 10.244.0.5")
	}
	// The pod's own name (hostname.subdomain) can resolve before the EndpointSlice exists.
	if !waitFor(10*time.Second, func() bool {
		return firstA(ask(addr, "udp", "nginx.default.svc.cluster.local.", mdns.TypeA)) == "10.244.0.5"
	}) {
		t.Errorf("headless nginx: %q, want 10.244.0.5", firstA(ask(addr, "udp", "nginx.default.svc.cluster.local.", mdns.TypeA)))
	}
	if r := ask(addr, "udp", "_web._tcp.nginx.default.svc.cluster.local.", mdns.TypeSRV); r == nil || len(r.Answer) != 1 ||
		r.Answer[0].(*mdns.SRV).Target != "web-0.nginx.default.svc.cluster.local." || r.Answer[0].(*mdns.SRV).Port != 80 {
		t.Errorf("SRV _web._tcp.nginx: %v", r)
	}
	if got := firstA(ask(addr, "udp", "10-244-0-5.default.pod.cluster.local.", mdns.TypeA)); got != "10.244.0.5" {
		t.Errorf("pod A: %q", got)
	}
	arpa, _ := mdns.ReverseAddr(web.Spec.ClusterIP)
	if r := ask(addr, "udp", arpa, mdns.TypePTR); r == nil || len(r.Answer) != 1 || r.Answer[0].(*mdns.PTR).Ptr != "web.default.svc.cluster.local." {
		t.Errorf("PTR %s: %v", arpa, r)
	}
	if r := ask(addr, "udp", "missing.default.svc.cluster.local.", mdns.TypeA); r == nil || r.Rcode != mdns.RcodeNameError {
		t.Errorf("unknown Service: %v, want NXDOMAIN", r)
	}
	if got := firstA(ask(addr, "udp", "example.org.", mdns.TypeA)); got != "192.0.2.1" {
		t.Errorf("forwarded example.org: %q, want the fake upstream's 192.0.2.1", got)
	}

	// Informer-driven: new objects resolve within a second.
	start := time.Now()
	late, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "late"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(time.Second-time.Since(start), func() bool {
		return firstA(ask(addr, "udp", "late.default.svc.cluster.local.", mdns.TypeA)) == late.Spec.ClusterIP
	}) {
		t.Fatal("a new Service did not resolve within 1s of its creation")
	}
	framework.Figure(t, "new Service resolvable %s after Create was called", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	createReadyPod(ctx, t, c, "web-1", "10.244.0.6", "web-1", "nginx", map[string]string{"app": "nginx"})
	if !waitFor(time.Second-time.Since(start), func() bool {
		return firstA(ask(addr, "udp", "web-1.nginx.default.svc.cluster.local.", mdns.TypeA)) == "10.244.0.6"
	}) {
		t.Fatal("a new ready pod's hostname.subdomain name did not resolve within 1s")
	}
	framework.Figure(t, "new pod hostname.subdomain resolvable %s after Create was called", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	if err := c.CoreV1().Services("default").Delete(ctx, "late", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(time.Second, func() bool {
		r := ask(addr, "udp", "late.default.svc.cluster.local.", mdns.TypeA)
		return r != nil && r.Rcode == mdns.RcodeNameError
	}) {
		t.Error("a deleted Service still resolved 1s later")
	}
	framework.Figure(t, "deleted Service NXDOMAIN %s after Delete was called", time.Since(start).Round(time.Millisecond))

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v after ctx ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of ctx ending")
	}
	if r := ask(addr, "udp", "web.default.svc.cluster.local.", mdns.TypeA); r != nil {
		t.Error("still answering after Run returned")
	}
}
