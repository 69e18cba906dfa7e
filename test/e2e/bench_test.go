package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// BenchmarkGitOps measures a 3-host site end to end (make bench-e2e runs it with -benchtime 1x;
// it does its own rounds):
//   - git commit -> the new version's pods all Ready and the new version answering through the
//     ingress of every host, with gitsync polling (interval 5 s), then with a push webhook
//     (interval 10 minutes);
//   - the memory (RSS) of each host's agent, its containerd and its shims, and the agent's live
//     Go heap, with FLOTILLA_BENCH_PODS_PER_HOST pods (default 50) running on every host;
//     FLOTILLA_BENCH_PROFILES=DIR saves each agent's heap profile and memory map there.
func BenchmarkGitOps(b *testing.B) {
	rounds := envInt("FLOTILLA_BENCH_ROUNDS", 5)
	perHost := envInt("FLOTILLA_BENCH_PODS_PER_HOST", 50)
	profiles := os.Getenv("FLOTILLA_BENCH_PROFILES")
	if profiles != "" {
		if err := os.MkdirAll(profiles, 0o755); err != nil {
			b.Fatalf("FLOTILLA_BENCH_PROFILES: %v", err)
		}
	}
	s := newSite(b, 3)
	sideLoad(b, s)
	startSite(b, s)
	c := clientOf(b, s.Hosts[0])
	waitFor(b, 2*time.Minute, "3 Ready nodes", func() (bool, string) {
		n, state := readyNodes(s.Hosts[0])
		return n == 3, state
	})
	// An idle host: the site's own objects only, after start-up has settled (and the agents
	// have released the pages of the executable only start-up used, a minute after start).
	time.Sleep(70 * time.Second)
	for _, h := range s.Hosts {
		agent := rssKiB(h.PID())
		b.Logf("%s idle: agent RSS %d MiB (%s)", h.Name, agent/1024, rssParts(h.PID()))
		b.ReportMetric(float64(agent)/1024, "MiB-idle-agent-rss-"+h.Name)
	}
	repo, err := devsite.NewGitRepo(b.TempDir(), filepath.Join(framework.RepoRoot(), "examples", "hello"))
	if err != nil {
		b.Fatal(err)
	}
	src := siteDeployer + fmt.Sprintf(`apiVersion: flotilla.dev/v1alpha1
kind: GitSource
metadata: {name: site, namespace: kube-system}
spec: {url: %q, ref: {branch: main}, interval: 5s, serviceAccountName: site-deployer}
`, repo.URL())
	if out, err := s.Hosts[0].Kubectl(context.Background(), src, "apply", "-f", "-"); err != nil {
		b.Fatalf("apply GitSource: %v %s", err, out)
	}
	deployment, err := repo.Read("deployment.yaml")
	if err != nil {
		b.Fatal(err)
	}
	waitServing(b, c, s.Hosts, "v1", 3*time.Minute)

	b.ResetTimer()
	var took []time.Duration
	for i := 0; i < rounds; i++ {
		version := fmt.Sprintf("r%d", i+1)
		next := strings.Replace(deployment, `value: "v1"`, fmt.Sprintf("value: %q", version), 1)
		start := time.Now()
		if _, err := repo.Commit("hello "+version, map[string]string{"deployment.yaml": next}); err != nil {
			b.Fatal(err)
		}
		waitServing(b, c, s.Hosts, version, 3*time.Minute)
		took = append(took, time.Since(start))
		b.Logf("round %d: commit -> %s answering on every host: %s", i+1, version, took[i].Round(10*time.Millisecond))
	}
	report(b, "poll every 5 s", "poll", took)

	// The same with a push webhook and a 10 minute interval: only the webhook starts a fetch.
	if _, err := c.CoreV1().Secrets("kube-system").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "git-webhook"}, Data: map[string][]byte{gitsync.WebhookTokenKey: []byte("bench-t0ken")},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if out, err := s.Hosts[0].Kubectl(context.Background(), "", "-n", "kube-system", "patch", "gitsource", "site", "--type=merge",
		"-p", `{"spec":{"interval":"10m","webhookSecretRef":{"name":"git-webhook"}}}`); err != nil {
		b.Fatalf("patch GitSource: %v %s", err, out)
	}
	// The spec change runs a round of its own: the webhook rounds start once it is done.
	b.StopTimer()
	waitFor(b, time.Minute, "the GitSource's new spec observed", func() (bool, string) {
		out, err := s.Hosts[0].Kubectl(context.Background(), "", "-n", "kube-system", "get", "gitsource", "site",
			"-o", "jsonpath={.metadata.generation} {.status.observedGeneration}")
		f := strings.Fields(out)
		return err == nil && len(f) == 2 && f[0] == f[1], fmt.Sprint(out, err)
	})
	b.StartTimer()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Hosts[1].Kubeconfig())
	if err != nil {
		b.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg) // trusts the site CA
	if err != nil {
		b.Fatal(err)
	}
	took = nil
	for i := 0; i < rounds; i++ {
		version := fmt.Sprintf("w%d", i+1)
		next := strings.Replace(deployment, `value: "v1"`, fmt.Sprintf("value: %q", version), 1)
		start := time.Now()
		if _, err := repo.Commit("hello "+version, map[string]string{"deployment.yaml": next}); err != nil {
			b.Fatal(err)
		}
		if err := gitsync.SendPushEvent(context.Background(), hc, cfg.Host, "kube-system", "site", "main", []byte("bench-t0ken")); err != nil {
			b.Fatal(err)
		}
		waitServing(b, c, s.Hosts, version, 3*time.Minute)
		took = append(took, time.Since(start))
		b.Logf("webhook round %d: commit -> %s answering on every host: %s", i+1, version, took[i].Round(10*time.Millisecond))
	}
	report(b, "push webhook", "webhook", took)
	b.StopTimer()

	// Memory with perHost pods on every host.
	load := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "load", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(perHost * len(s.Hosts))),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "load"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "load"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(1)),
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
						WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "load"}}}},
					Containers: []corev1.Container{{Name: "sleep", Image: toolbox, ImagePullPolicy: corev1.PullIfNotPresent,
						Args: []string{"sleep", "inf"},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("4Mi")}}}},
				},
			},
		},
	}
	start := time.Now()
	if _, err := c.AppsV1().Deployments("default").Create(context.Background(), load, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 15*time.Minute, fmt.Sprintf("%d load pods available", perHost*len(s.Hosts)), func() (bool, string) {
		n, state := availableReplicas(c, "default", "load")
		return n == int32(perHost*len(s.Hosts)), state
	})
	b.Logf("%d pods (%d per host) created -> all available: %s", perHost*len(s.Hosts), perHost, time.Since(start).Round(100*time.Millisecond))
	time.Sleep(10 * time.Second) // let probes and status writes settle
	for _, h := range s.Hosts {
		agent := rssKiB(h.PID())
		ctrd, shims, nShims := 0, 0, 0
		for _, pid := range pidsWithArg(h.DataDir) {
			switch {
			case strings.HasSuffix(comm(pid), "containerd") && ppid(pid) == h.PID():
				ctrd += rssKiB(pid)
			case strings.HasPrefix(comm(pid), "containerd-shim"):
				shims += rssKiB(pid)
				nShims++
			}
		}
		b.Logf("%s with %d pods: agent RSS %d MiB (%s), containerd %d MiB, %d shims %d MiB", h.Name, perHost, agent/1024, rssParts(h.PID()), ctrd/1024, nShims, shims/1024)
		b.ReportMetric(float64(agent)/1024, "MiB-agent-rss-"+h.Name)
		b.ReportMetric(float64(ctrd)/1024, "MiB-containerd-rss-"+h.Name)
		b.ReportMetric(float64(shims)/1024, "MiB-shims-rss-"+h.Name)
		if live, err := liveHeap(clientOf(b, h)); err != nil {
			b.Errorf("%s: %v", h.Name, err)
		} else {
			b.Logf("%s with %d pods: live Go heap %.1f MiB (after the last collection)", h.Name, perHost, live)
			b.ReportMetric(live, "MiB-live-heap-"+h.Name)
		}
		if profiles != "" {
			saveProfiles(b, clientOf(b, h), h, profiles)
		}
	}
}

