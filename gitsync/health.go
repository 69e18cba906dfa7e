package gitsync

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// HealthResult is the health of one applied object, as kstatus would compute it.
type HealthResult struct {
	// Status is one of v1alpha1.HealthHealthy, HealthProgressing, HealthDegraded, HealthUnknown.
	Status string
	// Message says why the object is not healthy (empty when healthy).
	Message string
}

// unschedulableGrace is how long an unschedulable Pod counts as progressing before it is
// degraded (kstatus uses the same 15 s window).
const unschedulableGrace = 15 * time.Second

// maxProgressingLines bounds status.progressing.
const maxProgressingLines = 50

func healthy() HealthResult { return HealthResult{Status: v1alpha1.HealthHealthy} }

func progressing(format string, args ...any) HealthResult {
	return HealthResult{Status: v1alpha1.HealthProgressing, Message: fmt.Sprintf(format, args...)}
}

func degraded(format string, args ...any) HealthResult {
	return HealthResult{Status: v1alpha1.HealthDegraded, Message: fmt.Sprintf(format, args...)}
}

// ObjectHealth computes the health of a live object the way kstatus does for Deployment,
// ReplicaSet, StatefulSet, DaemonSet, Job, Pod, Service, PersistentVolumeClaim,
// CustomResourceDefinition, plus Ingress
// (healthy once it has an address, as Argo CD judges it). Other kinds are judged by their
// Ready/Reconciling/Stalled conditions when they have them, healthy otherwise. now is used
// only for the unschedulable-Pod grace period.
func ObjectHealth(u *unstructured.Unstructured, now time.Time) HealthResult {
	if u == nil {
		return HealthResult{Status: v1alpha1.HealthUnknown, Message: "not found"}
	}
	if u.GetDeletionTimestamp() != nil {
		return progressing("being deleted")
	}
	// Every controller records the generation it acted on: until it catches up, the status
	// describes an older spec.
	if og, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); found && og < u.GetGeneration() {
		return progressing("observed generation %d is older than generation %d", og, u.GetGeneration())
	}
	gk := u.GroupVersionKind().GroupKind()
	switch {
	case gk.Group == "apps" && gk.Kind == "Deployment":
		return deploymentHealth(u)
	case gk.Group == "apps" && gk.Kind == "ReplicaSet":
		return replicaSetHealth(u)
	case gk.Group == "apps" && gk.Kind == "StatefulSet":
		return statefulSetHealth(u)
	case gk.Group == "apps" && gk.Kind == "DaemonSet":
		return daemonSetHealth(u)
	case gk.Group == "batch" && gk.Kind == "Job":
		return jobHealth(u)
	case gk.Group == "" && gk.Kind == "Pod":
		return podHealth(u, now)
	case gk.Group == "" && gk.Kind == "Service":
		return serviceHealth(u)
	case gk.Group == "" && gk.Kind == "PersistentVolumeClaim":
		return pvcHealth(u)
	case gk.Group == "networking.k8s.io" && gk.Kind == "Ingress":
		return ingressHealth(u)
	case gk == crdGroupKind:
		return crdHealth(u)
	}
	return genericHealth(u)
}

// crdHealth: a CustomResourceDefinition is healthy once established, degraded when the
// server refused its names.
func crdHealth(u *unstructured.Unstructured) HealthResult {
	established, why, refused := crdEstablished(u)
	switch {
	case established:
		return healthy()
	case refused:
		return degraded("%s", why)
	case why != "":
		return progressing("not established: %s", why)
	}
	return progressing("not established yet")
}

func num(u *unstructured.Unstructured, fields ...string) int64 {
	v, _, _ := unstructured.NestedInt64(u.Object, fields...)
	return v
}

// specReplicas is spec.replicas, 1 when unset (the API default).
func specReplicas(u *unstructured.Unstructured) int64 {
	v, found, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
	if !found {
		return 1
	}
	return v
}

// condition returns the status, reason and message of the condition of type typ.
func condition(u *unstructured.Unstructured, typ string) (status, reason, message string, found bool) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != typ {
			continue
		}
		s, _ := m["status"].(string)
		r, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		return s, r, msg, true
	}
	return "", "", "", false
}

