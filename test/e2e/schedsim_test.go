package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// schedNS is the namespace of TestPlanSchedulingSimulation's workloads.
const schedNS = "schedsim"

// schedTaint is the taint TestPlanSchedulingSimulation puts on one host.
const schedTaint = "schedsim/dedicated"

// schedWorkload is one generated Deployment.
type schedWorkload struct {
	name     string
	replicas int
	cpu      string
	memory   string
	// spec is YAML added to the pod spec (affinity, tolerations), indented 6 spaces.
	spec string
	what string
}

func (w schedWorkload) yaml() string {
	return fmt.Sprintf(`---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  replicas: %[3]d
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: c
        image: %[4]s
        imagePullPolicy: IfNotPresent
        command: [/app, sleep, inf]
        resources: {requests: {cpu: %[5]s, memory: %[6]s}}
%[7]s`, w.name, schedNS, w.replicas, toolbox, w.cpu, w.memory, w.spec)
}

// schedPlan runs `flotilla plan` on the work tree of repo against host h for the GitSource
// kube-system/site and returns its stdout and exit status.
func schedPlan(t *testing.T, h *devsite.Host, repo *devsite.GitRepo, args ...string) (string, int) {
	t.Helper()
	args = append([]string{"plan", "--kubeconfig", h.Kubeconfig(), "--source", "kube-system/site"}, args...)
	cmd := exec.Command(framework.FlotillaBin(t), append(args, repo.Work)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out) + stderr.String(), ee.ExitCode()
	}
	t.Fatalf("flotilla %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	return "", 0
}

// schedCommit writes workloads.yaml, commits it and asks the GitSource to fetch at once; it
// waits until the commit is applied.
func schedCommit(t *testing.T, dyn dynamic.Interface, repo *devsite.GitRepo, msg, manifest string) {
	t.Helper()
	rev, err := repo.Commit(msg, map[string]string{"workloads.yaml": manifest})
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, gitsync.RequestedAtAnnotation, time.Now().Format(time.RFC3339Nano))
	if _, err := dyn.Resource(gitsync.GitSourceResource).Namespace("kube-system").Patch(context.Background(), "site",
		types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "commit "+msg+" applied", func() (bool, string) {
		ready, reason, m, applied := gitSource(t, dyn)
		return strings.HasSuffix(applied, rev), fmt.Sprintf("%s %s %s (applied %s)", ready, reason, m, applied)
	})
}

// schedObserved is, per workload of want (name -> replicas), the number of its pods that are
// Pending as Unschedulable; settled is false while a workload lacks pods, a pod is neither
// bound nor reported Unschedulable, or a pod of another workload is still there.
func schedObserved(c kubernetes.Interface, want map[string]int) (pending map[string]int, settled bool, state string) {
	pods, err := c.CoreV1().Pods(schedNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, false, err.Error()
	}
	pending, count := map[string]int{}, map[string]int{}
	settled = true
	var notes []string
	for _, p := range pods.Items {
		app := p.Labels["app"]
		if _, ok := want[app]; !ok || p.DeletionTimestamp != nil {
			settled = false
			notes = append(notes, "leftover "+p.Name)
			continue
		}
		count[app]++
		if p.Spec.NodeName != "" {
			continue
		}
		unschedulable := false
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				unschedulable = true
			}
		}
		if !unschedulable {
			settled = false
			notes = append(notes, "undecided "+p.Name)
			continue
		}
		pending[app]++
	}
	for app, n := range want {
		if count[app] != n {
			settled = false
			notes = append(notes, fmt.Sprintf("%s has %d/%d pods", app, count[app], n))
		}
	}
	return pending, settled, fmt.Sprintf("pending %v; %s", pending, strings.Join(first(notes, 6), ", "))
}

