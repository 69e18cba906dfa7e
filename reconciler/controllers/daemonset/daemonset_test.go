package daemonset_test

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/daemonset"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

// nodeExporterYAML is a node-exporter DaemonSet reduced to what the controller reads: the control-plane toleration (the one user toleration,
// which comes first) and hostNetwork (the 7th automatic toleration).
const nodeExporterYAML = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node-exporter
  labels:
    app: node-exporter
spec:
  selector:
    matchLabels:
      app: node-exporter
  template:
    metadata:
      labels:
        app: node-exporter
    spec:
      hostNetwork: true
      tolerations:
      - key: node-role.kubernetes.io/control-plane
        operator: Exists
        effect: NoSchedule
      containers:
      - name: node-exporter
        image: prom/node-exporter:v1.8.2
        ports:
        - containerPort: 9100
`

// simpleDS is a DaemonSet named name with extra spec YAML (indented two spaces) and extra pod
// spec YAML (indented six spaces).
func simpleDS(name, spec, podSpec string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: %[1]s
spec:
  selector:
    matchLabels:
      app: %[1]s
%[2]s
  template:
    metadata:
      labels:
        app: %[1]s
    spec:
%[3]s
      containers:
      - name: app
        image: example.com/agent:v1
`, name, spec, podSpec)
}

var podName = regexp.MustCompile(`^node-exporter-[bcdfghjklmnpqrstvwxz2456789]{5}$`)

func createNode(t *testing.T, client kubernetes.Interface, name string, lbls map[string]string, taints ...corev1.Taint) {
	t.Helper()
	if lbls == nil {
		lbls = map[string]string{}
	}
	lbls["kubernetes.io/hostname"] = name
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}},
	}
	if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
}

func deleteNode(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	if err := client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete node %s: %v", name, err)
	}
}

func getDS(t *testing.T, client kubernetes.Interface, ns, name string) *appsv1.DaemonSet {
	t.Helper()
	ds, err := client.AppsV1().DaemonSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ds %s/%s: %v", ns, name, err)
	}
	return ds
}

// podsByNode returns the active pods of ns keyed by the node their affinity pins.
func podsByNode(client kubernetes.Interface, ns string) (map[string][]corev1.Pod, error) {
	pods, err := controllertest.ActivePods(client, ns)
	if err != nil {
		return nil, err
	}
	out := map[string][]corev1.Pod{}
	for _, p := range pods {
		out[daemonset.TargetNode(&p)] = append(out[daemonset.TargetNode(&p)], p)
	}
	return out, nil
}

// waitNodes waits until ns has exactly one active pod on each of nodes and none elsewhere.
func waitNodes(t *testing.T, client kubernetes.Interface, ns string, nodes ...string) map[string]corev1.Pod {
	t.Helper()
	sort.Strings(nodes)
	var got map[string][]corev1.Pod
	controllertest.Eventually(t, 30*time.Second, fmt.Sprintf("one pod in %s on each of %v", ns, nodes), func() (bool, error) {
		var err error
		got, err = podsByNode(client, ns)
		if err != nil || len(got) != len(nodes) {
			return false, err
		}
		for _, n := range nodes {
			if len(got[n]) != 1 {
				return false, nil
			}
		}
		return true, nil
	})
	out := map[string]corev1.Pod{}
	for n, ps := range got {
		out[n] = ps[0]
	}
	return out
}

func waitStatus(t *testing.T, client kubernetes.Interface, ns, name string, want appsv1.DaemonSetStatus) *appsv1.DaemonSet {
	t.Helper()
	var ds *appsv1.DaemonSet
	controllertest.Eventually(t, 30*time.Second, fmt.Sprintf("status of %s/%s %+v", ns, name, want), func() (bool, error) {
		ds = getDS(t, client, ns, name)
		s := ds.Status
		return s.ObservedGeneration == ds.Generation && s.DesiredNumberScheduled == want.DesiredNumberScheduled &&
			s.CurrentNumberScheduled == want.CurrentNumberScheduled && s.NumberReady == want.NumberReady &&
			s.UpdatedNumberScheduled == want.UpdatedNumberScheduled && s.NumberAvailable == want.NumberAvailable &&
			s.NumberUnavailable == want.NumberUnavailable && s.NumberMisscheduled == want.NumberMisscheduled, nil
	})
	return ds
}

