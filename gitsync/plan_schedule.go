package gitsync

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/defaults"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/daemonset"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
	"github.com/flotilla-dev/flotilla/reconciler/scheduler"
)

// SchedulingReport is what flotilla's scheduler would make of the revision's pods on the
// site as it is when the plan is made (see (*Applier).Plan): the scheduler's own code runs
// on a snapshot of the site's Nodes and pods, from which the pods of the workloads the
// revision replaces or deletes are taken away, and places the revision's pods one after
// the other, in its queue's order.
type SchedulingReport struct {
	// Nodes is the number of Nodes the pods were placed on.
	Nodes int `json:"nodes"`
	// Workloads are the workloads the revision creates or updates, in apply order.
	Workloads []WorkloadScheduling `json:"workloads"`
	// Capacity is, per node, its allocatable and what its pods request now and after the
	// revision.
	Capacity []NodeCapacity `json:"capacity"`
	// Pending is the number of the workloads' pods that would stay Pending.
	Pending int `json:"pending"`
}

// WorkloadScheduling is the simulated outcome for one workload's pods.
type WorkloadScheduling struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Pods is the number of pods the workload wants; Fit of them find a node (or keep the
	// one they run on), Pending would stay Pending.
	Pods    int `json:"pods"`
	Fit     int `json:"fit"`
	Pending int `json:"pending"`
	// Reason says why the first pending pod fits no node, in the scheduler's words (the
	// message of its PodScheduled condition, e.g. "0/3 nodes are available: 3 Insufficient
	// memory.").
	Reason string `json:"reason,omitempty"`
}

// Ref is "Kind namespace/name".
func (w WorkloadScheduling) Ref() string {
	return PlanItem{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name}.Ref()
}

// NodeResources is an amount of the resources the scheduler fits pods by.
type NodeResources struct {
	CPUMillis   int64 `json:"cpuMillis"`
	MemoryBytes int64 `json:"memoryBytes"`
	Pods        int64 `json:"pods"`
}

// NodeCapacity is a node's allocatable and the sum of its pods' requests (and their number),
// as the site is now (Before) and with the revision applied (After).
type NodeCapacity struct {
	Name        string        `json:"name"`
	Allocatable NodeResources `json:"allocatable"`
	Before      NodeResources `json:"requestedBefore"`
	After       NodeResources `json:"requestedAfter"`
}

// schedulingSite is the site a simulation starts from: what the scheduler's informers hold
// (Nodes, Pods, Namespaces, claims and volumes), the PriorityClasses and StorageClasses
// admission resolves new pods and claims with, and the ReplicaSets that tie a Deployment to
// its pods.
type schedulingSite struct {
	Nodes           []corev1.Node
	Pods            []corev1.Pod
	Namespaces      []corev1.Namespace
	Claims          []corev1.PersistentVolumeClaim
	Volumes         []corev1.PersistentVolume
	PriorityClasses []schedulingv1.PriorityClass
	StorageClasses  []storagev1.StorageClass
	ReplicaSets     []appsv1.ReplicaSet
}

// schedulingChange is a workload the plan creates, updates or deletes.
type schedulingChange struct {
	Action PlanAction
	// Obj is the workload as it is once applied (the dry-run's result) for a create or an
	// update; for a delete only its kind, namespace and name are read.
	Obj *unstructured.Unstructured
	// TemplateChanged is set for an update that changes the pod template (a Pod's spec):
	// its running pods are replaced. Otherwise an update only scales, and they stay.
	TemplateChanged bool
}

// workloadKey names a workload; the group is implied by the kind.
type workloadKey struct{ Kind, Namespace, Name string }

// The workload kinds whose pods a plan simulates, by group and kind.
var planWorkloadKinds = map[schema.GroupKind]bool{
	{Group: "apps", Kind: "Deployment"}: true, {Group: "apps", Kind: "ReplicaSet"}: true,
	{Group: "apps", Kind: "StatefulSet"}: true, {Group: "apps", Kind: "DaemonSet"}: true,
	{Group: "batch", Kind: "Job"}: true, {Kind: "Pod"}: true,
}