func deploymentHealth(u *unstructured.Unstructured) HealthResult {
	want := specReplicas(u)
	if _, reason, msg, ok := condition(u, "Progressing"); ok && reason == "ProgressDeadlineExceeded" {
		return degraded("progress deadline exceeded: %s", msg)
	}
	if paused, _, _ := unstructured.NestedBool(u.Object, "spec", "paused"); paused {
		return healthy()
	}
	if _, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); !found {
		return progressing("not yet observed by the deployment controller")
	}
	updated, replicas := num(u, "status", "updatedReplicas"), num(u, "status", "replicas")
	available, ready := num(u, "status", "availableReplicas"), num(u, "status", "readyReplicas")
	switch {
	case updated < want:
		return progressing("%d of %d replicas updated", updated, want)
	case replicas > updated:
		return progressing("%d old replicas pending termination", replicas-updated)
	case available < want:
		return progressing("%d of %d replicas available", available, want)
	case ready < want:
		return progressing("%d of %d replicas ready", ready, want)
	}
	if s, _, msg, ok := condition(u, "Available"); ok && s == "False" {
		return progressing("not available: %s", msg)
	}
	return healthy()
}

func replicaSetHealth(u *unstructured.Unstructured) HealthResult {
	want := specReplicas(u)
	if s, _, msg, ok := condition(u, "ReplicaFailure"); ok && s == "True" {
		return progressing("replica failure: %s", msg)
	}
	labeled, available, ready := num(u, "status", "fullyLabeledReplicas"), num(u, "status", "availableReplicas"), num(u, "status", "readyReplicas")
	switch {
	case labeled < want:
		return progressing("%d of %d replicas labeled", labeled, want)
	case available < want:
		return progressing("%d of %d replicas available", available, want)
	case ready < want:
		return progressing("%d of %d replicas ready", ready, want)
	case num(u, "status", "replicas") > want:
		return progressing("%d replicas pending termination", num(u, "status", "replicas")-want)
	}
	return healthy()
}

func statefulSetHealth(u *unstructured.Unstructured) HealthResult {
	if t, _, _ := unstructured.NestedString(u.Object, "spec", "updateStrategy", "type"); t == "OnDelete" {
		return healthy()
	}
	if _, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); !found {
		return progressing("not yet observed by the statefulset controller")
	}
	want := specReplicas(u)
	replicas, ready := num(u, "status", "replicas"), num(u, "status", "readyReplicas")
	switch {
	case replicas < want:
		return progressing("%d of %d replicas created", replicas, want)
	case ready < want:
		return progressing("%d of %d replicas ready", ready, want)
	}
	partition, found, _ := unstructured.NestedInt64(u.Object, "spec", "updateStrategy", "rollingUpdate", "partition")
	if found && partition > 0 {
		if updated := num(u, "status", "updatedReplicas"); updated < want-partition {
			return progressing("%d of %d replicas above partition %d updated", updated, want-partition, partition)
		}
		return healthy()
	}
	cur, _, _ := unstructured.NestedString(u.Object, "status", "currentRevision")
	upd, _, _ := unstructured.NestedString(u.Object, "status", "updateRevision")
	if cur != upd {
		return progressing("rolling out revision %s: %d of %d replicas updated", upd, num(u, "status", "updatedReplicas"), want)
	}
	return healthy()
}

func daemonSetHealth(u *unstructured.Unstructured) HealthResult {
	desired, found, _ := unstructured.NestedInt64(u.Object, "status", "desiredNumberScheduled")
	if !found {
		return progressing("not yet observed by the daemonset controller")
	}
	scheduled, updated := num(u, "status", "currentNumberScheduled"), num(u, "status", "updatedNumberScheduled")
	available, ready := num(u, "status", "numberAvailable"), num(u, "status", "numberReady")
	switch {
	case scheduled < desired:
		return progressing("%d of %d pods scheduled", scheduled, desired)
	case updated < desired:
		return progressing("%d of %d pods updated", updated, desired)
	case available < desired:
		return progressing("%d of %d pods available", available, desired)
	case ready < desired:
		return progressing("%d of %d pods ready", ready, desired)
	}
	return healthy()
}

func jobHealth(u *unstructured.Unstructured) HealthResult {
	if s, _, _, ok := condition(u, "Complete"); ok && s == "True" {
		return healthy()
	}
	if s, reason, msg, ok := condition(u, "Failed"); ok && s == "True" {
		return degraded("failed (%s): %s", reason, msg)
	}
	if _, found, _ := unstructured.NestedString(u.Object, "status", "startTime"); !found {
		return progressing("not started")
	}
	return progressing("running: %d active, %d succeeded, %d failed",
		num(u, "status", "active"), num(u, "status", "succeeded"), num(u, "status", "failed"))
}

