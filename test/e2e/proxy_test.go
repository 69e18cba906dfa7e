package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// get does one HTTP GET from the test (root namespace, through the site's bridge).
func get(url, host string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// runPod runs a toolbox command in a pod on node and returns its output once it finished.
func runPod(t testing.TB, c kubernetes.Interface, h *devsite.Host, ns, name, node string, args ...string) (string, bool) {
	t.Helper()
	p := newPod(name, node, corev1.RestartPolicyNever, tool("run", args...))
	p.Namespace = ns
	if _, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	var phase corev1.PodPhase
	waitFor(t, 60*time.Second, "pod "+name+" finished", func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, describe(p)
	})
	out, _ := h.Kubectl(context.Background(), "", "-n", ns, "logs", name)
	return out, phase == corev1.PodSucceeded
}

func applyExample(t testing.TB, h *devsite.Host, dir string) {
	t.Helper()
	out, err := h.Kubectl(context.Background(), "", "apply", "-k", filepath.Join(framework.RepoRoot(), dir))
	if err != nil {
		t.Fatalf("kubectl apply -k %s: %v\n%s", dir, err, out)
	}
}

func availableReplicas(c kubernetes.Interface, ns, name string) (int32, string) {
	d, err := c.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return -1, err.Error()
	}
	return d.Status.AvailableReplicas, fmt.Sprintf("%d/%d available", d.Status.AvailableReplicas, *d.Spec.Replicas)
}