// isPlanWorkload reports whether u is of a kind whose pods the scheduling simulation places.
func isPlanWorkload(u *unstructured.Unstructured) bool {
	return planWorkloadKinds[u.GroupVersionKind().GroupKind()]
}

// planTemplateChanged reports whether an update with these changes replaces the pods: a
// change under spec.template (a workload's pod template) or, for a Pod, under spec.
func planTemplateChanged(kind string, changes []FieldChange) bool {
	prefix := "spec.template"
	if kind == "Pod" {
		prefix = "spec"
	}
	for _, c := range changes {
		if c.Path == prefix || strings.HasPrefix(c.Path, prefix+".") || strings.HasPrefix(c.Path, prefix+"[") {
			return true
		}
	}
	return false
}

// Resources the simulation lists, with the scheduler's informers' and admission's view.
var (
	planNodesGVR           = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	planPodsGVR            = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	planNamespacesGVR      = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	planClaimsGVR          = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	planVolumesGVR         = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}
	planPriorityClassesGVR = schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1", Resource: "priorityclasses"}
	planStorageClassesGVR  = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}
	planReplicaSetsGVR     = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
)

// planScheduling lists the site through the plan's client and simulates changes on it
// (see simulateScheduling). An error means the site could not be listed (e.g. the plan's
// credential may not list pods): the caller reports that the scheduling was not simulated.
func (a *Applier) planScheduling(ctx context.Context, revision []*unstructured.Unstructured, changes []schedulingChange) (*SchedulingReport, []string, error) {
	site := &schedulingSite{}
	lists := []struct {
		gvr  schema.GroupVersionResource
		into func(*unstructured.Unstructured) error
	}{
		{planNodesGVR, planAppend(&site.Nodes)},
		{planPodsGVR, planAppend(&site.Pods)},
		{planNamespacesGVR, planAppend(&site.Namespaces)},
		{planClaimsGVR, planAppend(&site.Claims)},
		{planVolumesGVR, planAppend(&site.Volumes)},
		{planPriorityClassesGVR, planAppend(&site.PriorityClasses)},
		{planStorageClassesGVR, planAppend(&site.StorageClasses)},
		{planReplicaSetsGVR, planAppend(&site.ReplicaSets)},
	}
	for _, l := range lists {
		if err := planList(ctx, a, l.gvr, l.into); err != nil {
			return nil, nil, err
		}
	}
	if len(site.Nodes) == 0 {
		return nil, nil, fmt.Errorf("the site has no Nodes")
	}
	rep, warnings := simulateScheduling(site, revision, changes)
	return rep, warnings, nil
}

// planList lists every object of gvr in pages of 500 and hands each to into.
func planList(ctx context.Context, a *Applier, gvr schema.GroupVersionResource, into func(*unstructured.Unstructured) error) error {
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := a.Dynamic.Resource(gvr).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list %s: %w", gvr.GroupResource(), err)
		}
		for i := range list.Items {
			if err := into(&list.Items[i]); err != nil {
				return fmt.Errorf("decode %s %s: %w", gvr.GroupResource(), list.Items[i].GetName(), err)
			}
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return nil
		}
	}
}

// planAppend decodes an object into a T appended to list.
func planAppend[T any](list *[]T) func(*unstructured.Unstructured) error {
	return func(u *unstructured.Unstructured) error {
		var v T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
			return err
		}
		*list = append(*list, v)
		return nil
	}
}

// planScheme defaults the objects the simulation decodes as the API server defaults them
// (replicas, a pod's requests from its limits, its scheduler name...).
var planScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	defaults.Register(s)
	return s
}()

// simWorkload is a simulated workload and its outcome.
type simWorkload struct {
	key   workloadKey
	order int
	// pods is how many pods it wants; fit and pending count the outcome, reason is the
	// message of its first pending pod.
	pods, fit, pending int
	reason             string
	// ordered is set for an OrderedReady StatefulSet: its controller creates a pod only
	// once the previous one runs, so a pending pod keeps the later ones from existing.
	ordered, blocked bool
}

// simPod is a pod waiting in the simulated queue.
type simPod struct {
	pod *corev1.Pod
	// w is the simulated workload the pod belongs to (nil: a pending pod of the site that
	// belongs to none).
	w        *simWorkload
	existing bool
	index    int
}