// liveHeap is the agent's live Go heap in MiB after its last collection, from its API
// server's metrics: unlike the resident set, it does not move with the page cache's state or
// with where the collector stands in its cycle.
func liveHeap(c kubernetes.Interface) (float64, error) {
	raw, err := c.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		return 0, fmt.Errorf("read /metrics: %w", err)
	}
	for l := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(l, "go_gc_heap_live_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f / (1 << 20), err
		}
	}
	return 0, fmt.Errorf("/metrics has no go_gc_heap_live_bytes")
}

// saveProfiles writes the agent's heap profile (go tool pprof) and memory map (smaps) to
// dir/HOST.heap and dir/HOST.smaps, for finding what holds the memory the benchmark reports.
func saveProfiles(b *testing.B, c kubernetes.Interface, h *devsite.Host, dir string) {
	heap, err := c.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").DoRaw(context.Background())
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, h.Name+".heap"), heap, 0o644)
	}
	if err != nil {
		b.Errorf("%s: heap profile: %v", h.Name, err)
	}
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", h.PID()))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, h.Name+".smaps"), smaps, 0o644)
	}
	if err != nil {
		b.Errorf("%s: memory map: %v", h.Name, err)
	}
}

// report prints and records the median and the maximum of took.
func report(b *testing.B, how, metric string, took []time.Duration) {
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(took[len(took)/2].Seconds(), "s-commit-to-serving-"+metric+"-p50")
	b.ReportMetric(took[len(took)-1].Seconds(), "s-commit-to-serving-"+metric+"-max")
	b.Logf("git commit -> all pods Ready and answering through every ingress (%s, %d rounds): p50 %s, max %s",
		how, len(took), took[len(took)/2].Round(10*time.Millisecond), took[len(took)-1].Round(10*time.Millisecond))
}

