package gitsync

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
)

// schedNode is a Ready node with allocatable cpu (millicores), memory (MiB) and 110 pods,
// labelled with its hostname.
func schedNode(name string, milliCPU, memMiB int64, opts ...func(*corev1.Node)) corev1.Node {
	n := corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(memMiB<<20, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		}},
	}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func schedTaint(key, value string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffectNoSchedule})
	}
}

// schedPod is a pod of the site in namespace default requesting cpu and memory, bound to node
// ("": pending), controlled by owner ("Kind/name", "": none).
func schedPod(name, node, owner string, milliCPU, memMiB int64, priority int32) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Labels: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: node, SchedulerName: corev1.DefaultSchedulerName, Priority: &priority,
			Containers: []corev1.Container{{Name: "c", Image: "toolbox", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(memMiB<<20, resource.BinarySI),
			}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if node == "" {
		p.Status.Phase = corev1.PodPending
	}
	if kind, oname, ok := strings.Cut(owner, "/"); ok {
		apiVersion := "apps/v1"
		if kind == "Job" {
			apiVersion = "batch/v1"
		}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: oname, UID: types.UID("uid-" + oname), Controller: new(true)}}
	}
	return p
}

// schedDeployment is a Deployment of namespace default with replicas pods of one container
// requesting cpu and memory; extra is YAML added to the pod spec (indented 6 spaces).
func schedDeployment(t *testing.T, name string, replicas int, cpu, memory, extra string) *unstructured.Unstructured {
	t.Helper()
	return planYAMLObject(t, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: default}
spec:
  replicas: %[2]d
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      containers:
      - name: c
        image: toolbox
        resources: {requests: {cpu: %[3]s, memory: %[4]s}}
%[5]s`, name, replicas, cpu, memory, extra))
}

func schedCreate(objs ...*unstructured.Unstructured) []schedulingChange {
	var out []schedulingChange
	for _, o := range objs {
		out = append(out, schedulingChange{Action: PlanCreate, Obj: o})
	}
	return out
}

func schedWorkload(t *testing.T, r *SchedulingReport, name string) WorkloadScheduling {
	t.Helper()
	for _, w := range r.Workloads {
		if w.Name == name {
			return w
		}
	}
	t.Fatalf("no workload %s in %+v", name, r.Workloads)
	return WorkloadScheduling{}
}

func schedCheck(t *testing.T, r *SchedulingReport, name string, pods, fit, pending int, reason string) {
	t.Helper()
	w := schedWorkload(t, r, name)
	if w.Pods != pods || w.Fit != fit || w.Pending != pending || w.Reason != reason {
		t.Errorf("%s: %d pods, %d fit, %d pending (%q); want %d, %d, %d (%q)", name, w.Pods, w.Fit, w.Pending, w.Reason, pods, fit, pending, reason)
	}
}

func threeNodes() []corev1.Node {
	return []corev1.Node{schedNode("host-1", 2000, 4096), schedNode("host-2", 2000, 4096), schedNode("host-3", 2000, 4096)}
}

// A Deployment asking for more memory than any node has: every pod stays Pending with the
// scheduler's message, the plan fails with --detailed-exitcode and says so in every format.
func TestSimulateMemoryTooBig(t *testing.T) {
	site := &schedulingSite{Nodes: threeNodes()}
	r, warnings := simulateScheduling(site, nil, schedCreate(
		schedDeployment(t, "web", 5, "100m", "8Gi", ""),
		schedDeployment(t, "small", 2, "10m", "16Mi", "")))
	if len(warnings) > 0 {
		t.Errorf("warnings: %v", warnings)
	}
	schedCheck(t, r, "web", 5, 0, 5, "0/3 nodes are available: 3 Insufficient memory.")
	schedCheck(t, r, "small", 2, 2, 0, "")
	if r.Pending != 5 || r.Nodes != 3 {
		t.Errorf("pending %d on %d nodes, want 5 on 3", r.Pending, r.Nodes)
	}

	p := &Plan{Source: "kube-system/root", Path: ".", Items: []PlanItem{{Action: PlanCreate, Kind: "Deployment", Namespace: "default", Name: "web"}},
		Scheduling: r}
	if p.ExitCode(true) != 1 || p.ExitCode(false) != 0 {
		t.Errorf("exit codes %d (detailed), %d; want 1, 0", p.ExitCode(true), p.ExitCode(false))
	}
	text := p.Text()
	for _, want := range []string{
		"Scheduling (simulated on 3 nodes):\n",
		"! Deployment default/web: 0 of 5 pods fit, 5 would stay Pending: 0/3 nodes are available: 3 Insufficient memory.\n",
		"  1 workload(s) fit entirely: 2 pod(s)\n",
		"Plan: 1 to create, 0 to update, 0 to delete, 0 unchanged, 5 pod(s) would stay Pending.\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	md := p.Markdown()
	for _, want := range []string{
		"⚠️ **flotilla plan** `.`: Plan: 1 to create, 0 to update, 0 to delete, 0 unchanged, 5 pod(s) would stay Pending.",
		"| `Deployment default/web` | 5 | 0 | 5 | 0/3 nodes are available: 3 Insufficient memory. |",
		"<details><summary>Capacity of 3 node(s)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	b, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := json.Unmarshal(b, &back); err != nil || back.Scheduling == nil || back.Scheduling.Pending != 5 ||
		!strings.Contains(string(b), `"reason": "0/3 nodes are available: 3 Insufficient memory."`) {
		t.Errorf("json plan (%v):\n%s", err, b)
	}
}

// Required anti-affinity on the hostname against its own pods: one pod per node, the rest
// Pending.
func TestSimulateAntiAffinity(t *testing.T) {
	site := &schedulingSite{Nodes: threeNodes()}
	anti := `      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}