func status(desired, current, ready, updated, available, misscheduled int32) appsv1.DaemonSetStatus {
	return appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, CurrentNumberScheduled: current, NumberReady: ready,
		UpdatedNumberScheduled: updated, NumberAvailable: available, NumberUnavailable: desired - available,
		NumberMisscheduled: misscheduled}
}

func markAllReady(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	pods, err := controllertest.ActivePods(client, ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if !internal.IsPodReady(&p) {
			if err := controllertest.MarkReady(context.Background(), client, &p, time.Now()); err != nil {
				t.Fatalf("mark %s ready: %v", p.Name, err)
			}
		}
	}
}

func TestDaemonSet(t *testing.T) {
	a, client := controllertest.Start(t, daemonset.New)
	ctx := context.Background()
	self := a.Name
	controllertest.Eventually(t, 30*time.Second, "the agent's own Node", func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, self, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		// The test agent runs no pods (--pods=false taints its Node); here its Node stands in
		// for a host that does.
		n.Spec.Taints = nil
		_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err == nil, err
	})
	createNode(t, client, "edge-1", map[string]string{"role": "edge"})
	createNode(t, client, "edge-2", map[string]string{"role": "edge"})
	all := []string{self, "edge-1", "edge-2"}

	// One pod per node, pinned by node affinity (never nodeName), with the automatic
	// tolerations, revision labels, status, kubectl output and events; a 4th node comes and goes.
	t.Run("one pod per node", func(t *testing.T) {
		const ns = "ds-basic"
		controllertest.Namespace(t, client, ns)
		a.MustKubectl(nodeExporterYAML, "apply", "-n", ns, "-f", "-")
		ds := getDS(t, client, ns, "node-exporter")
		pods := waitNodes(t, client, ns, all...)
		crs, err := client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(crs.Items) != 1 {
			t.Fatalf("controller revisions: %v, %v; want 1", crs, err)
		}
		cr := crs.Items[0]
		hash := cr.Labels["controller-revision-hash"]
		if cr.Name != "node-exporter-"+hash || cr.Revision != 1 || metav1.GetControllerOf(&cr).UID != ds.UID {
			t.Errorf("revision %s (revision %d, hash %q)", cr.Name, cr.Revision, hash)
		}
		exists := corev1.TolerationOpExists
		wantTol := []corev1.Toleration{
			{Key: "node-role.kubernetes.io/control-plane", Operator: exists, Effect: corev1.TaintEffectNoSchedule},
			{Key: "node.kubernetes.io/not-ready", Operator: exists, Effect: corev1.TaintEffectNoExecute},
			{Key: "node.kubernetes.io/unreachable", Operator: exists, Effect: corev1.TaintEffectNoExecute},
			{Key: "node.kubernetes.io/disk-pressure", Operator: exists, Effect: corev1.TaintEffectNoSchedule},
			{Key: "node.kubernetes.io/memory-pressure", Operator: exists, Effect: corev1.TaintEffectNoSchedule},
			{Key: "node.kubernetes.io/pid-pressure", Operator: exists, Effect: corev1.TaintEffectNoSchedule},
			{Key: "node.kubernetes.io/unschedulable", Operator: exists, Effect: corev1.TaintEffectNoSchedule},
			{Key: "node.kubernetes.io/network-unavailable", Operator: exists, Effect: corev1.TaintEffectNoSchedule},
		}
		for node, p := range pods {
			if !podName.MatchString(p.Name) || p.GenerateName != "node-exporter-" {
				t.Errorf("pod name %q, want node-exporter-xxxxx", p.Name)
			}
			if p.Spec.NodeName != "" {
				t.Errorf("pod %s has nodeName %q: binding is the scheduler's job", p.Name, p.Spec.NodeName)
			}
			terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			wantTerm := corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}
			if len(terms) != 1 || fmt.Sprint(terms[0]) != fmt.Sprint(wantTerm) {
				t.Errorf("pod %s node affinity %+v, want %+v", p.Name, terms, wantTerm)
			}
			if p.Labels["controller-revision-hash"] != hash || p.Labels["pod-template-generation"] != "1" {
				t.Errorf("pod %s labels %v", p.Name, p.Labels)
			}
			if len(p.Spec.Tolerations) != len(wantTol) {
				t.Errorf("pod %s has %d tolerations, want %d: %+v", p.Name, len(p.Spec.Tolerations), len(wantTol), p.Spec.Tolerations)
				continue
			}
			for i, tol := range p.Spec.Tolerations {
				if tol.Key != wantTol[i].Key || tol.Operator != exists || tol.Effect != wantTol[i].Effect || tol.Value != "" || tol.TolerationSeconds != nil {
					t.Errorf("pod %s toleration %d = %+v, want %+v", p.Name, i, tol, wantTol[i])
				}
			}
		}
		waitStatus(t, client, ns, "node-exporter", status(3, 3, 0, 3, 0, 0))
		markAllReady(t, client, ns)
		waitStatus(t, client, ns, "node-exporter", status(3, 3, 3, 3, 3, 0))
		out := a.MustKubectl("", "get", "ds", "node-exporter", "-n", ns)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE" ||
			!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "node-exporter 3 3 3 3 3 <none> ") {
			t.Errorf("kubectl get ds:\n%s", out)
		}
		if out := a.MustKubectl("", "rollout", "status", "ds/node-exporter", "-n", ns, "--timeout=20s"); !strings.Contains(out, `daemon set "node-exporter" successfully rolled out`) {
			t.Errorf("rollout status: %q", out)
		}
		created, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "SuccessfulCreate").String()})
		if err != nil || len(created.Items) != 3 {
			t.Errorf("SuccessfulCreate events: %d, %v; want 3", len(created.Items), err)
		}
		for _, e := range created.Items {
			if e.Source.Component != "daemonset-controller" || !strings.HasPrefix(e.Message, "Created pod: node-exporter-") {
				t.Errorf("event %s from %s: %q", e.Reason, e.Source.Component, e.Message)
			}
		}

		// A new node gets a pod; a removed node loses it.
		createNode(t, client, "edge-3", nil)
		waitNodes(t, client, ns, append(all, "edge-3")...)
		waitStatus(t, client, ns, "node-exporter", status(4, 4, 3, 4, 3, 0))
		deleteNode(t, client, "edge-3")
		waitNodes(t, client, ns, all...)
		waitStatus(t, client, ns, "node-exporter", status(3, 3, 3, 3, 3, 0))
		deleted, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "SuccessfulDelete").String()})
		if err != nil || len(deleted.Items) != 1 || !strings.HasPrefix(deleted.Items[0].Message, "Deleted pod: node-exporter-") {
			t.Errorf("SuccessfulDelete events: %+v, %v; want 1", deleted, err)
		}
	})

	// nodeSelector; a node that loses the label loses its pod.
	t.Run("nodeSelector", func(t *testing.T) {
		const ns = "ds-selector"
		controllertest.Namespace(t, client, ns)
		a.MustKubectl(simpleDS("edge-agent", "", "      nodeSelector:\n        role: edge"), "apply", "-n", ns, "-f", "-")
		waitNodes(t, client, ns, "edge-1", "edge-2")
		waitStatus(t, client, ns, "edge-agent", status(2, 2, 0, 2, 0, 0))
		if out := a.MustKubectl("", "get", "ds", "edge-agent", "-n", ns, "--no-headers"); !strings.Contains(out, "role=edge") {
			t.Errorf("NODE SELECTOR column: %q", out)
		}
		patch := []byte(`{"metadata":{"labels":{"role":null}}}`)
		if _, err := client.CoreV1().Nodes().Patch(ctx, "edge-2", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitNodes(t, client, ns, "edge-1")
		waitStatus(t, client, ns, "edge-agent", status(1, 1, 0, 1, 0, 0))
		restore := []byte(`{"metadata":{"labels":{"role":"edge"}}}`)
		if _, err := client.CoreV1().Nodes().Patch(ctx, "edge-2", types.StrategicMergePatchType, restore, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitNodes(t, client, ns, "edge-1", "edge-2")
	})

	// An untolerated NoSchedule taint keeps a node out; a toleration lets it in.
	t.Run("taints", func(t *testing.T) {
		const ns = "ds-taints"
		controllertest.Namespace(t, client, ns)
		createNode(t, client, "gpu-1", map[string]string{"tier": "gpu"}, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
		defer deleteNode(t, client, "gpu-1")
		a.MustKubectl(simpleDS("plain", "", "      nodeSelector:\n        tier: gpu"), "apply", "-n", ns, "-f", "-")
		a.MustKubectl(simpleDS("tolerant", "", "      nodeSelector:\n        tier: gpu\n      tolerations:\n      - key: dedicated\n        operator: Equal\n        value: gpu\n        effect: NoSchedule"), "apply", "-n", ns, "-f", "-")
		waitStatus(t, client, ns, "tolerant", status(1, 1, 0, 1, 0, 0))
		waitStatus(t, client, ns, "plain", status(0, 0, 0, 0, 0, 0))
		pods, err := controllertest.ActivePods(client, ns)
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) != 1 || pods[0].Labels["app"] != "tolerant" || daemonset.TargetNode(&pods[0]) != "gpu-1" {
			t.Errorf("pods %v: want one pod of tolerant on gpu-1", podNames(pods))
		}
	})

	// RollingUpdate with maxUnavailable 1 replaces one node's pod at a time.
	t.Run("rolling update", func(t *testing.T) {
		const ns = "ds-rolling"
		controllertest.Namespace(t, client, ns)
		a.MustKubectl(simpleDS("agent", "", ""), "apply", "-n", ns, "-f", "-")
		before := waitNodes(t, client, ns, all...)
		markAllReady(t, client, ns)
		waitStatus(t, client, ns, "agent", status(3, 3, 3, 3, 3, 0))
		controllertest.Kubelet(t, client, ns, 300*time.Millisecond, nil)

		watchCtx, stop := context.WithCancel(ctx)
		worst := make(chan int, 1)
		go func() {
			// Track the most nodes seen at once without a ready pod.
			most := 0
			for watchCtx.Err() == nil {
				if got, err := podsByNode(client, ns); err == nil {
					missing := 0
					for _, n := range all {
						ready := false
						for _, p := range got[n] {
							ready = ready || internal.IsPodReady(&p)
						}
						if !ready {
							missing++
						}
					}
					most = max(most, missing)
				}
				time.Sleep(20 * time.Millisecond)
			}
			worst <- most
		}()
		a.MustKubectl("", "set", "image", "ds/agent", "-n", ns, "app=example.com/agent:v2")
		out := a.MustKubectl("", "rollout", "status", "ds/agent", "-n", ns, "--timeout=60s")
		stop()
		if !strings.Contains(out, `daemon set "agent" successfully rolled out`) {
			t.Errorf("rollout status: %q", out)
		}
		if most := <-worst; most != 1 {
			t.Errorf("at most %d nodes were without a ready pod during the rollout, want exactly 1 (maxUnavailable 1)", most)
		}
		ds := waitStatus(t, client, ns, "agent", status(3, 3, 3, 3, 3, 0))
		after := waitNodes(t, client, ns, all...)
		for n, p := range after {
			if p.UID == before[n].UID || p.Spec.Containers[0].Image != "example.com/agent:v2" || p.Labels["pod-template-generation"] != fmt.Sprint(ds.Generation) {
				t.Errorf("node %s: pod %s (%s) not replaced", n, p.Name, p.Spec.Containers[0].Image)
			}
		}
		crs, err := client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(crs.Items) != 2 {
			t.Fatalf("controller revisions: %d, %v; want 2", len(crs.Items), err)
		}
		if out := a.MustKubectl("", "rollout", "history", "ds/agent", "-n", ns); !strings.Contains(out, "1 ") || !strings.Contains(out, "2 ") {
			t.Errorf("rollout history:\n%s", out)
		}
	})

	// maxSurge starts the new pod next to the old one.
	t.Run("max surge", func(t *testing.T) {
		const ns = "ds-surge"
		controllertest.Namespace(t, client, ns)
		a.MustKubectl(simpleDS("agent", "  updateStrategy:\n    rollingUpdate:\n      maxUnavailable: 0\n      maxSurge: 1", ""), "apply", "-n", ns, "-f", "-")
		waitNodes(t, client, ns, all...)
		markAllReady(t, client, ns)
		waitStatus(t, client, ns, "agent", status(3, 3, 3, 3, 3, 0))
		a.MustKubectl("", "set", "image", "ds/agent", "-n", ns, "app=example.com/agent:v2")
		// Without a kubelet the surge pod stays unready: exactly one node has two pods.
		controllertest.Eventually(t, 30*time.Second, "one surge pod", func() (bool, error) {
			got, err := podsByNode(client, ns)
			if err != nil {
				return false, err
			}
			doubled := 0
			for _, ps := range got {
				if len(ps) == 2 {
					doubled++
				}
			}
			return doubled == 1 && len(got) == 3, nil
		})
		// The controller has written the status of the new template.
		controllertest.Eventually(t, 30*time.Second, "observedGeneration of the new template", func() (bool, error) {
			ds := getDS(t, client, ns, "agent")
			return ds.Status.ObservedGeneration == ds.Generation, nil
		})
		// No second surge pod while the first is unready. The controller has no periodic
		// resync: the surge pod's add event and the status write each sync the DaemonSet again
		// within milliseconds, so a second surge pod would appear well within a second.
		controllertest.Consistently(t, time.Second, "4 pods during the surge", func() (bool, error) {
			got, err := podsByNode(client, ns)
			total := 0
			for _, ps := range got {
				total += len(ps)
			}
			return total == 4, err
		})
		controllertest.Kubelet(t, client, ns, 100*time.Millisecond, nil)
		a.MustKubectl("", "rollout", "status", "ds/agent", "-n", ns, "--timeout=60s")
		waitNodes(t, client, ns, all...)
		waitStatus(t, client, ns, "agent", status(3, 3, 3, 3, 3, 0))
	})

	// OnDelete leaves old pods until they are deleted.
	t.Run("on delete", func(t *testing.T) {
		const ns = "ds-ondelete"
		controllertest.Namespace(t, client, ns)
		a.MustKubectl(simpleDS("agent", "  updateStrategy:\n    type: OnDelete", ""), "apply", "-n", ns, "-f", "-")
		before := waitNodes(t, client, ns, all...)
		markAllReady(t, client, ns)
		waitStatus(t, client, ns, "agent", status(3, 3, 3, 3, 3, 0))
		a.MustKubectl("", "set", "image", "ds/agent", "-n", ns, "app=example.com/agent:v2")
		waitStatus(t, client, ns, "agent", status(3, 3, 3, 0, 3, 0))
		// The status of the new generation is written by the sync that would have replaced pods,
		// and its write syncs once more within milliseconds: a second covers both.
		controllertest.Consistently(t, time.Second, "the old pods kept under OnDelete", func() (bool, error) {
			got, err := podsByNode(client, ns)
			if err != nil {
				return false, err
			}
			for _, n := range all {
				if len(got[n]) != 1 || got[n][0].UID != before[n].UID {
					return false, fmt.Errorf("node %s: pods %d, pod replaced under OnDelete", n, len(got[n]))
				}
			}
			return true, nil
		})
		after := waitNodes(t, client, ns, all...)
		victim := after["edge-1"]
		if err := client.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		controllertest.Eventually(t, 30*time.Second, "replacement on edge-1", func() (bool, error) {
			got, err := podsByNode(client, ns)
			if err != nil || len(got["edge-1"]) != 1 {
				return false, err
			}
			p := got["edge-1"][0]
			return p.UID != victim.UID && p.Spec.Containers[0].Image == "example.com/agent:v2", nil
		})
		waitStatus(t, client, ns, "agent", status(3, 3, 2, 1, 2, 0))
	})
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Labels["app"]+"/"+p.Name)
	}
	return out
}