// crashLooping names the containers waiting in CrashLoopBackOff or failing to pull.
func crashLooping(u *unstructured.Unstructured) []string {
	var out []string
	for _, field := range []string{"initContainerStatuses", "containerStatuses"} {
		list, _, _ := unstructured.NestedSlice(u.Object, "status", field)
		for _, c := range list {
			m, _ := c.(map[string]any)
			reason, _, _ := unstructured.NestedString(m, "state", "waiting", "reason")
			if reason == "CrashLoopBackOff" || reason == "ImagePullBackOff" || reason == "ErrImagePull" || reason == "InvalidImageName" {
				name, _ := m["name"].(string)
				out = append(out, name+" ("+reason+")")
			}
		}
	}
	return out
}

func podHealth(u *unstructured.Unstructured, now time.Time) HealthResult {
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	switch phase {
	case "Succeeded":
		return healthy()
	case "Failed":
		return degraded("pod failed")
	case "Running":
		if s, _, _, _ := condition(u, "Ready"); s == "True" {
			return healthy()
		}
		if bad := crashLooping(u); len(bad) > 0 {
			return degraded("containers failing: %s", strings.Join(bad, ", "))
		}
		return progressing("running but not ready")
	case "Pending":
		if bad := crashLooping(u); len(bad) > 0 {
			return degraded("containers failing: %s", strings.Join(bad, ", "))
		}
		if s, reason, msg, ok := condition(u, "PodScheduled"); ok && s == "False" && reason == "Unschedulable" {
			if now.Sub(u.GetCreationTimestamp().Time) > unschedulableGrace {
				return degraded("unschedulable: %s", msg)
			}
			return progressing("not scheduled yet: %s", msg)
		}
		return progressing("pending")
	}
	return progressing("phase %q", phase)
}

func serviceHealth(u *unstructured.Unstructured) HealthResult {
	if t, _, _ := unstructured.NestedString(u.Object, "spec", "type"); t != "LoadBalancer" {
		return healthy()
	}
	if ip, _, _ := unstructured.NestedString(u.Object, "spec", "clusterIP"); ip == "" {
		return progressing("cluster IP not assigned")
	}
	if ing, _, _ := unstructured.NestedSlice(u.Object, "status", "loadBalancer", "ingress"); len(ing) == 0 {
		return progressing("load balancer address not assigned")
	}
	return healthy()
}

func ingressHealth(u *unstructured.Unstructured) HealthResult {
	if ing, _, _ := unstructured.NestedSlice(u.Object, "status", "loadBalancer", "ingress"); len(ing) == 0 {
		return progressing("no address assigned by an ingress proxy yet")
	}
	return healthy()
}

func pvcHealth(u *unstructured.Unstructured) HealthResult {
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	switch phase {
	case "Bound":
		return healthy()
	case "Lost":
		return degraded("claim lost its volume")
	case "":
		return progressing("not bound")
	}
	return progressing("not bound: phase %s", phase)
}

// genericHealth reads the kstatus conditions every well-behaved kind (GitSource among them)
// reports.
func genericHealth(u *unstructured.Unstructured) HealthResult {
	if s, reason, msg, ok := condition(u, "Stalled"); ok && s == "True" {
		return degraded("stalled (%s): %s", reason, msg)
	}
	if s, reason, msg, ok := condition(u, "Reconciling"); ok && s == "True" {
		return progressing("reconciling (%s): %s", reason, msg)
	}
	if s, reason, msg, ok := condition(u, "Ready"); ok && s != "True" {
		return progressing("not ready (%s): %s", reason, msg)
	}
	return healthy()
}

// SummarizeHealth folds per-object results (keyed by "Kind namespace/name") into the
// source's health: Degraded if any object is, else Progressing if any is, else Unknown if
// any is, else Healthy; lines lists the unhealthy objects, sorted, at most 50.
func SummarizeHealth(results map[string]HealthResult) (summary string, lines []string) {
	rank := map[string]int{v1alpha1.HealthHealthy: 0, v1alpha1.HealthUnknown: 1, v1alpha1.HealthProgressing: 2, v1alpha1.HealthDegraded: 3}
	summary = v1alpha1.HealthHealthy
	for id, r := range results {
		if r.Status == v1alpha1.HealthHealthy {
			continue
		}
		if rank[r.Status] > rank[summary] {
			summary = r.Status
		}
		lines = append(lines, id+": "+r.Message)
	}
	slices.Sort(lines)
	if len(lines) > maxProgressingLines {
		more := len(lines) - maxProgressingLines
		lines = append(lines[:maxProgressingLines], fmt.Sprintf("... and %d more", more))
	}
	return summary, lines
}