// waitServing waits until the hello Deployment runs version everywhere: rolled out, and the
// ingress of every host answers with it.
func waitServing(t testing.TB, c kubernetes.Interface, hosts []*devsite.Host, version string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "hello "+version+" serving on every host", func() (bool, string) {
		d, err := c.AppsV1().Deployments("hello").Get(context.Background(), "hello", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := d.Status
		if st.ObservedGeneration != d.Generation || st.UpdatedReplicas != 3 || st.AvailableReplicas != 3 || st.Replicas != 3 {
			return false, fmt.Sprintf("updated %d available %d total %d", st.UpdatedReplicas, st.AvailableReplicas, st.Replicas)
		}
		for _, h := range hosts {
			code, body, err := get("http://"+h.IP+"/", "")
			if code != 200 || !strings.Contains(body, "version "+version) {
				return false, fmt.Sprint(h.Name, ": ", code, body, err)
			}
		}
		return true, ""
	})
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// rssKiB is the resident set of a process (VmRSS), 0 if it is gone.
func rssKiB(pid int) int { return statusKiB(pid, "VmRSS:") }

// rssParts is the resident set of a process split into its anonymous memory (the Go heap
// and stacks) and its file pages (the executable's code and constants).
func rssParts(pid int) string {
	return fmt.Sprintf("anonymous %d MiB, file %d MiB", statusKiB(pid, "RssAnon:")/1024, statusKiB(pid, "RssFile:")/1024)
}

// statusKiB is one "Name: N kB" field of /proc/PID/status, 0 if the process is gone.
func statusKiB(pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command may hold spaces and parentheses: fields start after the last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// pidsWithArg lists the processes whose command line mentions s (a host's data dir).
func pidsWithArg(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(cmd), s) {
			out = append(out, pid)
		}
	}
	return out
}