// simVolumes serves the scheduler's VolumeBinding filter the site's claims and volumes,
// with those the revision adds.
type simVolumes struct {
	claims  map[string]*corev1.PersistentVolumeClaim // by namespace/name
	volumes []*corev1.PersistentVolume
}

func (v *simVolumes) Claim(ns, name string) *corev1.PersistentVolumeClaim {
	return v.claims[ns+"/"+name]
}

func (v *simVolumes) Volume(name string) *corev1.PersistentVolume {
	for _, pv := range v.volumes {
		if pv.Name == name {
			return pv
		}
	}
	return nil
}

func (v *simVolumes) Volumes() []*corev1.PersistentVolume { return v.volumes }

// simulation holds the state of one scheduling simulation.
type simulation struct {
	nodes    []*corev1.Node
	nsLabels map[string]labels.Set
	volumes  *simVolumes
	// priorityClasses are the site's, replaced by the revision's of the same name.
	priorityClasses map[string]*schedulingv1.PriorityClass
	// storageClass is the default StorageClass a new claim without a class gets ("": none).
	storageClass string
	// rsOwner maps a ReplicaSet ("namespace/name") to the Deployment that controls it.
	rsOwner  map[string]string
	warnings []string
}

// simulateScheduling runs flotilla's scheduler (scheduler.Schedule) on the site with the
// changes of a plan, without a cluster, as the real scheduler would place the pods once the
// revision is applied:
//
//   - The snapshot counts the site's bound, non-terminal pods on their Nodes, as the
//     scheduler's cache does; the pods of the workloads the plan creates, updates or deletes
//     (matched by their controller: Deployment -> ReplicaSet -> Pod, StatefulSet, DaemonSet,
//     Job or ReplicaSet -> Pod) are taken away first, except that an update that does not
//     change the pod template keeps its pods up to the new count.
//   - The workloads' pods are built as their controllers build them (replicas, a
//     StatefulSet's ordinals and claims, one pod per eligible node pinned by name for a
//     DaemonSet, min(parallelism, completions) for a Job), then defaulted and given the
//     priority of their PriorityClass as the API would.
//   - The site's pending pods and the new ones are placed in the scheduler's queue order
//     (higher priority first; the site's pending pods, then the revision's in apply order
//     and pod index), each placement counted for the next, ties of score broken toward the
//     first node. A pod that fits no node keeps the scheduler's message.
//
// revision holds every valid object of the revision: its Namespaces (their labels),
// PriorityClasses, StorageClasses, claims and volumes count as applied. The warnings name
// what was not simulated.
func simulateScheduling(site *schedulingSite, revision []*unstructured.Unstructured, changes []schedulingChange) (*SchedulingReport, []string) {
	s := newSimulation(site, revision)

	changed := map[workloadKey]*schedulingChange{}
	for i := range changes {
		c := &changes[i]
		changed[workloadKey{c.Obj.GetKind(), c.Obj.GetNamespace(), c.Obj.GetName()}] = c
	}

	// The pods each simulated workload wants, built from the applied object.
	var workloads []*simWorkload
	wanted := map[workloadKey][]*corev1.Pod{}
	byKey := map[workloadKey]*simWorkload{}
	for i, c := range changes {
		if c.Action != PlanCreate && c.Action != PlanUpdate {
			continue
		}
		w, pods, ok := s.podsOf(c.Obj, i)
		if !ok {
			continue
		}
		workloads = append(workloads, w)
		wanted[w.key], byKey[w.key] = pods, w
	}

	// The site's pods: counted where they are bound, queued when pending, taken away when
	// their workload changes (kept when it only scales).
	infos := map[string]*scheduler.NodeInfo{}
	for _, n := range s.nodes {
		infos[n.Name] = scheduler.NewNodeInfo(n)
	}
	before := map[string]NodeResources{}
	kept := map[workloadKey][]*corev1.Pod{}
	var queue []*simPod
	for i := range site.Pods {
		pod := &site.Pods[i]
		bound := planCounted(pod)
		var pi *scheduler.PodInfo
		if bound && infos[pod.Spec.NodeName] != nil {
			pi = scheduler.NewPodInfo(pod)
			r := before[pod.Spec.NodeName]
			r.CPUMillis += pi.Requests.MilliCPU
			r.MemoryBytes += pi.Requests.Memory
			r.Pods++
			before[pod.Spec.NodeName] = r
		}
		if key, ok := s.ownerOf(pod); ok {
			if c := changed[key]; c != nil {
				if c.Action == PlanUpdate && !c.TemplateChanged && byKey[key] != nil && planAlive(pod) {
					kept[key] = append(kept[key], pod)
				}
				continue
			}
		}
		switch {
		case pi != nil:
			infos[pod.Spec.NodeName].AddPod(pi)
		case planResponsible(pod):
			queue = append(queue, &simPod{pod: pod, existing: true})
		}
	}

	// A workload that only scales keeps its running pods in the places they fill (see
	// keptPods); the other places get a new pod.
	var fresh []*simPod
	for _, w := range workloads {
		pods := wanted[w.key]
		for i, pod := range keptPods(w.key.Kind, pods, kept[w.key]) {
			switch {
			case pod == nil:
				fresh = append(fresh, &simPod{pod: pods[i], w: w, index: i})
			case planCounted(pod) && infos[pod.Spec.NodeName] != nil:
				infos[pod.Spec.NodeName].AddPod(scheduler.NewPodInfo(pod))
				w.fit++
			case planResponsible(pod):
				queue = append(queue, &simPod{pod: pod, w: w, existing: true, index: i})
			default:
				w.pending++
				w.reason = planFirst(w.reason, "the pod is not scheduled (scheduling gates, or bound to a node that is gone)")
			}
		}
	}

	var list []*scheduler.NodeInfo
	for _, n := range s.nodes {
		list = append(list, infos[n.Name])
	}
	snap := scheduler.NewSnapshot(list...)
	snap.NamespaceLabels = func(ns string) labels.Set { return s.nsLabels[ns] }
	snap.Volumes = s.volumes

	// A pod whose spec names its node is bound when it is created: no scheduling.
	var scheduled []*simPod
	for _, sp := range fresh {
		if node := sp.pod.Spec.NodeName; node != "" {
			if snap.AddPod(node, scheduler.NewPodInfo(sp.pod)) {
				sp.w.fit++
			} else {
				sp.w.pending++
				sp.w.reason = planFirst(sp.w.reason, fmt.Sprintf("spec.nodeName %q is not a Node of the site", node))
			}
			continue
		}
		scheduled = append(scheduled, sp)
	}
	queue = append(queue, scheduled...)
	sort.SliceStable(queue, func(i, j int) bool { return planQueueLess(queue[i], queue[j]) })

	keepFirst := func(int) int { return 1 } // of equal scores, the first node found wins
	start := 0
	for _, sp := range queue {
		if sp.w != nil && sp.w.blocked {
			sp.w.pending++
			continue
		}
		pi := scheduler.NewPodInfo(sp.pod)
		d, examined := scheduler.Schedule(pi, snap, start, 0, keepFirst)
		if n := len(snap.Nodes); n > 0 {
			start = (start + examined) % n
		}
		if d.Fit != nil {
			if sp.w != nil {
				sp.w.pending++
				sp.w.reason = planFirst(sp.w.reason, d.Fit.Error())
				sp.w.blocked = sp.w.ordered
			}
			continue
		}
		placed := sp.pod.DeepCopy()
		placed.Spec.NodeName = d.Node
		pi.Pod = placed
		snap.AddPod(d.Node, pi)
		if sp.w != nil {
			sp.w.fit++
		}
	}

	rep := &SchedulingReport{Nodes: len(s.nodes), Workloads: []WorkloadScheduling{}, Capacity: []NodeCapacity{}}
	for _, w := range workloads {
		rep.Workloads = append(rep.Workloads, WorkloadScheduling{Kind: w.key.Kind, Namespace: w.key.Namespace, Name: w.key.Name,
			Pods: w.pods, Fit: w.fit, Pending: w.pending, Reason: w.reason})
		rep.Pending += w.pending
	}
	for _, n := range s.nodes {
		ni := snap.Get(n.Name)
		rep.Capacity = append(rep.Capacity, NodeCapacity{
			Name:        n.Name,
			Allocatable: NodeResources{CPUMillis: ni.Allocatable.MilliCPU, MemoryBytes: ni.Allocatable.Memory, Pods: ni.Allocatable.Pods},
			Before:      before[n.Name],
			After:       NodeResources{CPUMillis: ni.Requested.MilliCPU, MemoryBytes: ni.Requested.Memory, Pods: int64(len(ni.Pods))},
		})
	}
	return rep, s.warnings
}

