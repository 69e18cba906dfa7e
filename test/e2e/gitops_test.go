package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// nodeGrace is the --node-monitor-grace-period of TestGitPushToDeploy's site.
const nodeGrace = 20 * time.Second

// nodeHealth returns the node's Ready status and its taints as key:effect.
func nodeHealth(c kubernetes.Interface, name string) (corev1.ConditionStatus, map[string]bool) {
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return corev1.ConditionStatus(err.Error()), nil
	}
	taints := map[string]bool{}
	for _, t := range n.Spec.Taints {
		taints[t.Key+":"+string(t.Effect)] = true
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status, taints
		}
	}
	return "", taints
}

// helloPods returns the hello pods by UID, with whether each is Ready and not terminating.
func helloPods(c kubernetes.Interface) (map[string]bool, error) {
	pods, err := c.CoreV1().Pods("hello").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, p := range pods.Items {
		out[string(p.UID)] = p.DeletionTimestamp == nil && podReady(&p)
	}
	return out, nil
}

// prober loops GET requests over the ingress of the given hosts and counts failures.
type prober struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	lastErrs   []string
	versions   map[string]int
	stop       chan struct{}
	done       chan struct{}
}

func startProber(hosts []*devsite.Host) *prober {
	p := &prober{stop: make(chan struct{}), done: make(chan struct{}), versions: map[string]int{}}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			case <-time.After(40 * time.Millisecond):
			}
			h := hosts[i%len(hosts)]
			code, body, err := get("http://"+h.IP+"/", "")
			p.mu.Lock()
			if err != nil || code != 200 {
				p.failed.Add(1)
				if len(p.lastErrs) < 10 {
					p.lastErrs = append(p.lastErrs, fmt.Sprintf("%s: %d %q %v", h.Name, code, strings.TrimSpace(body), err))
				}
			} else {
				p.ok.Add(1)
				f := strings.Fields(body)
				p.versions[f[len(f)-1]]++
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *prober) halt() (ok, failed int64, errs []string) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok.Load(), p.failed.Load(), p.lastErrs
}

func gitSource(t testing.TB, dyn dynamic.Interface) (ready, reason, msg, applied string) {
	t.Helper()
	u, err := dyn.Resource(gitsync.GitSourceResource).Namespace("kube-system").Get(context.Background(), "site", metav1.GetOptions{})
	if err != nil {
		return "", "", err.Error(), ""
	}
	applied, _, _ = unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m := c.(map[string]any)
		if m["type"] == "Ready" {
			return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"]), fmt.Sprint(m["message"]), applied
		}
	}
	return "", "", "", applied
}

// TestGitPushToDeploy is the user story end to end on 3 hosts: push -> running and answering
// through every host's Ingress; push a change -> rolled out with no failed request; push a bad
// siteDeployer is ServiceAccount kube-system/site-deployer bound to cluster-admin: the
// GitSources the tests add (every one but kube-system/root must name a ServiceAccount in
// spec.serviceAccountName, whose permissions it applies with) name it. Prepend it to a
// GitSource's manifest.
const siteDeployer = `apiVersion: v1
kind: ServiceAccount
metadata: {name: site-deployer, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: site-deployer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: site-deployer, namespace: kube-system}]
---
`