// TestServicesDNSAndIngress is the proxy's acceptance on 3 hosts: examples/hello behind its
// Service and Ingress, NodePorts, session affinity, readiness, scale to zero, cluster DNS and
// the repair of a deleted nftables table.
func TestServicesDNSAndIngress(t *testing.T) {
	s := newSite(t, 4)
	sideLoad(t, s)
	startHosts(t, s.Hosts[:3])
	// host-4 is a worker (--etcd=false): its Service proxy, cluster DNS, Ingress proxy and
	// NodePorts must answer as the servers' do, with its node identity's narrower reads.
	if err := s.Hosts[3].StartJoining(s.Hosts[:1], "--git-min-interval=1s", "--etcd=false"); err != nil {
		t.Fatal(err)
	}
	c := clientOf(t, s.Hosts[0])
	waitFor(t, 2*time.Minute, "4 Ready nodes with pod CIDRs", func() (bool, string) {
		n, state := readyNodes(s.Hosts[0])
		return n == 4, state
	})
	applyExample(t, s.Hosts[0], "examples/hello")
	waitFor(t, 2*time.Minute, "hello available", func() (bool, string) {
		n, state := availableReplicas(c, "hello", "hello")
		return n == 3, state
	})

	t.Run("ingress of every host answers from pods on different hosts", func(t *testing.T) {
		hosts := map[string]bool{}
		for _, h := range s.Hosts {
			waitFor(t, 30*time.Second, "ingress of "+h.Name, func() (bool, string) {
				code, body, err := get("http://"+h.IP+"/", "")
				return code == 200, fmt.Sprint(code, body, err)
			})
			for i := 0; i < 12; i++ {
				code, body, err := get("http://"+h.IP+"/", "")
				if err != nil || code != 200 {
					t.Fatalf("ingress of %s: %d %q %v", h.Name, code, body, err)
				}
				if f := strings.Fields(body); len(f) >= 5 {
					hosts[f[4]] = true
				}
			}
		}
		if len(hosts) < 2 {
			t.Fatalf("replies came from pods on %v only", hosts)
		}
	})

	t.Run("ClusterIP and DNS from a pod on another host", func(t *testing.T) {
		out, ok := runPod(t, c, s.Hosts[0], "default", "curl-svc", "host-1", "get", "http://hello.hello.svc.cluster.local/")
		if !ok || !strings.Contains(out, "hello from") {
			t.Fatalf("GET through the Service name: ok=%v %q", ok, out)
		}
	})

	t.Run("ClusterIP and DNS from a pod on the worker; the API Service lists the servers only", func(t *testing.T) {
		out, ok := runPod(t, c, s.Hosts[0], "default", "curl-svc-worker", "host-4", "get", "http://hello.hello.svc.cluster.local/")
		if !ok || !strings.Contains(out, "hello from") {
			t.Fatalf("GET through the Service name from the worker: ok=%v %q", ok, out)
		}
		want := []string{s.Hosts[0].IP, s.Hosts[1].IP, s.Hosts[2].IP}
		sort.Strings(want)
		// Each server labels its Node once it exists; the servers resync the slice every 10 s.
		waitFor(t, 30*time.Second, "Service default/kubernetes listing the servers only", func() (bool, string) {
			slice, err := c.DiscoveryV1().EndpointSlices("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, ep := range slice.Endpoints {
				got = append(got, ep.Addresses...)
			}
			sort.Strings(got)
			return strings.Join(got, ",") == strings.Join(want, ","), fmt.Sprintf("endpoints %v, want %v (the worker is %s)", got, want, s.Hosts[3].IP)
		})
	})

	t.Run("NodePort on every host, session affinity", func(t *testing.T) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello-np", Namespace: "hello"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "hello"},
				SessionAffinity: corev1.ServiceAffinityClientIP,
				Ports:           []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		svc, err := c.CoreV1().Services("hello").Create(context.Background(), svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		port := svc.Spec.Ports[0].NodePort
		for _, h := range s.Hosts {
			url := fmt.Sprintf("http://%s:%d/", h.IP, port)
			waitFor(t, 30*time.Second, "NodePort on "+h.Name, func() (bool, string) {
				code, body, err := get(url, "")
				return code == 200, fmt.Sprint(code, body, err)
			})
			seen := map[string]bool{}
			for i := 0; i < 10; i++ {
				_, body, err := get(url, "")
				if err != nil {
					t.Fatal(err)
				}
				seen[body] = true
			}
			if len(seen) != 1 {
				t.Errorf("sessionAffinity ClientIP through %s spread one client over %d pods: %v", h.Name, len(seen), seen)
			}
		}
	})

	t.Run("healthCheckNodePort: every host reports its ready endpoints of a LoadBalancer Service with externalTrafficPolicy Local", func(t *testing.T) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello-local", Namespace: "hello"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "hello"},
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
				Ports:                 []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		svc, err := c.CoreV1().Services("hello").Create(context.Background(), svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = c.CoreV1().Services("hello").Delete(context.Background(), "hello-local", metav1.DeleteOptions{})
		}()
		port := svc.Spec.HealthCheckNodePort
		if port == 0 {
			t.Fatalf("no healthCheckNodePort allocated: %+v", svc.Spec)
		}
		pods, err := c.CoreV1().Pods("hello").List(context.Background(), metav1.ListOptions{LabelSelector: "app=hello"})
		if err != nil {
			t.Fatal(err)
		}
		local := map[string]int{}
		for _, p := range pods.Items {
			if _, ok := readyAt(&p); ok {
				local[p.Spec.NodeName]++
			}
		}
		without := 0
		for _, h := range s.Hosts {
			want, wantCode := local[h.Name], 200
			if want == 0 {
				wantCode, without = 503, without+1
			}
			url := fmt.Sprintf("http://%s:%d/healthz", h.IP, port)
			waitFor(t, 30*time.Second, fmt.Sprintf("health check port of %s: %d, %d local endpoints", h.Name, wantCode, want), func() (bool, string) {
				code, body, err := get(url, "")
				return code == wantCode && strings.Contains(body, fmt.Sprintf(`"localEndpoints": %d,`, want)) &&
					strings.Contains(body, `"name": "hello-local"`), fmt.Sprint(code, body, err)
			})
		}
		if without == 0 {
			t.Errorf("3 pods on %d hosts: no host was checked for 503 (%v)", len(s.Hosts), local)
		}
		t.Logf("health check port %d answered as the ready hello pods per host: %v", port, local)
		// Cluster: the Service no longer has the port, and no host answers on it.
		// (servicelb writes the status meanwhile: read the Service again on a conflict)
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := c.CoreV1().Services("hello").Get(context.Background(), "hello-local", metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
			svc, err = c.CoreV1().Services("hello").Update(context.Background(), cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil || svc.Spec.HealthCheckNodePort != 0 {
			t.Fatalf("externalTrafficPolicy Cluster: %v, healthCheckNodePort %d", err, svc.Spec.HealthCheckNodePort)
		}
		for _, h := range s.Hosts {
			url := fmt.Sprintf("http://%s:%d/healthz", h.IP, port)
			waitFor(t, 30*time.Second, "health check port of "+h.Name+" closed", func() (bool, string) {
				code, body, err := get(url, "")
				return err != nil, fmt.Sprint(code, body, err)
			})
		}
	})

	t.Run("cluster DNS answers as the spec says", func(t *testing.T) {
		web := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: appsv1.StatefulSetSpec{ServiceName: "web", Replicas: ptr.To(int32(2)),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{func() corev1.Container {
						ctr := tool("web", "serve", "8080")
						ctr.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
						return ctr
					}()}}}}}
		if _, err := c.AppsV1().StatefulSets("default").Create(context.Background(), web, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, svc := range []*corev1.Service{
			{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "hello.hello.svc.cluster.local"}},
		} {
			if _, err := c.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 90*time.Second, "web-1 ready", func() (bool, string) {
			p, err := getPod(c, "web-1")
			if err != nil {
				return false, err.Error()
			}
			return podReady(p), describe(p)
		})
		web0, _ := getPod(c, "web-0")
		hello, err := c.CoreV1().Services("hello").Get(context.Background(), "hello", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ name, want string }{
			{"hello.hello", hello.Spec.ClusterIP},                      // Service name with the search path
			{"web-0.web.default.svc.cluster.local", web0.Status.PodIP}, // a StatefulSet pod's stable name
		} {
			out, ok := runPod(t, c, s.Hosts[0], "default", "dns-"+strings.ReplaceAll(strings.Split(tc.name, ".")[0], "_", ""), "host-2", "lookup", tc.name)
			if !ok || strings.TrimSpace(out) != tc.want {
				t.Errorf("lookup %s: %q, want %s", tc.name, out, tc.want)
			}
		}
		out, ok := runPod(t, c, s.Hosts[0], "default", "dns-srv", "host-3", "lookup", "_http._tcp.web.default.svc.cluster.local", "SRV")
		if !ok || !strings.Contains(out, "web-0.web.default.svc.cluster.local. 8080") || !strings.Contains(out, "web-1.web.default.svc.cluster.local. 8080") {
			t.Errorf("SRV of the headless Service: %q", out)
		}
		out, ok = runPod(t, c, s.Hosts[0], "default", "dns-cname", "host-1", "lookup", "ext.default.svc.cluster.local", "CNAME")
		if !ok || strings.TrimSpace(out) != "hello.hello.svc.cluster.local." {
			t.Errorf("ExternalName CNAME: %q", out)
		}
	})

	t.Run("readiness failure leaves rotation", func(t *testing.T) {
		dir := t.TempDir()
		ctr := tool("app", "serve", "8080")
		ctr.Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		ctr.VolumeMounts = []corev1.VolumeMount{{Name: "ready", MountPath: "/ready", SubPathExpr: "$(POD_NAME)"}}
		// An exec round trip can pass the default 1 s timeout on a loaded machine.
		ctr.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/app", "exists", "/ready/ok"}}},
			PeriodSeconds: 1, FailureThreshold: 1, TimeoutSeconds: 5}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "flip", Namespace: "default"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "flip"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "flip"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{ctr},
						Volumes: []corev1.Volume{{Name: "ready", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}}}}}}
		// hostPath volumes need a privileged namespace: the site default (baseline) refuses them.
		kubectlOut(t, s.Hosts[0], "label", "--overwrite", "namespace", "default", "pod-security.kubernetes.io/enforce=privileged", "pod-security.kubernetes.io/warn=privileged")
		if _, err := c.AppsV1().Deployments("default").Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "flip"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "flip"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		if _, err := c.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "flip"}, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: "flip.example", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: ptr.To(networkingv1.PathTypePrefix),
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "flip", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}}
		if _, err := c.NetworkingV1().Ingresses("default").Create(context.Background(), ing, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var names []string
		waitFor(t, 90*time.Second, "2 flip pods", func() (bool, string) {
			pods, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=flip"})
			if err != nil {
				return false, err.Error()
			}
			names = names[:0]
			for _, p := range pods.Items {
				names = append(names, p.Name)
			}
			return len(names) == 2, fmt.Sprint(names)
		})
		url := "http://" + s.Hosts[1].IP + "/"
		// Mark the current pods ready on every round: a pod replaced meanwhile gets its file too.
		waitFor(t, 60*time.Second, "both flip pods answer", func() (bool, string) {
			pods, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=flip"})
			if err != nil {
				return false, err.Error()
			}
			names = names[:0]
			for _, p := range pods.Items {
				if p.DeletionTimestamp != nil {
					continue
				}
				names = append(names, p.Name)
				if err := os.MkdirAll(filepath.Join(dir, p.Name), 0o755); err != nil {
					return false, err.Error()
				}
				if err := os.WriteFile(filepath.Join(dir, p.Name, "ok"), nil, 0o644); err != nil {
					return false, err.Error()
				}
			}
			seen := map[string]bool{}
			for i := 0; i < 10; i++ {
				if code, body, _ := get(url, "flip.example"); code == 200 {
					seen[strings.Fields(body)[0]] = true
				}
			}
			return len(names) == 2 && len(seen) == 2, fmt.Sprint(names, seen)
		})
		if err := os.Remove(filepath.Join(dir, names[0], "ok")); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		waitFor(t, 30*time.Second, names[0]+" out of rotation", func() (bool, string) {
			for i := 0; i < 10; i++ {
				if _, body, _ := get(url, "flip.example"); strings.HasPrefix(body, names[0]) {
					return false, "still answered by " + names[0]
				}
			}
			return true, ""
		})
		took := time.Since(start)
		t.Logf("readiness failure -> out of the Ingress rotation in %s (probe period 1 s)", took.Round(100*time.Millisecond))
		if took > 4*time.Second {
			t.Errorf("an unready pod stayed in rotation for %s", took)
		}
	})

	t.Run("scale to zero: ClusterIP refuses, Ingress answers 503", func(t *testing.T) {
		if _, err := c.AppsV1().Deployments("hello").UpdateScale(context.Background(), "hello", &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "hello"}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "ingress 503", func() (bool, string) {
			code, body, err := get("http://"+s.Hosts[2].IP+"/", "")
			return code == 503, fmt.Sprint(code, body, err)
		})
		out, ok := runPod(t, c, s.Hosts[0], "default", "dial-zero", "host-2", "dial", "hello.hello.svc.cluster.local:80")
		if ok || !strings.Contains(out, "refused") {
			t.Errorf("a Service without endpoints must refuse: ok=%v %q", ok, out)
		}
	})

	t.Run("a deleted nftables table comes back", func(t *testing.T) {
		ns := s.Hosts[1].NetNS
		if out, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "nft", "delete", "table", "ip", "flotilla").CombinedOutput(); err != nil {
			t.Fatalf("nft delete table: %v %s", err, out)
		}
		start := time.Now()
		waitFor(t, 60*time.Second, "table ip flotilla restored", func() (bool, string) {
			out, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "nft", "list", "table", "ip", "flotilla").CombinedOutput()
			return err == nil && strings.Contains(string(out), "service-ips"), string(out)
		})
		t.Logf("nftables table restored after %s", time.Since(start).Round(100*time.Millisecond))
	})
}