// planQueueLess is the scheduler queue's order (priority, then time queued): higher
// priority first; at equal priority the site's pending pods (queued before the revision's,
// oldest first), then the revision's by apply order and pod index.
func planQueueLess(a, b *simPod) bool {
	pa, pb := planPriority(a.pod), planPriority(b.pod)
	if pa != pb {
		return pa > pb
	}
	if a.existing != b.existing {
		return a.existing
	}
	if a.existing {
		if !a.pod.CreationTimestamp.Equal(&b.pod.CreationTimestamp) {
			return a.pod.CreationTimestamp.Before(&b.pod.CreationTimestamp)
		}
		return a.pod.Namespace+"/"+a.pod.Name < b.pod.Namespace+"/"+b.pod.Name
	}
	if a.w.order != b.w.order {
		return a.w.order < b.w.order
	}
	return a.index < b.index
}

func planPriority(pod *corev1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// planCounted reports whether the scheduler's cache counts pod on its node: bound and not
// finished.
func planCounted(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// planResponsible reports whether the scheduler would try to place pod: pending, for the
// default scheduler, not being deleted, not gated.
func planResponsible(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.Spec.SchedulerName == scheduler.DefaultSchedulerName &&
		pod.DeletionTimestamp == nil && len(pod.Spec.SchedulingGates) == 0 &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// planAlive reports whether a pod of a workload that only scales may stay: not finished,
// not being deleted.
func planAlive(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// planKeepOrder orders the running pods of a workload that only scales as its controller
// keeps them when it scales down: bound pods first, then the oldest.
func planKeepOrder(pods []*corev1.Pod) []*corev1.Pod {
	out := slices.Clone(pods)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.Spec.NodeName == "") != (b.Spec.NodeName == "") {
			return a.Spec.NodeName != ""
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	return out
}

// keptPods returns, for each pod a workload that only scales wants, the running pod of the
// site that stays in its place (nil: a new pod is created). A StatefulSet's pod keeps its
// ordinal (its name) and a DaemonSet's pod its node; the other kinds keep running pods up to
// the new count, in the order their controllers keep them (see planKeepOrder).
func keptPods(kind string, wanted, running []*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(wanted))
	place := func(pod *corev1.Pod) string { return pod.Name }
	switch kind {
	case "DaemonSet":
		place = daemonset.TargetNode
	case "StatefulSet":
	default:
		for i, pod := range planKeepOrder(running) {
			if i < len(out) {
				out[i] = pod
			}
		}
		return out
	}
	index := map[string]int{}
	for i, pod := range wanted {
		index[place(pod)] = i
	}
	for _, pod := range planKeepOrder(running) {
		if i, ok := index[place(pod)]; ok && out[i] == nil {
			out[i] = pod
		}
	}
	return out
}

// planFirst keeps the first reason given.
func planFirst(reason, next string) string {
	if reason != "" {
		return reason
	}
	return next
}

// ownerOf returns the simulated workload kind a pod of the site belongs to: its controller,
// or the Deployment of its ReplicaSet; a pod without a controller is its own.
func (s *simulation) ownerOf(pod *corev1.Pod) (workloadKey, bool) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return workloadKey{"Pod", pod.Namespace, pod.Name}, true
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || !planWorkloadKinds[schema.GroupKind{Group: gv.Group, Kind: ref.Kind}] {
		return workloadKey{}, false
	}
	if ref.Kind == "ReplicaSet" {
		if d, ok := s.rsOwner[pod.Namespace+"/"+ref.Name]; ok {
			return workloadKey{"Deployment", pod.Namespace, d}, true
		}
	}
	return workloadKey{ref.Kind, pod.Namespace, ref.Name}, true
}

// newSimulation indexes the site, with the revision's Namespaces, PriorityClasses,
// StorageClasses, claims and volumes counted as applied.
func newSimulation(site *schedulingSite, revision []*unstructured.Unstructured) *simulation {
	s := &simulation{nsLabels: map[string]labels.Set{}, priorityClasses: map[string]*schedulingv1.PriorityClass{},
		rsOwner: map[string]string{}, volumes: &simVolumes{claims: map[string]*corev1.PersistentVolumeClaim{}}}
	for i := range site.Nodes {
		s.nodes = append(s.nodes, &site.Nodes[i])
	}
	sort.Slice(s.nodes, func(i, j int) bool { return s.nodes[i].Name < s.nodes[j].Name })
	for _, ns := range site.Namespaces {
		s.nsLabels[ns.Name] = ns.Labels
	}
	for i := range site.PriorityClasses {
		s.priorityClasses[site.PriorityClasses[i].Name] = &site.PriorityClasses[i]
	}
	storageClasses := map[string]*storagev1.StorageClass{}
	for i := range site.StorageClasses {
		storageClasses[site.StorageClasses[i].Name] = &site.StorageClasses[i]
	}
	for i := range site.Claims {
		c := &site.Claims[i]
		s.volumes.claims[c.Namespace+"/"+c.Name] = c
	}
	siteVolumes := map[string]bool{}
	for i := range site.Volumes {
		s.volumes.volumes = append(s.volumes.volumes, &site.Volumes[i])
		siteVolumes[site.Volumes[i].Name] = true
	}
	for _, rs := range site.ReplicaSets {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.Kind == "Deployment" {
			s.rsOwner[rs.Namespace+"/"+rs.Name] = ref.Name
		}
	}

	var newClaims []*corev1.PersistentVolumeClaim
	for _, u := range revision {
		switch u.GroupVersionKind().GroupKind() {
		case schema.GroupKind{Kind: "Namespace"}:
			l := labels.Set{}
			for k, v := range u.GetLabels() {
				l[k] = v
			}
			l[corev1.LabelMetadataName] = u.GetName() // set by the API on every Namespace
			s.nsLabels[u.GetName()] = l
		case schema.GroupKind{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:
			var pc schedulingv1.PriorityClass
			if planDecode(u, &pc) == nil {
				s.priorityClasses[pc.Name] = &pc
			}
		case schema.GroupKind{Group: "storage.k8s.io", Kind: "StorageClass"}:
			var sc storagev1.StorageClass
			if planDecode(u, &sc) == nil {
				storageClasses[sc.Name] = &sc
			}
		case schema.GroupKind{Kind: "PersistentVolumeClaim"}:
			var c corev1.PersistentVolumeClaim
			if planDecode(u, &c) == nil && s.volumes.claims[c.Namespace+"/"+c.Name] == nil {
				newClaims = append(newClaims, &c)
			}
		case schema.GroupKind{Kind: "PersistentVolume"}:
			var pv corev1.PersistentVolume
			if planDecode(u, &pv) == nil && !siteVolumes[pv.Name] {
				pv.Status.Phase = corev1.VolumeAvailable // as a new volume becomes
				if pv.Spec.ClaimRef != nil {
					pv.Status.Phase = corev1.VolumeBound
				}
				s.volumes.volumes = append(s.volumes.volumes, &pv)
			}
		}
	}
	// The default StorageClass, as the DefaultStorageClass admission picks it: the newest.
	var def *storagev1.StorageClass
	for _, sc := range storageClasses {
		if sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" &&
			sc.Annotations["storageclass.beta.kubernetes.io/is-default-class"] != "true" {
			continue
		}
		if def == nil || sc.CreationTimestamp.After(def.CreationTimestamp.Time) ||
			(sc.CreationTimestamp.Equal(&def.CreationTimestamp) && sc.Name < def.Name) {
			def = sc
		}
	}
	if def != nil {
		s.storageClass = def.Name
	}
	for _, c := range newClaims {
		s.addClaim(c)
	}
	return s
}

// addClaim adds a claim the revision (or a workload's controller) creates: defaulted with
// the default StorageClass, and, unless its binding waits for a consumer, bound as the
// volumebinding controller would bind it to an Available volume that fits.
func (s *simulation) addClaim(c *corev1.PersistentVolumeClaim) {
	key := c.Namespace + "/" + c.Name
	if s.volumes.claims[key] != nil {
		return
	}
	if c.Spec.StorageClassName == nil && s.storageClass != "" && c.Annotations[corev1.BetaStorageClassAnnotation] == "" {
		c.Spec.StorageClassName = new(s.storageClass)
	}
	if c.Spec.VolumeName == "" && !volumebinding.DelayBinding(c) {
		if pv := volumebinding.FindBestMatch(c, s.volumes.volumes, nil); pv != nil {
			c.Spec.VolumeName = pv.Name
			bound := pv.DeepCopy()
			bound.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: c.Namespace, Name: c.Name, UID: c.UID}
			bound.Status.Phase = corev1.VolumeBound
			for i, v := range s.volumes.volumes {
				if v == pv {
					s.volumes.volumes[i] = bound
				}
			}
		}
	}
	s.volumes.claims[key] = c
}

// planDecode decodes u into obj and defaults it as the API does.
func planDecode(u *unstructured.Unstructured, obj runtime.Object) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return err
	}
	planScheme.Default(obj)
	return nil
}