// commit -> nothing changes and the GitSource says why; revert -> applied again; kill -9 a
// host -> its pods come back elsewhere and the app keeps answering; restart it -> it rejoins.
func TestGitPushToDeploy(t *testing.T) {
	s := newSite(t, 3)
	sideLoad(t, s)
	// Short grace and eviction so a dead host's pods move within the test.
	startSite(t, s, "--default-toleration-seconds=5", "--node-monitor-grace-period="+nodeGrace.String())
	c := clientOf(t, s.Hosts[0])
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Hosts[0].Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	waitFor(t, 2*time.Minute, "3 Ready nodes", func() (bool, string) {
		n, state := readyNodes(s.Hosts[0])
		return n == 3, state
	})
	repo, err := devsite.NewGitRepo(t.TempDir(), filepath.Join(framework.RepoRoot(), "examples", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	src := siteDeployer + fmt.Sprintf(`apiVersion: flotilla.dev/v1alpha1
kind: GitSource
metadata: {name: site, namespace: kube-system}
spec: {url: %q, ref: {branch: main}, interval: 3s, serviceAccountName: site-deployer}
`, repo.URL())
	if out, err := s.Hosts[0].Kubectl(context.Background(), src, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply GitSource: %v %s", err, out)
	}
	pushed := time.Now()
	waitFor(t, 3*time.Minute, "hello answering through the ingress", func() (bool, string) {
		n, state := availableReplicas(c, "hello", "hello")
		if n != 3 {
			return false, state
		}
		code, body, err := get("http://"+s.Hosts[1].IP+"/", "")
		return code == 200 && strings.Contains(body, "version v1"), fmt.Sprint(code, body, err)
	})
	t.Logf("git source recorded -> 3 pods answering through the ingress: %s", time.Since(pushed).Round(100*time.Millisecond))

	deployment, err := repo.Read("deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a pushed image change rolls out with no failed request", func(t *testing.T) {
		p := startProber(s.Hosts)
		time.Sleep(time.Second) // load generator: a second of answers before the change
		// hello:v2 (packed by hack/pack-images.sh) answers "version v2" unless VERSION says
		// otherwise: the commit changes the image and drops the VERSION variable.
		v2 := strings.Replace(deployment, "image: flotilla.local/hello:latest", "image: flotilla.local/hello:v2", 1)
		v2 = strings.Replace(v2, `            - {name: VERSION, value: "v1"}`+"\n", "", 1)
		if strings.Contains(v2, "hello:latest") || strings.Contains(v2, "VERSION") {
			t.Fatal("examples/hello/deployment.yaml no longer uses hello:latest with VERSION v1")
		}
		rev, err := repo.Commit("hello v2 image", map[string]string{"deployment.yaml": v2})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		waitFor(t, 3*time.Minute, "v2 rolled out", func() (bool, string) {
			_, _, _, applied := gitSource(t, dyn)
			d, err := c.AppsV1().Deployments("hello").Get(context.Background(), "hello", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			done := strings.HasSuffix(applied, rev) && d.Status.UpdatedReplicas == 3 && d.Status.AvailableReplicas == 3 &&
				d.Status.Replicas == 3 && d.Status.ObservedGeneration == d.Generation
			return done, fmt.Sprintf("applied %s, updated %d available %d total %d", applied, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, d.Status.Replicas)
		})
		t.Logf("commit -> rolled out: %s", time.Since(start).Round(100*time.Millisecond))
		time.Sleep(2 * time.Second) // load generator: keep probing the rolled-out version a while
		ok, failed, errs := p.halt()
		t.Logf("requests during the rollout: %d ok, %d failed, versions seen %v", ok, failed, p.versions)
		if failed > 0 {
			t.Errorf("%d requests failed during the rollout: %v", failed, errs)
		}
		if p.versions["v2"] == 0 {
			t.Errorf("never answered with v2: %v", p.versions)
		}
	})

	t.Run("a bad commit changes nothing and the source says why", func(t *testing.T) {
		bad := strings.Replace(deployment, "replicas: 3", "replicas: three", 1)
		rev, err := repo.Commit("broken replicas", map[string]string{"deployment.yaml": bad})
		if err != nil {
			t.Fatal(err)
		}
		var msg string
		waitFor(t, 60*time.Second, "GitSource not Ready naming the problem", func() (bool, string) {
			ready, reason, m, _ := gitSource(t, dyn)
			msg = m
			return ready == "False" && strings.Contains(m, rev[:7]), fmt.Sprintf("%s %s %s", ready, reason, m)
		})
		t.Logf("GitSource message: %s", msg)
		code, body, err := get("http://"+s.Hosts[0].IP+"/", "")
		if code != 200 || !strings.Contains(body, "version v2") {
			t.Fatalf("the running version must be untouched: %d %q %v", code, body, err)
		}
		rev, err = repo.Revert()
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "reverted commit applied", func() (bool, string) {
			ready, reason, m, applied := gitSource(t, dyn)
			return ready == "True" && strings.HasSuffix(applied, rev), fmt.Sprintf("%s %s %s %s", ready, reason, m, applied)
		})
	})

	t.Run("a commit that crash-loops is rolled back to the last healthy revision", func(t *testing.T) {
		ctx := context.Background()
		const healthTimeout = 30 * time.Second
		gs := dyn.Resource(gitsync.GitSourceResource).Namespace("kube-system")
		setSpec := func(spec string) {
			t.Helper()
			if _, err := gs.Patch(ctx, "site", types.MergePatchType, []byte(`{"spec":`+spec+`}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		status := func() map[string]any {
			u, err := gs.Get(ctx, "site", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			st, _, _ := unstructured.NestedMap(u.Object, "status")
			return st
		}
		setSpec(fmt.Sprintf(`{"wait":true,"rollback":{"enabled":true,"healthTimeout":%q}}`, healthTimeout))
		defer setSpec(`{"wait":null,"rollback":null}`)
		current, err := repo.Read("deployment.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var healthy string
		waitFor(t, 60*time.Second, "the running revision recorded as healthy", func() (bool, string) {
			ready, reason, msg, applied := gitSource(t, dyn)
			healthy = applied
			return ready == "True" && applied != "" && status()["lastHealthyRevision"] == applied, fmt.Sprintf("%s %s %s %v", ready, reason, msg, status())
		})

		p := startProber(s.Hosts)
		// toolbox without a command prints its usage and exits: the new pod crash-loops.
		crash := strings.Replace(current, "image: flotilla.local/hello:v2", "image: flotilla.local/toolbox:latest", 1)
		if crash == current {
			t.Fatal("deployment.yaml no longer runs flotilla.local/hello:v2")
		}
		bad, err := repo.Commit("hello: an image that crash-loops", map[string]string{"deployment.yaml": crash})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the crash-looping revision applied", func() (bool, string) {
			_, _, _, applied := gitSource(t, dyn)
			return strings.HasSuffix(applied, bad), applied
		})
		appliedAt := time.Now()
		var msg string
		waitFor(t, healthTimeout+60*time.Second, "the source rolled back", func() (bool, string) {
			ready, reason, m, applied := gitSource(t, dyn)
			msg = m
			return ready == "False" && reason == gitsync.ReasonRolledBack && applied == healthy, fmt.Sprintf("%s %s %s %s", ready, reason, m, applied)
		})
		t.Logf("GitSource after the rollback: %s", msg)
		if !strings.Contains(msg, bad) || !strings.Contains(msg, "Deployment hello/hello: pod hello-") || !strings.Contains(msg, "container hello") {
			t.Errorf("Ready message %q does not name the bad revision, the Deployment and its failing pod", msg)
		}
		rb, _ := status()["rolledBack"].(map[string]any)
		if rb == nil || !strings.HasSuffix(fmt.Sprint(rb["revision"]), bad) || rb["to"] != healthy {
			t.Errorf("status.rolledBack = %v, want revision %s, to %s", rb, bad, healthy)
		}
		waitFor(t, healthTimeout+30*time.Second-time.Since(appliedAt), "the previous version rolled out again and answering", func() (bool, string) {
			d, err := c.AppsV1().Deployments("hello").Get(ctx, "hello", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			image := d.Spec.Template.Spec.Containers[0].Image
			done := image == "flotilla.local/hello:v2" && d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == 3 &&
				d.Status.AvailableReplicas == 3 && d.Status.Replicas == 3
			code, body, err := get("http://"+s.Hosts[2].IP+"/", "")
			return done && code == 200 && strings.Contains(body, "version v2"), fmt.Sprintf("image %s, updated %d available %d total %d; %d %q %v",
				image, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, d.Status.Replicas, code, body, err)
		})
		t.Logf("crash-looping revision applied -> previous version rolled out again: %s (health timeout %s)", time.Since(appliedAt).Round(100*time.Millisecond), healthTimeout)
		ok, failed, errs := p.halt()
		t.Logf("requests meanwhile: %d ok, %d failed, versions seen %v", ok, failed, p.versions)
		if failed > 0 {
			t.Errorf("%d requests failed while the bad revision was applied and rolled back: %v", failed, errs)
		}

		// plan says the source is rolled back.
		out, err := exec.Command(framework.FlotillaBin(t), "plan", "--kubeconfig", s.Hosts[0].Kubeconfig(), "--source", "kube-system/site", repo.Work).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "rolled back") || !strings.Contains(string(out), bad) {
			t.Errorf("flotilla plan does not say the source is rolled back (%v):\n%s", err, out)
		}

		// The bad revision is not applied again; the next commit is, normally.
		fixed := strings.Replace(current, "  labels: {app: hello}\n", "  labels: {app: hello, tier: web}\n", 1)
		if fixed == current {
			t.Fatal("deployment.yaml has no metadata.labels {app: hello}")
		}
		good, err := repo.Commit("hello: a label", map[string]string{"deployment.yaml": fixed})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 90*time.Second, "the next commit applied, healthy and Ready", func() (bool, string) {
			ready, reason, m, applied := gitSource(t, dyn)
			st := status()
			return ready == "True" && strings.HasSuffix(applied, good) && st["rolledBack"] == nil && st["lastHealthyRevision"] == applied,
				fmt.Sprintf("%s %s %s %s", ready, reason, m, applied)
		})
	})

	t.Run("kill -9 a host: its pods come back elsewhere", func(t *testing.T) {
		// The victim is a host running a hello pod; the test then talks to another host.
		pods, err := c.CoreV1().Pods("hello").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var victim *devsite.Host
		for _, h := range s.Hosts {
			for _, pod := range pods.Items {
				if pod.Spec.NodeName == h.Name && (victim == nil || victim == s.Hosts[0]) {
					victim = h
				}
			}
		}
		if victim == nil {
			t.Fatalf("no hello pod on any host")
		}
		var live []*devsite.Host
		for _, h := range s.Hosts {
			if h != victim {
				live = append(live, h)
			}
		}
		c := clientOf(t, live[0])
		p := startProber(live)
		victim.Kill()
		start := time.Now()
		waitFor(t, nodeGrace+15*time.Second, victim.Name+" Ready=Unknown with the unreachable taints", func() (bool, string) {
			status, taints := nodeHealth(c, victim.Name)
			return status == corev1.ConditionUnknown && taints["node.kubernetes.io/unreachable:NoSchedule"] &&
				taints["node.kubernetes.io/unreachable:NoExecute"], fmt.Sprintf("Ready=%s taints %v", status, taints)
		})
		t.Logf("host killed -> Node Ready=Unknown with unreachable taints: %s (grace %s)", time.Since(start).Round(100*time.Millisecond), nodeGrace)
		waitFor(t, 3*time.Minute, "3 available replicas, none on "+victim.Name, func() (bool, string) {
			pods, err := c.CoreV1().Pods("hello").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			ready, elsewhere := 0, 0
			for _, pod := range pods.Items {
				if pod.DeletionTimestamp == nil && podReady(&pod) {
					ready++
					if pod.Spec.NodeName != victim.Name {
						elsewhere++
					}
				}
			}
			return elsewhere == 3 && ready == 3, fmt.Sprintf("%d ready, %d on live hosts", ready, elsewhere)
		})
		t.Logf("host killed -> 3 replicas on the other hosts: %s", time.Since(start).Round(100*time.Millisecond))
		time.Sleep(2 * time.Second) // load generator: keep probing the moved replicas a while
		ok, failed, errs := p.halt()
		t.Logf("requests through the live hosts' ingress meanwhile: %d ok, %d failed %v", ok, failed, errs)
		if ok == 0 || failed*10 > ok {
			t.Errorf("the app did not keep answering: %d ok, %d failed", ok, failed)
		}
		if err := victim.Restart(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, victim.Name+" Ready again", func() (bool, string) {
			st, _ := nodeHealth(c, victim.Name)
			return st == corev1.ConditionTrue, string(st)
		})
		waitFor(t, 60*time.Second, "the rejoined host's ingress answers", func() (bool, string) {
			code, body, err := get("http://"+victim.IP+"/", "")
			return code == 200, fmt.Sprint(code, body, err)
		})
	})

	t.Run("partition a host: the majority keeps deploying, heal converges", func(t *testing.T) {
		cut := s.Hosts[2]
		liveDyn := dyn // s.Hosts[0]'s
		if err := cut.Partition(); err != nil {
			t.Fatal(err)
		}
		healed := false
		defer func() {
			if !healed {
				cut.Heal()
			}
		}()
		start := time.Now()
		v3 := strings.Replace(deployment, `value: "v1"`, `value: "v3"`, 1)
		rev, err := repo.Commit("hello v3 while "+cut.Name+" is cut off", map[string]string{"deployment.yaml": v3})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 4*time.Minute, "v3 applied and answering through the majority's ingress", func() (bool, string) {
			_, _, _, applied := gitSource(t, liveDyn)
			d, err := c.AppsV1().Deployments("hello").Get(context.Background(), "hello", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			state := fmt.Sprintf("applied %s, updated %d available %d", applied, d.Status.UpdatedReplicas, d.Status.AvailableReplicas)
			if !strings.HasSuffix(applied, rev) || d.Status.UpdatedReplicas != 3 || d.Status.AvailableReplicas < 3 {
				return false, state
			}
			for _, h := range s.Hosts[:2] {
				code, body, err := get("http://"+h.IP+"/", "")
				if code != 200 || !strings.Contains(body, "version v3") {
					return false, fmt.Sprint(state, "; ", h.Name, ": ", code, body, err)
				}
			}
			return true, state
		})
		t.Logf("commit during a partition -> v3 answering through the majority: %s", time.Since(start).Round(100*time.Millisecond))
		cut.Heal()
		healed = true
		start = time.Now()
		cc := clientOf(t, cut)
		cfg, err := clientcmd.BuildConfigFromFlags("", cut.Kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		cutDyn := dynamic.NewForConfigOrDie(cfg)
		waitFor(t, 3*time.Minute, cut.Name+" converged: Ready, sees v3 applied, its ingress answers v3", func() (bool, string) {
			status, _ := nodeHealth(cc, cut.Name)
			_, _, _, applied := gitSource(t, cutDyn)
			code, body, err := get("http://"+cut.IP+"/", "")
			return status == corev1.ConditionTrue && strings.HasSuffix(applied, rev) && code == 200 && strings.Contains(body, "version v3"),
				fmt.Sprintf("Ready=%s applied %s ingress %d %q %v", status, applied, code, body, err)
		})
		t.Logf("heal -> %s converged: %s", cut.Name, time.Since(start).Round(100*time.Millisecond))
	})

	t.Run("partition every host from every other: no evictions", func(t *testing.T) {
		waitFor(t, time.Minute, "3 ready hello pods and 3 Ready nodes", func() (bool, string) {
			pods, err := helloPods(c)
			if err != nil {
				return false, err.Error()
			}
			n := 0
			for _, ok := range pods {
				if ok {
					n++
				}
			}
			nodes, state := readyNodes(s.Hosts[0])
			return n == 3 && len(pods) == 3 && nodes == 3, fmt.Sprintf("%d/%d pods ready; %s", n, len(pods), state)
		})
		before, err := helloPods(c)
		if err != nil {
			t.Fatal(err)
		}
		cutAt := time.Now()
		if err := s.PartitionAll(); err != nil {
			s.HealAll()
			t.Fatal(err)
		}
		// Longer than the grace period plus the pods' 5 s tolerations: a controller that
		// believed the others dead would evict now.
		time.Sleep(nodeGrace + 15*time.Second)
		s.HealAll()
		start := time.Now()
		waitFor(t, 3*time.Minute, "every Node Ready again without NoExecute taints", func() (bool, string) {
			var state []string
			for _, h := range s.Hosts {
				status, taints := nodeHealth(c, h.Name)
				state = append(state, fmt.Sprintf("%s Ready=%s %v", h.Name, status, taints))
				if status != corev1.ConditionTrue || taints["node.kubernetes.io/unreachable:NoExecute"] || taints["node.kubernetes.io/not-ready:NoExecute"] {
					return false, strings.Join(state, "; ")
				}
			}
			return true, strings.Join(state, "; ")
		})
		t.Logf("heal -> every Node Ready: %s", time.Since(start).Round(100*time.Millisecond))
		time.Sleep(8 * time.Second) // past the tolerations, in case a taint came and went
		var after map[string]bool
		waitFor(t, time.Minute, "the same 3 hello pods Ready", func() (bool, string) {
			after, err = helloPods(c)
			if err != nil {
				return false, err.Error()
			}
			for uid, ok := range after {
				if _, was := before[uid]; !was || !ok {
					return false, fmt.Sprintf("before %v after %v", before, after)
				}
			}
			return len(after) == len(before), fmt.Sprintf("before %v after %v", before, after)
		})
		evs, err := c.CoreV1().Events("hello").List(context.Background(), metav1.ListOptions{FieldSelector: "reason=TaintManagerEviction"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			at := e.LastTimestamp.Time
			if at.IsZero() {
				at = e.EventTime.Time
			}
			if at.After(cutAt.Add(-time.Second)) {
				t.Errorf("pod %s evicted around the partition: %s", e.InvolvedObject.Name, e.Message)
			}
		}
	})
}