// TestPlanSchedulingSimulation checks `flotilla plan --kubeconfig` scheduling simulation
// against the site's real scheduler on 3 hosts: a revision that cannot fit fails the plan
// with the scheduler's reason; then generated revisions are planned and applied through
// gitsync, and the pods predicted Pending are those that stay Pending.
func TestPlanSchedulingSimulation(t *testing.T) {
	s, c := startPodSite(t, 3)
	h := s.Hosts[0]
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", h.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	app := t.TempDir()
	if err := os.WriteFile(filepath.Join(app, "namespace.yaml"), []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+schedNS+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	repo, err := devsite.NewGitRepo(t.TempDir(), app)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, h, siteDeployer+fmt.Sprintf(`apiVersion: flotilla.dev/v1alpha1
kind: GitSource
metadata: {name: site, namespace: kube-system}
spec: {url: %q, ref: {branch: main}, interval: 2s, serviceAccountName: site-deployer}
`, repo.URL()))
	waitFor(t, 2*time.Minute, "GitSource site applied", func() (bool, string) {
		ready, reason, m, applied := gitSource(t, dyn)
		return applied != "", fmt.Sprintf("%s %s %s", ready, reason, m)
	})

	// Every node's allocatable and what is free of it, from the API.
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	var maxAlloc int64
	for _, n := range nodes.Items {
		hosts = append(hosts, n.Name)
		maxAlloc = max(maxAlloc, n.Status.Allocatable.Memory().Value())
	}
	sort.Strings(hosts)
	huge := strconv.FormatInt((maxAlloc>>20)+1024, 10) + "Mi"

	t.Run("a revision that cannot fit fails the plan", func(t *testing.T) {
		tooBig := schedWorkload{name: "too-big", replicas: 2, cpu: "10m", memory: huge}
		manifest := tooBig.yaml()
		if err := os.WriteFile(filepath.Join(repo.Work, "workloads.yaml"), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := schedPlan(t, h, repo, "--detailed-exitcode")
		want := "! Deployment " + schedNS + "/too-big: 0 of 2 pods fit, 2 would stay Pending: 0/3 nodes are available: 3 Insufficient memory."
		if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "2 pod(s) of this revision would stay Pending") {
			t.Errorf("plan of a Deployment larger than any host: exit %d, want 1 and %q:\n%s", code, want, out)
		}
		t.Logf("plan:\n%s", out)
		schedCommit(t, dyn, repo, "too big", manifest)
		waitFor(t, time.Minute, "2 pods Pending as Unschedulable", func() (bool, string) {
			pending, settled, state := schedObserved(c, map[string]int{"too-big": 2})
			return settled && pending["too-big"] == 2, state
		})

		fits := schedWorkload{name: "fits", replicas: 3, cpu: "10m", memory: "16Mi"}
		if err := os.WriteFile(filepath.Join(repo.Work, "workloads.yaml"), []byte(fits.yaml()), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code = schedPlan(t, h, repo, "--detailed-exitcode")
		if (code != 0 && code != 2) || strings.Contains(out, "would stay Pending") || !strings.Contains(out, "1 workload(s) fit entirely: 3 pod(s)") {
			t.Errorf("plan of a Deployment that fits: exit %d, want 0 or 2 and no pending pod:\n%s", code, out)
		}
		schedCommit(t, dyn, repo, "fits", fits.yaml())
	})

	t.Run("generated revisions: the pods predicted Pending stay Pending", func(t *testing.T) {
		seed := uint64(time.Now().UnixNano())
		if v := os.Getenv("FLOTILLA_SCHEDSIM_SEED"); v != "" {
			if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("seed %d (replay with FLOTILLA_SCHEDSIM_SEED=%d)", seed, seed)
		rnd := rand.New(rand.NewPCG(seed, seed))

		// The last host is tainted; some workloads tolerate it.
		tainted := hosts[len(hosts)-1]
		kubectlOut(t, h, "taint", "node", tainted, schedTaint+"=yes:NoSchedule")
		defer kubectlOut(t, h, "taint", "node", tainted, schedTaint+"-")

		// A big pod takes 60% of the smallest free memory, more than half of the largest:
		// at most one per node, and room left next to it for every tiny pod.
		free := map[string]int64{}
		for _, n := range nodes.Items {
			free[n.Name] = n.Status.Allocatable.Memory().Value()
		}
		pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.Namespace == schedNS {
				continue
			}
			for _, ctr := range p.Spec.Containers {
				free[p.Spec.NodeName] -= ctr.Resources.Requests.Memory().Value()
			}
		}
		minFree, maxFree := int64(-1), int64(0)
		for _, f := range free {
			if minFree < 0 || f < minFree {
				minFree = f
			}
			maxFree = max(maxFree, f)
		}
		bigMi := max(minFree*6/10, maxFree/2+(64<<20)) >> 20
		if bigMi<<20+(1<<30) > minFree {
			t.Fatalf("hosts too uneven for one big pod per host: free memory %v", free)
		}
		big := strconv.FormatInt(bigMi, 10) + "Mi"
		t.Logf("free memory per host %v: big pods request %s, huge ones %s; %s is tainted %s", free, big, huge, tainted, schedTaint)

		const revisions = 20
		start := time.Now()
		totalPods, predictedPending, observedPending := 0, 0, 0
		for rev := 1; rev <= revisions; rev++ {
			var ws []schedWorkload
			special := -1 // at most one workload with a non-tiny request
			n := 1 + rnd.IntN(4)
			if rnd.IntN(10) < 6 {
				special = rnd.IntN(n)
			}
			for i := range n {
				w := schedWorkload{name: fmt.Sprintf("r%d-w%d", rev, i), replicas: 1 + rnd.IntN(6), cpu: "10m", memory: "16Mi"}
				var what []string
				if i == special {
					if rnd.IntN(3) == 0 {
						w.memory, what = huge, append(what, "huge")
					} else {
						w.memory, what = big, append(what, "big")
					}
				}
				// Affinity: none (35%), a subset of the hosts (30%), a label no node has
				// (10%), one pod per host (25%).
				switch r := rnd.IntN(20); {
				case r < 7: // none
				case r < 13: // required node affinity to a random non-empty subset of the hosts
					var subset []string
					for len(subset) == 0 {
						for _, host := range hosts {
							if rnd.IntN(2) == 0 {
								subset = append(subset, host)
							}
						}
					}
					w.spec += fmt.Sprintf("      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [%s]}]}]}}}\n",
						strings.Join(subset, ", "))
					what = append(what, "on "+strings.Join(subset, ","))
				case r < 15: // a label no node has
					w.spec += "      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: schedsim/nowhere, operator: Exists}]}]}}}\n"
					what = append(what, "nowhere")
				default: // one pod per host
					w.spec += fmt.Sprintf("      affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: %s}}}]}}\n", w.name)
					what = append(what, "anti-affinity")
				}
				if rnd.IntN(2) == 0 {
					w.spec += fmt.Sprintf("      tolerations: [{key: %s, operator: Exists, effect: NoSchedule}]\n", schedTaint)
					what = append(what, "tolerates")
				}
				w.what = strings.Join(what, " ")
				ws = append(ws, w)
			}
			var manifest strings.Builder
			want := map[string]int{}
			var desc []string
			for _, w := range ws {
				manifest.WriteString(w.yaml())
				want[w.name] = w.replicas
				desc = append(desc, fmt.Sprintf("%s x%d %s", w.name, w.replicas, w.what))
				totalPods += w.replicas
			}
			if err := os.WriteFile(filepath.Join(repo.Work, "workloads.yaml"), []byte(manifest.String()), 0o644); err != nil {
				t.Fatal(err)
			}

			out, code := schedPlan(t, h, repo, "--output", "json")
			var p gitsync.Plan
			if err := json.Unmarshal([]byte(out), &p); err != nil || code != 0 || p.Scheduling == nil {
				t.Fatalf("revision %d: plan exit %d, %v, scheduling %v:\n%s", rev, code, err, p.Scheduling, out)
			}
			predicted := map[string]int{}
			reasons := map[string]string{}
			for _, w := range p.Scheduling.Workloads {
				predicted[w.Name], reasons[w.Name] = w.Pending, w.Reason
				if w.Pods != want[w.Name] {
					t.Errorf("revision %d: %s predicted with %d pods, want %d", rev, w.Name, w.Pods, want[w.Name])
				}
			}
			if len(p.Scheduling.Workloads) != len(ws) {
				t.Errorf("revision %d: %d workloads simulated, want %d: %+v", rev, len(p.Scheduling.Workloads), len(ws), p.Scheduling.Workloads)
			}

			schedCommit(t, dyn, repo, fmt.Sprintf("revision %d", rev), manifest.String())
			// Settled and as predicted ends the wait at once. Otherwise the state must hold
			// longer than the scheduler's longest backoff (10 s), so that a pod that did not
			// fit while the previous revision's pods were still going had its retry.
			var observed map[string]int
			var last string
			var stableSince time.Time
			deadline := time.Now().Add(90 * time.Second)
			for {
				pending, settled, state := schedObserved(c, want)
				if !settled || state != last {
					stableSince, last = time.Now(), state
				}
				if settled && (fmt.Sprint(pending) == fmt.Sprint(predictedOnly(predicted)) || time.Since(stableSince) > 12*time.Second) {
					observed = pending
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("revision %d (%s): pods not settled after 90s: %s", rev, strings.Join(desc, "; "), state)
				}
				time.Sleep(300 * time.Millisecond)
			}
			for _, w := range ws {
				predictedPending += predicted[w.name]
				observedPending += observed[w.name]
				if predicted[w.name] != observed[w.name] {
					t.Errorf("revision %d (seed %d), %s x%d %s: predicted %d pending (%s), observed %d\n%s",
						rev, seed, w.name, w.replicas, w.what, predicted[w.name], reasons[w.name], observed[w.name], out)
				}
			}
			t.Logf("revision %d: %s; pending predicted %v, observed %v", rev, strings.Join(desc, "; "), predictedOnly(predicted), observed)
		}
		framework.Figure(t, "plan scheduling simulation: %d revisions, %d pods, %d pending predicted, %d observed, in %s",
			revisions, totalPods, predictedPending, observedPending, time.Since(start).Round(100*time.Millisecond))
	})
}

// predictedOnly drops the workloads predicted with no pending pod, as the observation lists
// only those with one.
func predictedOnly(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}