`
	r, _ := simulateScheduling(site, nil, schedCreate(schedDeployment(t, "web", 5, "10m", "16Mi", anti)))
	schedCheck(t, r, "web", 5, 3, 2, "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.")
	for _, n := range r.Capacity {
		if n.After.Pods != 1 {
			t.Errorf("%s: %d pods after, want 1", n.Name, n.After.Pods)
		}
	}
}

// A taint keeps the pods that do not tolerate it off its node; those that tolerate it use it.
func TestSimulateTaint(t *testing.T) {
	site := &schedulingSite{Nodes: []corev1.Node{schedNode("host-1", 2000, 4096, schedTaint("dedicated", "db")),
		schedNode("host-2", 2000, 4096), schedNode("host-3", 2000, 4096)}}
	// 3 GiB each: one pod per node.
	tolerate := "      tolerations: [{key: dedicated, operator: Equal, value: db, effect: NoSchedule}]\n"
	r, _ := simulateScheduling(site, nil, schedCreate(schedDeployment(t, "plain", 3, "10m", "3Gi", "")))
	schedCheck(t, r, "plain", 3, 2, 1, "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: db}, 2 Insufficient memory.")
	r, _ = simulateScheduling(site, nil, schedCreate(schedDeployment(t, "tolerant", 3, "10m", "3Gi", tolerate)))
	schedCheck(t, r, "tolerant", 3, 3, 0, "")
}

// A DaemonSet wants one pod per node its selector and tolerations allow, each pinned to its
// node as the daemonset controller pins them.
func TestSimulateDaemonSet(t *testing.T) {
	gpu := func(n *corev1.Node) { n.Labels["gpu"] = "yes" }
	site := &schedulingSite{Nodes: []corev1.Node{schedNode("host-1", 2000, 4096, gpu), schedNode("host-2", 2000, 4096, gpu, schedTaint("dedicated", "db")),
		schedNode("host-3", 2000, 4096, gpu), schedNode("host-4", 2000, 4096)},
		// host-3 has no room left for the DaemonSet's pod.
		Pods: []corev1.Pod{schedPod("hog", "host-3", "", 100, 4000, 0)}}
	ds := planYAMLObject(t, `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      nodeSelector: {gpu: "yes"}
      containers: [{name: c, image: toolbox, resources: {requests: {cpu: 100m, memory: 256Mi}}}]
