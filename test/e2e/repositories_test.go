package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// fixtureRepo makes a git repository of testdata/<name>, with ${VAR} replaced from vars.
func fixtureRepo(t testing.TB, name string, vars map[string]string) *devsite.GitRepo {
	t.Helper()
	src := filepath.Join(framework.RepoRoot(), "test", "e2e", "testdata", name)
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		text := os.Expand(string(b), func(v string) string { return vars[v] })
		if err := os.WriteFile(filepath.Join(dir, e.Name()), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	repo, err := devsite.NewGitRepo(t.TempDir(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// sourceState is a GitSource's Ready condition and last applied revision.
func sourceState(dyn dynamic.Interface, name string) (ready bool, state string) {
	u, err := dyn.Resource(gitsync.GitSourceResource).Namespace("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	applied, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m := c.(map[string]any)
		if m["type"] == "Ready" {
			return m["status"] == "True" && applied != "", fmt.Sprintf("%v %v: %v (applied %q)", m["status"], m["reason"], m["message"], applied)
		}
	}
	return false, "no Ready condition"
}

// TestRealRepositories applies repositories shaped like real ones through gitsync, each in one
// commit: an operator (CRDs with versions, CEL rules and subresources, RBAC, a controller
// Deployment and a validating webhook served by it), a web application (PriorityClass, PDB,
// HPA, NetworkPolicy) and a monitoring stack with kube-prometheus's NetworkPolicies. Then
// `kubectl top`, the HPA scaling the application under load, and the policies isolating the
// monitoring pods as written.
func TestRealRepositories(t *testing.T) {
	s := newSite(t, 2)
	sideLoad(t, s)
	startSite(t, s)
	h := s.Hosts[0]
	c := clientOf(t, h)
	cfg, err := clientcmd.BuildConfigFromFlags("", h.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	waitFor(t, 2*time.Minute, "2 Ready nodes", func() (bool, string) {
		n, out := readyNodes(h)
		return n == 2, out
	})

	cert, key, err := certutil.GenerateSelfSignedCertKey("shop-webhook.shop-system.svc", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	operator := fixtureRepo(t, "operator", map[string]string{"CA_BUNDLE": b64(cert), "TLS_CRT": b64(cert), "TLS_KEY": b64(key)})
	webapp := fixtureRepo(t, "webapp", nil)
	monitoring := fixtureRepo(t, "monitoring", nil)
	for name, repo := range map[string]*devsite.GitRepo{"operator": operator, "webapp": webapp, "monitoring": monitoring} {
		apply(t, h, siteDeployer+fmt.Sprintf(`apiVersion: flotilla.dev/v1alpha1
kind: GitSource
metadata: {name: %s, namespace: kube-system}
spec: {url: %q, ref: {branch: main}, interval: 3s, serviceAccountName: site-deployer}
`, name, repo.URL()))
	}

	t.Run("the operator applies whole from one commit", func(t *testing.T) {
		waitFor(t, 3*time.Minute, "operator GitSource Ready", func() (bool, string) { return sourceState(dyn, "operator") })
		out := kubectlOut(t, h, "get", "stores,products,orders", "-n", "shop-system")
		for _, want := range []string{"store.shop.example.dev/main-street", "product.shop.example.dev/teapot", "order.shop.example.dev/first"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s missing from:\n%s", want, out)
			}
		}
		if got := kubectlOut(t, h, "get", "store", "main-street", "-n", "shop-system", "-o", "jsonpath={.spec.opens}-{.spec.closes}"); got != "9-18" {
			t.Errorf("store defaults = %q, want 9-18", got)
		}
		if out := kubectlOut(t, h, "get", "stores", "-n", "shop-system"); !regexp.MustCompile(`(?m)^NAME\s+CITY\s+OPEN\s*\nmain-street\s+Lyon\b`).MatchString(out) {
			t.Errorf("printer columns of stores:\n%s", out)
		}
		waitFor(t, time.Minute, "operator available", func() (bool, string) {
			n, msg := availableReplicas(c, "shop-system", "shop-operator")
			return n == 1, msg
		})
	})

	t.Run("the operator's webhook and CEL rules guard its resources", func(t *testing.T) {
		_, err := h.Kubectl(ctx, "apiVersion: shop.example.dev/v1\nkind: Product\nmetadata: {name: bad, namespace: shop-system, labels: {deny: \"true\"}}\nspec: {price: 1}\n", "apply", "-f", "-")
		if err == nil || !strings.Contains(err.Error(), "vproduct.shop.example.dev") || !strings.Contains(err.Error(), "denied by toolbox") {
			t.Errorf("labelled Product: %v, want refused by vproduct.shop.example.dev", err)
		}
		_, err = h.Kubectl(ctx, "apiVersion: shop.example.dev/v1\nkind: Store\nmetadata: {name: night, namespace: shop-system}\nspec: {city: Paris, opens: 20, closes: 10}\n", "apply", "-f", "-")
		if err == nil || !strings.Contains(err.Error(), "a store must open before it closes") {
			t.Errorf("Store opening after closing: %v, want the CEL message", err)
		}
		if out := kubectlOut(t, h, "get", "stores.v1alpha1.shop.example.dev", "main-street", "-n", "shop-system", "-o", "jsonpath={.spec.city}"); out != "Lyon" {
			t.Errorf("main-street through v1alpha1: %q", out)
		}
	})

	t.Run("the web application applies with its PriorityClass, PDB, HPA and NetworkPolicy", func(t *testing.T) {
		waitFor(t, 3*time.Minute, "webapp GitSource Ready", func() (bool, string) { return sourceState(dyn, "webapp") })
		kubectlOut(t, h, "get", "priorityclass", "shop-web-high")
		kubectlOut(t, h, "get", "-n", "shop-web", "pdb/web", "hpa/web", "networkpolicy/web-from-namespace")
		waitFor(t, time.Minute, "a web pod with its class's priority", func() (bool, string) {
			out, err := h.Kubectl(ctx, "", "get", "pods", "-n", "shop-web", "-l", "app=web", "-o", "jsonpath={.items[*].spec.priority}")
			return err == nil && strings.HasPrefix(out, "100000"), out + fmt.Sprint(err)
		})
	})

	t.Run("the HPA scales the web application to its max under load and back to min", func(t *testing.T) {
		start := time.Now()
		replicas := func() (int32, string) {
			d, err := c.AppsV1().Deployments("shop-web").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return -1, err.Error()
			}
			hpa, _ := h.Kubectl(ctx, "", "get", "hpa", "web", "-n", "shop-web", "--no-headers")
			return *d.Spec.Replicas, fmt.Sprintf("spec.replicas %d; hpa %s", *d.Spec.Replicas, hpa)
		}
		waitFor(t, 3*time.Minute, "scaled up to 3", func() (bool, string) {
			n, state := replicas()
			return n == 3, state
		})
		framework.Figure(t, "HPA scaled web 1 -> 3 in %s", time.Since(start).Round(time.Second))
		// Every pod stops burning 90 s after it starts; with no scale-down stabilization
		// the HPA goes back to its minimum.
		waitFor(t, 4*time.Minute, "scaled back to 1", func() (bool, string) {
			n, state := replicas()
			return n == 1, state
		})
		framework.Figure(t, "HPA scaled web 3 -> 1 %s after the start of the load", time.Since(start).Round(time.Second))
	})

	t.Run("kubectl top shows the figures of the pods' cgroups, and the nodes", func(t *testing.T) {
		create(t, c, newPod("alloc", "host-2", corev1.RestartPolicyAlways, tool("alloc", "alloc", "64")))
		burner := tool("burn", "burn", "10m")
		burner.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}}
		create(t, c, newPod("burn", "host-1", corev1.RestartPolicyAlways, burner))
		for _, name := range []string{"alloc", "burn"} {
			waitPod(t, c, name, 90*time.Second, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		}
		waitFor(t, 2*time.Minute, "kubectl top pods within 10 % of the cgroups", func() (bool, string) {
			pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			// CPU: the cgroup's usage over the 10 s before asking, against the API's rate
			// (a window of 10-15 s ending now); memory: the working set now.
			before := map[string]int64{}
			for _, p := range pods.Items {
				if id := containerID(&p); id != "" && p.Name == "burn" {
					before[p.Name], _ = cgroupCPU(id)
				}
			}
			start := time.Now()
			time.Sleep(10 * time.Second)
			out, err := h.Kubectl(ctx, "", "top", "pods", "-A", "--no-headers")
			if err != nil {
				return false, err.Error()
			}
			top := map[string][2]int64{} // pod -> millicores, MiB
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(l)
				if len(f) == 4 {
					m, _ := strconv.ParseInt(strings.TrimSuffix(f[2], "m"), 10, 64)
					mib, _ := strconv.ParseInt(strings.TrimSuffix(f[3], "Mi"), 10, 64)
					top[f[1]] = [2]int64{m, mib}
				}
			}
			state, cpuOK, memOK := out, false, false
			for _, p := range pods.Items {
				id := containerID(&p)
				figures, listed := top[p.Name]
				if id == "" || !listed {
					continue
				}
				if p0, ok := before[p.Name]; ok && p0 > 0 {
					p1, _ := cgroupCPU(id)
					cgroupMilli := (p1 - p0) * 1000 / time.Since(start).Microseconds()
					state += fmt.Sprintf("\n%s: cgroup %dm, top %dm", p.Name, cgroupMilli, figures[0])
					if within10(figures[0], cgroupMilli) && cgroupMilli > 50 {
						cpuOK = true
						framework.Figure(t, "%s CPU: kubectl top %dm, cgroup %dm", p.Name, figures[0], cgroupMilli)
					}
				}
				if p.Name == "alloc" {
					ws, err := cgroupWorkingSet(id)
					state += fmt.Sprintf("\nalloc: cgroup working set %dMi (%v), top %dMi", ws>>20, err, figures[1])
					if err == nil && within10(figures[1], ws>>20) && ws>>20 >= 64 {
						memOK = true
						framework.Figure(t, "alloc memory: kubectl top %dMi, cgroup working set %dMi", figures[1], ws>>20)
					}
				}
			}
			return cpuOK && memOK, state
		})
		out := kubectlOut(t, h, "top", "nodes", "--no-headers")
		if n := len(strings.Split(strings.TrimSpace(out), "\n")); n != 2 || !strings.Contains(out, "host-1") || !strings.Contains(out, "host-2") {
			t.Errorf("kubectl top nodes:\n%s", out)
		}
	})

	// Last, so that its probes do not delay the HPA subtest, whose load lasts 90 s from the
	// start of the web pod.
	t.Run("kube-prometheus-shaped policies applied from git isolate as written", func(t *testing.T) {
		waitFor(t, 3*time.Minute, "monitoring GitSource Ready", func() (bool, string) { return sourceState(dyn, "monitoring") })
		// Where the probes run: kubectl exec into a Deployment's pod.
		clients := map[string]struct{ ns, deploy string }{
			"prometheus":   {"monitoring", "prometheus-k8s"},
			"grafana":      {"monitoring", "grafana"},
			"alertmanager": {"monitoring", "alertmanager-main"},
			"ksm":          {"monitoring", "kube-state-metrics"},
			"probe":        {"monitoring", "probe"},
			"outside":      {"outside", "client"},
		}
		for _, name := range []string{"prometheus", "grafana", "alertmanager", "ksm", "probe", "outside"} {
			d := clients[name]
			// The servers' readiness probes come from the host, which every policy lets in.
			waitFor(t, 2*time.Minute, d.ns+"/"+d.deploy+" available", func() (bool, string) {
				n, msg := availableReplicas(c, d.ns, d.deploy)
				return n == 1, msg
			})
		}
		// The servers' pod IPs (one Running pod each) and prometheus-k8s's ClusterIP.
		podIP := func(name string) string {
			var ip string
			waitFor(t, time.Minute, "one running "+name+" pod with an IP", func() (bool, string) {
				pods, err := c.CoreV1().Pods("monitoring").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
				if err != nil {
					return false, err.Error()
				}
				var ips []string
				for _, p := range pods.Items {
					if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
						ips = append(ips, p.Status.PodIP)
					}
				}
				if len(ips) != 1 {
					return false, fmt.Sprintf("%d pods, running with an IP: %v", len(pods.Items), ips)
				}
				ip = ips[0]
				return true, ""
			})
			return ip
		}
		prometheus := net.JoinHostPort(podIP("prometheus"), "9090")
		grafana := net.JoinHostPort(podIP("grafana"), "3000")
		alertmanager := net.JoinHostPort(podIP("alertmanager"), "9093")
		ksm := net.JoinHostPort(podIP("kube-state-metrics"), "8443")
		service := net.JoinHostPort(kubectlOut(t, h, "get", "service", "-n", "monitoring", "prometheus-k8s", "-o", "jsonpath={.spec.clusterIP}"), "9090")
		t.Logf("pods:\n%s%s", kubectlOut(t, h, "get", "pods", "-n", "monitoring", "-o", "wide"), kubectlOut(t, h, "get", "pods", "-n", "outside", "-o", "wide"))

		// dial connects from a client's pod to addr with the toolbox: "connected", or an error
		// holding the toolbox's "dial tcp ADDR: ..." when the connection failed.
		dial := func(from, addr string) (string, error) {
			d := clients[from]
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			out, err := h.Kubectl(ctx, "", "exec", "-n", d.ns, "deploy/"+d.deploy, "--", "/app", "dial", addr)
			return strings.TrimSpace(out), err
		}
		// connects expects from to reach to at addr within a minute (rules follow pods and
		// policies asynchronously) and says whether it did.
		connects := func(from, to, addr string) bool {
			t.Helper()
			got := ""
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
				out, err := dial(from, addr)
				if err == nil && out == "connected" {
					t.Logf("%s -> %s (%s): connected", from, to, addr)
					return true
				}
				got = fmt.Sprintf("%q, %v", out, err)
				if time.Now().After(deadline) {
					break
				}
			}
			t.Errorf("from %s to %s (%s): expected connected; got %s for a minute", from, to, addr, got)
			return false
		}
		// refused expects the connection from from to to at addr to fail, twice in a row,
		// within 30 s. Call it after a pair the same policy admits connected, so that the
		// policy is in force but for the rules still on their way.
		refused := func(from, to, addr string) {
			t.Helper()
			failures, got := 0, ""
			for deadline := time.Now().Add(30 * time.Second); failures < 2; {
				out, err := dial(from, addr)
				switch {
				case err != nil && strings.Contains(out+err.Error(), "dial tcp "+addr):
					failures++
					got = err.Error()
				case err == nil:
					failures = 0
					got = fmt.Sprintf("%q", out)
				default: // kubectl exec failed: says nothing about the connection
					got = err.Error()
				}
				if failures < 2 && time.Now().After(deadline) {
					t.Errorf("from %s to %s (%s): expected refused (the dial failing); got %s", from, to, addr, got)
					return
				}
			}
			t.Logf("%s -> %s (%s): refused: %s", from, to, addr, got)
		}

		// prometheus-k8s admits prometheus and grafana on 9090, in the pod's own namespace
		// and not the namespace as a whole; grafana's allow-all egress lets it out.
		if connects("grafana", "prometheus-k8s pod", prometheus) {
			refused("outside", "prometheus-k8s pod", prometheus)
			refused("probe", "prometheus-k8s pod", prometheus)
		}
		// Through the Service: the policy applies to the pod the ClusterIP resolved to.
		if connects("grafana", "prometheus-k8s Service", service) {
			refused("outside", "prometheus-k8s Service", service)
		}
		// And what it admits still connects while it refuses the others.
		connects("grafana", "prometheus-k8s pod", prometheus)
		connects("grafana", "prometheus-k8s Service", service)

		// grafana's port is open to every source, of any namespace.
		connects("outside", "grafana pod", grafana)
		connects("probe", "grafana pod", grafana)

		// alertmanager-main and kube-state-metrics admit prometheus only (whose egress is
		// open to all): grafana's egress is open too, but their ingress refuses it.
		if connects("prometheus", "alertmanager-main pod", alertmanager) {
			refused("grafana", "alertmanager-main pod", alertmanager)
		}
		if connects("prometheus", "kube-state-metrics pod", ksm) {
			refused("grafana", "kube-state-metrics pod", ksm)
		}
	})
}