// podsOf builds the pods the workload u wants, as its controller creates them. ok is false
// when the workload is not simulated (a warning says why).
func (s *simulation) podsOf(u *unstructured.Unstructured, order int) (*simWorkload, []*corev1.Pod, bool) {
	w := &simWorkload{key: workloadKey{u.GetKind(), u.GetNamespace(), u.GetName()}, order: order}
	ref := PlanItem{Kind: w.key.Kind, Namespace: w.key.Namespace, Name: w.key.Name}.Ref()
	var (
		pods []*corev1.Pod
		err  error
	)
	newPod := func(name string, t *corev1.PodTemplateSpec) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: *t.Spec.DeepCopy()}
		pod.Name, pod.Namespace = name, u.GetNamespace()
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		return pod
	}
	switch w.key.Kind {
	case "Deployment":
		var d appsv1.Deployment
		if err = planDecode(u, &d); err == nil {
			for i := range int(planReplicas(d.Spec.Replicas)) {
				pods = append(pods, newPod(fmt.Sprintf("%s-%d", d.Name, i), &d.Spec.Template))
			}
		}
	case "ReplicaSet":
		var rs appsv1.ReplicaSet
		if err = planDecode(u, &rs); err == nil {
			for i := range int(planReplicas(rs.Spec.Replicas)) {
				pods = append(pods, newPod(fmt.Sprintf("%s-%d", rs.Name, i), &rs.Spec.Template))
			}
		}
	case "StatefulSet":
		var ss appsv1.StatefulSet
		if err = planDecode(u, &ss); err == nil {
			w.ordered = ss.Spec.PodManagementPolicy != appsv1.ParallelPodManagement
			first := int32(0)
			if ss.Spec.Ordinals != nil {
				first = ss.Spec.Ordinals.Start
			}
			for i := range planReplicas(ss.Spec.Replicas) {
				ord := first + i
				pod := newPod(fmt.Sprintf("%s-%d", ss.Name, ord), &ss.Spec.Template)
				pod.Labels[appsv1.StatefulSetPodNameLabel] = pod.Name
				pod.Labels[appsv1.PodIndexLabel] = strconv.Itoa(int(ord))
				// The claims of volumeClaimTemplates, <template>-<set>-<ordinal>, as the
				// controller creates them and mounts them in place of a same-named volume.
				for _, t := range ss.Spec.VolumeClaimTemplates {
					claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: t.Name + "-" + pod.Name, Namespace: pod.Namespace,
						Labels: t.Labels, Annotations: t.Annotations}, Spec: *t.Spec.DeepCopy()}
					s.addClaim(claim)
					vol := corev1.Volume{Name: t.Name, VolumeSource: corev1.VolumeSource{
						PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name}}}
					if j := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == t.Name }); j >= 0 {
						pod.Spec.Volumes[j] = vol
					} else {
						pod.Spec.Volumes = append(pod.Spec.Volumes, vol)
					}
				}
				pods = append(pods, pod)
			}
		}
	case "DaemonSet":
		var ds appsv1.DaemonSet
		if err = planDecode(u, &ds); err == nil {
			for _, n := range s.nodes {
				if run, _ := daemonset.ShouldRun(n, &ds); run {
					pod := daemonset.NewPod(&ds, n.Name, "")
					pod.Name = ds.Name + "-" + n.Name
					pods = append(pods, pod)
				}
			}
		}
	case "Job":
		var job batchv1.Job
		if err = planDecode(u, &job); err == nil && (job.Spec.Suspend == nil || !*job.Spec.Suspend) {
			n := int32(1)
			if job.Spec.Parallelism != nil {
				n = *job.Spec.Parallelism
			}
			if job.Spec.Completions != nil {
				n = min(n, *job.Spec.Completions)
			}
			for i := range n {
				pod := newPod(fmt.Sprintf("%s-%d", job.Name, i), &job.Spec.Template)
				pod.Labels[batchv1.JobNameLabel] = job.Name
				pods = append(pods, pod)
			}
		}
	case "Pod":
		var p corev1.Pod
		if err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err == nil {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, Annotations: p.Annotations},
				Spec: p.Spec}
			if pod.Labels == nil {
				pod.Labels = map[string]string{}
			}
			pods = append(pods, pod)
		}
	default:
		return nil, nil, false
	}
	if err != nil {
		s.warnings = append(s.warnings, fmt.Sprintf("%s: pods not simulated: %v", ref, err))
		return nil, nil, false
	}
	w.pods = len(pods)
	for i, pod := range pods {
		pod.UID = types.UID(fmt.Sprintf("plan/%s/%s/%s/%d", w.key.Kind, w.key.Namespace, w.key.Name, i))
		planScheme.Default(pod)
		if pod.Spec.SchedulerName != scheduler.DefaultSchedulerName {
			s.warnings = append(s.warnings, fmt.Sprintf("%s: pods not simulated: spec.schedulerName %q is not flotilla's scheduler (%s)",
				ref, pod.Spec.SchedulerName, scheduler.DefaultSchedulerName))
			return nil, nil, false
		}
		if msg := s.admitPriority(pod); msg != "" {
			// Admission refuses the pods: none is created.
			w.pending, w.reason = len(pods), "pods refused: "+msg
			return w, nil, true
		}
		if len(pod.Spec.SchedulingGates) > 0 {
			w.pending, w.reason = len(pods), "pods wait for their scheduling gates"
			return w, nil, true
		}
		// The claims of generic ephemeral volumes, <pod>-<volume>, as the controller creates them.
		for i := range pod.Spec.Volumes {
			if v := &pod.Spec.Volumes[i]; v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil {
				t := v.Ephemeral.VolumeClaimTemplate
				s.addClaim(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: volumebinding.EphemeralClaimName(pod, v), Namespace: pod.Namespace,
					Labels: t.Labels, Annotations: t.Annotations}, Spec: *t.Spec.DeepCopy()})
			}
		}
	}
	return w, pods, true
}

func planReplicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return max(*r, 0)
}

// admitPriority sets the pod's priority as the Priority admission plugin does: from the
// PriorityClass it names, else the global default class (lowest value if several), else 0.
// It returns the admission's refusal for a class that does not exist.
func (s *simulation) admitPriority(pod *corev1.Pod) string {
	var pc *schedulingv1.PriorityClass
	if name := pod.Spec.PriorityClassName; name != "" {
		if pc = s.priorityClasses[name]; pc == nil {
			return fmt.Sprintf("no PriorityClass with name %v was found", name)
		}
	} else {
		for _, c := range s.priorityClasses {
			if c.GlobalDefault && (pc == nil || c.Value < pc.Value) {
				pc = c
			}
		}
	}
	prio := int32(0)
	if pc != nil {
		prio = pc.Value
		pod.Spec.PriorityClassName = pc.Name
	}
	pod.Spec.Priority = &prio
	return ""
}