`)
	r, _ := simulateScheduling(site, nil, schedCreate(ds))
	// host-4 lacks the label, host-2 has an untolerated taint: host-1 and host-3 want a pod.
	schedCheck(t, r, "agent", 2, 1, 1, "0/4 nodes are available: 1 Insufficient memory, 3 node(s) didn't satisfy plugin(s) [NodeAffinity].")
	after := map[string]int64{}
	for _, n := range r.Capacity {
		after[n.Name] = n.After.Pods
	}
	if want := map[string]int64{"host-1": 1, "host-2": 0, "host-3": 1, "host-4": 0}; fmt.Sprint(after) != fmt.Sprint(want) {
		t.Errorf("pods after = %v, want %v", after, want)
	}
}

// An update that only scales keeps the running pods where they are and adds the rest; one
// that changes the pod template replaces them. A deleted workload's pods free their room.
func TestSimulateScaleKeepsRunningPods(t *testing.T) {
	// 3 GiB pods: one per node. web runs on host-1 and host-2 (through its ReplicaSet).
	rs := schedReplicaSet("web-abc", "web")
	site := func() *schedulingSite {
		return &schedulingSite{Nodes: []corev1.Node{schedNode("host-1", 2000, 4096), schedNode("host-2", 2000, 4096)},
			ReplicaSets: rs,
			Pods: []corev1.Pod{schedPod("web-abc-1", "host-1", "ReplicaSet/web-abc", 10, 3072, 0),
				schedPod("web-abc-2", "host-2", "ReplicaSet/web-abc", 10, 3072, 0)}}
	}
	up := schedDeployment(t, "web", 3, "10m", "3Gi", "")
	r, _ := simulateScheduling(site(), nil, []schedulingChange{{Action: PlanUpdate, Obj: up}})
	schedCheck(t, r, "web", 3, 2, 1, "0/2 nodes are available: 2 Insufficient memory.")
	for _, n := range r.Capacity {
		if n.Before.Pods != 1 || n.After.Pods != 1 || n.After.MemoryBytes != 3<<30 {
			t.Errorf("%s: %+v, want the running pod kept alone", n.Name, n)
		}
	}

	// Scaled down to 1: one running pod stays, on host-1 (the oldest by name at equal age).
	down := schedDeployment(t, "web", 1, "10m", "3Gi", "")
	r, _ = simulateScheduling(site(), nil, []schedulingChange{{Action: PlanUpdate, Obj: down}})
	schedCheck(t, r, "web", 1, 1, 0, "")
	if c := r.Capacity; c[0].After.Pods != 1 || c[1].After.Pods != 0 {
		t.Errorf("scaled down: %+v", c)
	}

	// A new template: the running pods go, the new ones take their place.
	r, _ = simulateScheduling(site(), nil, []schedulingChange{{Action: PlanUpdate, Obj: up, TemplateChanged: true}})
	schedCheck(t, r, "web", 3, 2, 1, "0/2 nodes are available: 2 Insufficient memory.")

	// web deleted: its room goes to a new workload.
	gone := &unstructured.Unstructured{}
	gone.SetAPIVersion("apps/v1")
	gone.SetKind("Deployment")
	gone.SetNamespace("default")
	gone.SetName("web")
	r, _ = simulateScheduling(site(), nil, []schedulingChange{{Action: PlanDelete, Obj: gone},
		{Action: PlanCreate, Obj: schedDeployment(t, "api", 2, "10m", "3Gi", "")}})
	schedCheck(t, r, "api", 2, 2, 0, "")
	if len(r.Workloads) != 1 {
		t.Errorf("workloads %+v, want only api", r.Workloads)
	}

	if !planTemplateChanged("Deployment", []FieldChange{{Path: "spec.template.spec.containers[c].image"}}) ||
		planTemplateChanged("Deployment", []FieldChange{{Path: "spec.replicas"}}) ||
		!planTemplateChanged("Pod", []FieldChange{{Path: "spec.containers[c].image"}}) {
		t.Error("planTemplateChanged")
	}
}

func schedReplicaSet(name, deployment string) []appsv1.ReplicaSet {
	rs := appsv1.ReplicaSet{}
	rs.Name, rs.Namespace = name, "default"
	rs.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: deployment, Controller: new(true)}}
	return []appsv1.ReplicaSet{rs}
}

// Priority decides who fits: the revision's pods go highest priority first whatever their
// apply order, and before the site's pending pods of lower priority; a class that does not
// exist refuses the pods.
func TestSimulatePriorityOrder(t *testing.T) {
	site := &schedulingSite{Nodes: []corev1.Node{schedNode("host-1", 2000, 4096)},
		PriorityClasses: []schedulingv1.PriorityClass{{ObjectMeta: metav1.ObjectMeta{Name: "low"}, Value: 10}},
		// A pending pod of the site, priority 100.
		Pods: []corev1.Pod{schedPod("waiting", "", "", 10, 3072, 100)}}
	high := planYAMLObject(t, "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n")
	r, _ := simulateScheduling(site, []*unstructured.Unstructured{high}, schedCreate(
		schedDeployment(t, "first", 1, "10m", "3Gi", "      priorityClassName: low\n"),
		schedDeployment(t, "second", 1, "10m", "3Gi", "      priorityClassName: high\n"),
		schedDeployment(t, "third", 1, "10m", "3Gi", "      priorityClassName: none\n")))
	schedCheck(t, r, "second", 1, 1, 0, "")
	schedCheck(t, r, "first", 1, 0, 1, "0/1 nodes are available: 1 Insufficient memory.")
	schedCheck(t, r, "third", 1, 0, 1, "pods refused: no PriorityClass with name none was found")
	if r.Pending != 2 {
		t.Errorf("pending %d, want 2 (the site's own pending pod is not the revision's)", r.Pending)
	}

	// Without the high class, the site's pending pod (priority 100) goes before "low".
	r, _ = simulateScheduling(site, nil, schedCreate(schedDeployment(t, "first", 1, "10m", "3Gi", "      priorityClassName: low\n")))
	schedCheck(t, r, "first", 1, 0, 1, "0/1 nodes are available: 1 Insufficient memory.")
}

// The capacity figures: what the site's pods request now and with the revision, in the
// scheduler's accounting (requests default to limits, finished pods do not count).
func TestSimulateCapacity(t *testing.T) {
	done := schedPod("done", "host-1", "Job/batch", 500, 1024, 0)
	done.Status.Phase = corev1.PodSucceeded
	site := &schedulingSite{Nodes: []corev1.Node{schedNode("host-1", 2000, 23757)},
		Pods: []corev1.Pod{schedPod("a", "host-1", "", 300, 512, 0), schedPod("b", "host-1", "", 50, 512, 0), done}}
	limits := planYAMLObject(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: toolbox, resources: {limits: {cpu: 500m, memory: 4Gi}}}]
`)
	r, _ := simulateScheduling(site, nil, schedCreate(limits))
	schedCheck(t, r, "web", 2, 2, 0, "")
	want := NodeCapacity{Name: "host-1", Allocatable: NodeResources{2000, 23757 << 20, 110},
		Before: NodeResources{350, 1 << 30, 2}, After: NodeResources{1350, 9 << 30, 4}}
	if len(r.Capacity) != 1 || r.Capacity[0] != want {
		t.Fatalf("capacity %+v, want %+v", r.Capacity, want)
	}
	text := (&Plan{Scheduling: r}).Text()
	if line := "  host-1: cpu 350m -> 1350m of 2 (67%), memory 1.0Gi -> 9.0Gi of 23.2Gi (38%), pods 2 -> 4 of 110\n"; !strings.Contains(text, line) {
		t.Errorf("text lacks %q:\n%s", line, text)
	}
}