func within10(got, want int64) bool {
	d := got - want
	if d < 0 {
		d = -d
	}
	return d*10 <= want
}

// containerID is the containerd ID of the pod's first container.
func containerID(p *corev1.Pod) string {
	if len(p.Status.ContainerStatuses) == 0 {
		return ""
	}
	return strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
}

// cgroupDir finds the cgroup directory of a container under a hierarchy (cgroup v1
// controller directory, or the v2 root).
func cgroupDir(root, id string) (string, error) {
	for _, pattern := range []string{"*/%s", "*/*/%s", "*/*/*/%s"} {
		if m, _ := filepath.Glob(filepath.Join(root, fmt.Sprintf(pattern, id))); len(m) > 0 {
			return m[0], nil
		}
	}
	return "", fmt.Errorf("no cgroup of container %s under %s", id, root)
}

// cgroupCPU is the container's CPU usage so far in microseconds, read from its cgroup.
func cgroupCPU(id string) (int64, error) {
	if dir, err := cgroupDir("/sys/fs/cgroup/cpuacct", id); err == nil {
		b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
		if err != nil {
			return 0, err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return ns / 1000, err
	}
	dir, err := cgroupDir("/sys/fs/cgroup", id)
	if err != nil {
		return 0, err
	}
	return statField(filepath.Join(dir, "cpu.stat"), "usage_usec")
}

// cgroupWorkingSet is the container's memory usage less its inactive file pages, in bytes.
func cgroupWorkingSet(id string) (int64, error) {
	usageFile, statFile, inactive := "memory.current", "memory.stat", "inactive_file"
	dir, err := cgroupDir("/sys/fs/cgroup/memory", id)
	if err == nil {
		usageFile, statFile, inactive = "memory.usage_in_bytes", "memory.stat", "total_inactive_file"
	} else if dir, err = cgroupDir("/sys/fs/cgroup", id); err != nil {
		return 0, err
	}
	b, err := os.ReadFile(filepath.Join(dir, usageFile))
	if err != nil {
		return 0, err
	}
	usage, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, err
	}
	in, err := statField(filepath.Join(dir, statFile), inactive)
	if err != nil {
		return 0, err
	}
	return usage - in, nil
}

func statField(file, key string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == key {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s has no %s", file, key)
}