// A StatefulSet's pods are created in order: a pending pod keeps the later ones from
// existing. Its claims of volumeClaimTemplates, new, wait for their consumer (the local
// class) and do not hold the pods back.
func TestSimulateStatefulSet(t *testing.T) {
	site := &schedulingSite{Nodes: []corev1.Node{schedNode("host-1", 2000, 4096), schedNode("host-2", 2000, 4096)}}
	ss := planYAMLObject(t, `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: default}
spec:
  replicas: 4
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: toolbox, resources: {requests: {memory: 3Gi}}}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {storageClassName: flotilla-local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
`)
	r, _ := simulateScheduling(site, nil, schedCreate(ss))
	schedCheck(t, r, "db", 4, 2, 2, "0/2 nodes are available: 2 Insufficient memory.")
}

// A credential that may not list pods: the plan gets a warning, not a failure.
func TestPlanSchedulingForbidden(t *testing.T) {
	repo := t.TempDir()
	if err := os.WriteFile(filepath.Join(repo, "web.yaml"), []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: toolbox, resources: {requests: {memory: 8Gi}}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	listKinds := map[schema.GroupVersionResource]string{GitSourceResource: "GitSourceList"}
	for _, gvr := range []schema.GroupVersionResource{planNodesGVR, planPodsGVR, planNamespacesGVR, planClaimsGVR, planVolumesGVR,
		planPriorityClassesGVR, planStorageClassesGVR, planReplicaSetsGVR} {
		listKinds[gvr] = strings.TrimSuffix(strings.ToUpper(gvr.Resource[:1])+gvr.Resource[1:], "s") + "List"
	}
	listKinds[planClaimsGVR], listKinds[planVolumesGVR] = "PersistentVolumeClaimList", "PersistentVolumeList"
	listKinds[planPriorityClassesGVR], listKinds[planStorageClassesGVR] = "PriorityClassList", "StorageClassList"
	listKinds[planReplicaSetsGVR], listKinds[planNamespacesGVR] = "ReplicaSetList", "NamespaceList"
	ns := planYAMLObject(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n")
	node := planYAMLObject(t, "apiVersion: v1\nkind: Node\nmetadata: {name: host-1}\nstatus: {allocatable: {cpu: '2', memory: 4Gi, pods: '110'}}\n")
	plan := func(forbidden bool) *Plan {
		t.Helper()
		dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, ns, node)
		// The dry-run answers what was sent, as the API does for a new object.
		dyn.PrependReactor("patch", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(a.(clienttesting.PatchAction).GetPatch()); err != nil {
				return true, nil, err
			}
			return true, u, nil
		})
		if forbidden {
			dyn.PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", fmt.Errorf(`User "ci" cannot list resource "pods"`))
			})
		}
		a := &Applier{Dynamic: dyn, Mapper: apiserver.OfflineRESTMapper()}
		p, err := a.Plan(context.Background(), PlanOptions{RepoDir: repo, Source: DefaultPlanSource})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	p := plan(true)
	want := `scheduling not simulated: list pods: pods is forbidden: User "ci" cannot list resource "pods"`
	if p.Scheduling != nil || !strings.Contains(strings.Join(p.Warnings, "\n"), want) || p.ExitCode(true) != 2 {
		t.Errorf("forbidden: scheduling %+v, exit %d, warnings %q; want the warning %q", p.Scheduling, p.ExitCode(true), p.Warnings, want)
	}

	p = plan(false)
	if p.Scheduling == nil {
		t.Fatalf("no scheduling report; warnings %q", p.Warnings)
	}
	schedCheck(t, p.Scheduling, "web", 2, 0, 2, "0/1 nodes are available: 1 Insufficient memory.")
	if p.ExitCode(true) != 1 || !strings.Contains(p.Summary(), ", 2 pod(s) would stay Pending.") {
		t.Errorf("exit %d, summary %q", p.ExitCode(true), p.Summary())
	}
}
