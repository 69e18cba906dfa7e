package gitsync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// Safe delivery: spec.wait and spec.rollback.
//
// With spec.wait (or spec.rollback.enabled) a revision counts as delivered only once every
// object it applied is healthy: Ready stays False (reason Progressing) until then. The
// health timeout counts from status.lastAppliedTime, the moment the revision was first
// applied, so that neither a restart nor a change of leader gives a bad revision more time.
// Past it, a source with spec.rollback re-applies status.lastHealthyRevision and records
// status.rolledBack; one without says HealthCheckFailed and leaves the revision applied.

// Condition and event reasons of safe delivery.
const (
	// ReasonRolledBack (Ready False, and a Warning event): the revision applied was not
	// healthy in time and the last healthy one was applied again.
	ReasonRolledBack = "RolledBack"
	// ReasonHealthCheckFailed (Ready False): the revision applied was not healthy in time
	// and there is no rollback (not enabled, or no earlier healthy revision).
	ReasonHealthCheckFailed = "HealthCheckFailed"
)

// waits says whether Ready waits for the applied objects' health.
func waits(gs *v1alpha1.GitSource) bool {
	return gs.Spec.Wait || rollbackEnabled(gs)
}

func rollbackEnabled(gs *v1alpha1.GitSource) bool {
	return gs.Spec.Rollback != nil && gs.Spec.Rollback.Enabled
}

// healthTimeout is how long an applied revision has to become healthy.
func healthTimeout(gs *v1alpha1.GitSource) time.Duration {
	if r := gs.Spec.Rollback; r != nil && r.HealthTimeout != nil && r.HealthTimeout.Duration > 0 {
		return r.HealthTimeout.Duration
	}
	return v1alpha1.DefaultHealthTimeout
}

// firstUnhealthy names the object that best explains why the source is not healthy:
// the first degraded one, else the first progressing or unknown one, as
// "Kind namespace/name: why" ("" when all are healthy).
func firstUnhealthy(results map[string]HealthResult) string {
	keys := make([]string, 0, len(results))
	for k := range results {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	first := ""
	for _, k := range keys {
		r := results[k]
		switch {
		case r.Status == v1alpha1.HealthDegraded:
			return k + ": " + r.Message
		case r.Status != v1alpha1.HealthHealthy && first == "":
			first = k + ": " + r.Message
		}
	}
	return first
}

// healthExpired says whether the revision applied (st.LastAppliedRevision) is past its
// health timeout without being healthy, for a source that waits for health.
func healthExpired(gs *v1alpha1.GitSource, st *v1alpha1.GitSourceStatus, ss *sourceState, now time.Time) bool {
	if !waits(gs) || st.LastAppliedRevision == "" || st.LastAppliedTime == nil || ss.healthy == nil {
		return false
	}
	if s, _ := SummarizeHealth(ss.healthy); s == v1alpha1.HealthHealthy {
		return false
	}
	return !now.Before(st.LastAppliedTime.Add(healthTimeout(gs)))
}

// rollbackDue says whether the next full round must roll the applied revision back: it is
// past its health timeout, rollback is enabled, and there is an earlier healthy revision
// to go back to.
func rollbackDue(gs *v1alpha1.GitSource, st *v1alpha1.GitSourceStatus, ss *sourceState, now time.Time) bool {
	return rollbackEnabled(gs) && st.RolledBack == nil && st.LastHealthyRevision != "" &&
		st.LastHealthyRevision != st.LastAppliedRevision && healthExpired(gs, st, ss, now)
}

// settleHealth updates what depends on the health of the applied objects once it is known
// (after an apply, or a health poll): status.lastHealthyRevision, and for a source that
// waits for health its Ready condition. It returns whether a rollback is due.
func (c *Controller) settleHealth(gs *v1alpha1.GitSource, st *v1alpha1.GitSourceStatus, ss *sourceState, now time.Time) bool {
	if st.LastAppliedRevision == "" || ss.healthy == nil {
		return false
	}
	gen := gs.Generation
	set := func(status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: status,
			Reason: reason, Message: truncate(msg), ObservedGeneration: gen})
	}
	ready := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	// Ready says something else when the last round failed (a fetch, a render...) or
	// waits for a dependency: that stays, only what follows from health changes.
	owned := ready == nil || slices.Contains([]string{ReasonSucceeded, ReasonProgressing, ReasonHealthCheckFailed, ReasonRolledBack}, ready.Reason)
	if !owned {
		set = func(metav1.ConditionStatus, string, string) {}
	}
	summary, lines := SummarizeHealth(ss.healthy)
	// HealthySince: when the revision applied became healthy (a time from before it was
	// applied is an earlier revision's).
	if summary != v1alpha1.HealthHealthy {
		st.HealthySince = nil
	} else if st.HealthySince == nil || (st.LastAppliedTime != nil && st.HealthySince.Before(st.LastAppliedTime)) {
		st.HealthySince = &metav1.Time{Time: now}
	}
	if st.RolledBack != nil {
		// Ready stays False, saying which revision was rolled back, until a new commit.
		set(metav1.ConditionFalse, ReasonRolledBack, rolledBackMessage(st.RolledBack))
		if summary == v1alpha1.HealthHealthy && st.LastAppliedRevision == st.RolledBack.To {
			st.LastHealthyRevision = st.LastAppliedRevision
		}
		return false
	}
	if summary == v1alpha1.HealthHealthy {
		if st.LastHealthyRevision != st.LastAppliedRevision {
			c.log.WithFields(map[string]any{"source": gs.Namespace + "." + gs.Name, "revision": st.LastAppliedRevision}).Info("revision healthy")
		}
		st.LastHealthyRevision = st.LastAppliedRevision
		if waits(gs) && ready != nil && ready.Reason != ReasonSucceeded {
			set(metav1.ConditionTrue, ReasonSucceeded, "Applied revision: "+st.LastAppliedRevision)
		}
		return false
	}
	if !waits(gs) {
		return false
	}
	first := firstUnhealthy(ss.healthy)
	if !healthExpired(gs, st, ss, now) {
		deadline := st.LastAppliedTime.Add(healthTimeout(gs)).UTC().Format(time.RFC3339)
		set(metav1.ConditionFalse, ReasonProgressing, fmt.Sprintf("Applied revision %s, waiting until %s for %d object(s) to become healthy: %s",
			st.LastAppliedRevision, deadline, len(lines), first))
		return false
	}
	if rollbackDue(gs, st, ss, now) {
		return true
	}
	msg := fmt.Sprintf("Revision %s not healthy within %s: %s", st.LastAppliedRevision, healthTimeout(gs), first)
	switch {
	case rollbackEnabled(gs) && st.LastHealthyRevision == "":
		msg += "; no earlier revision was healthy, so there is nothing to roll back to"
	case !rollbackEnabled(gs):
		msg += "; set spec.rollback.enabled to re-apply the last healthy revision (" + orNone(st.LastHealthyRevision) + ") in such a case"
	}
	if owned && (ready == nil || ready.Reason != ReasonHealthCheckFailed) {
		c.event(gs, corev1.EventTypeWarning, ReasonHealthCheckFailed, "%s", truncate(msg))
	}
	set(metav1.ConditionFalse, ReasonHealthCheckFailed, msg)
	return false
}

func orNone(s string) string {
	if s == "" {
		return "none yet"
	}
	return s
}

// rolledBackMessage is the Ready message of a rolled-back source.
func rolledBackMessage(rb *v1alpha1.GitSourceRollback) string {
	return fmt.Sprintf("Revision %s rolled back to %s: %s. A new commit is applied normally.", rb.Revision, rb.To, rb.Reason)
}

// revisionCommit is the commit SHA-1 of a revision "<ref>@sha1:<commit>" or "sha1:<commit>".
func revisionCommit(rev string) (string, error) {
	i := strings.LastIndex(rev, "sha1:")
	if i < 0 || !commitRE.MatchString(rev[i+len("sha1:"):]) {
		return "", fmt.Errorf("revision %q names no commit", rev)
	}
	return rev[i+len("sha1:"):], nil
}

// ensureCommit makes sure the commit of revision is in the source's cache (a branch or tag
// is fetched at depth 1, and a new leader starts with an empty cache), fetching the
// repository's branches when it is not, and returns the commit.
func ensureCommit(ctx context.Context, dir string, r Remote, lim Limits, revision string) (string, error) {
	commit, err := revisionCommit(revision)
	if err != nil {
		return "", err
	}
	if repo, err := git.PlainOpen(dir); err == nil {
		if _, err := repo.CommitObject(plumbing.NewHash(commit)); err == nil {
			return commit, nil
		}
	}
	r.Ref = &v1alpha1.GitRef{Commit: commit}
	if _, err := Fetch(ctx, dir, r, lim); err != nil {
		return "", fmt.Errorf("fetch the last healthy revision %s: %w", revision, err)
	}
	return commit, nil
}

// rollbackKeep says why a rollback keeps an object of the bad revision that the healthy one
// does not have, beyond what Prune always keeps: a rollback deletes no data, so volumes and
// their claims, Namespaces (deleting one deletes its claims) and CustomResourceDefinitions
// (deleting one deletes every custom resource of its kinds) stay.
func rollbackKeep(live *unstructured.Unstructured) string {
	gk := live.GroupVersionKind().GroupKind()
	switch {
	case gk == schema.GroupKind{Kind: "PersistentVolumeClaim"}, gk == schema.GroupKind{Kind: "PersistentVolume"},
		gk == schema.GroupKind{Kind: "Namespace"}, gk == crdGroupKind:
		return "a rollback deletes no data: " + gk.Kind + " kept"
	}
	return ""
}

// workloadKinds are the kinds whose failing pods explain why they are not healthy.
var workloadKinds = map[schema.GroupKind]bool{
	{Group: "apps", Kind: "Deployment"}: true, {Group: "apps", Kind: "ReplicaSet"}: true,
	{Group: "apps", Kind: "StatefulSet"}: true, {Group: "apps", Kind: "DaemonSet"}: true,
	{Group: "batch", Kind: "Job"}: true,
}

// podFailure says why a pod keeps failing, or "": a container waiting in CrashLoopBackOff
// or unable to get its image, with its last exit when it has one.
func podFailure(pod *corev1.Pod) string {
	statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && cs.RestartCount > 0 && pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
			// Between two restarts of a crash loop.
			return fmt.Sprintf("pod %s: container %s restarted %d time(s), last exit code %d (%s)", pod.Name, cs.Name, cs.RestartCount, t.ExitCode, t.Reason)
		}
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError":
		default:
			continue
		}
		msg := fmt.Sprintf("pod %s: container %s %s", pod.Name, cs.Name, w.Reason)
		if t := cs.LastTerminationState.Terminated; t != nil {
			msg += fmt.Sprintf(", last exit code %d", t.ExitCode)
			if t.Reason != "" {
				msg += " (" + t.Reason + ")"
			}
			if t.Message != "" {
				msg += ": " + t.Message
			}
		} else if w.Message != "" {
			msg += ": " + w.Message
		}
		return msg
	}
	return ""
}

// inspectPods looks at the pods of the workloads that are not healthy (read with the
// source's identity, ap): one whose pod keeps failing is degraded, with that pod's reason,
// rather than merely progressing until its progress deadline. A pod list the identity may
// not read leaves the health as it was.
func (c *Controller) inspectPods(ctx context.Context, ap *Applier, ss *sourceState) {
	for _, u := range ss.unhealthy {
		if !workloadKinds[u.GroupVersionKind().GroupKind()] {
			continue
		}
		key := healthKey(u)
		if r := ss.healthy[key]; r.Status == v1alpha1.HealthDegraded || r.Status == v1alpha1.HealthHealthy {
			continue
		}
		raw, found, _ := unstructured.NestedMap(u.Object, "spec", "selector")
		if !found {
			continue
		}
		var ls metav1.LabelSelector
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &ls); err != nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil || sel.Empty() {
			continue
		}
		list, err := ap.Dynamic.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(u.GetNamespace()).
			List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			continue
		}
		for i := range list.Items {
			var pod corev1.Pod
			if runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &pod) != nil || pod.DeletionTimestamp != nil {
				continue
			}
			if why := podFailure(&pod); why != "" {
				ss.healthy[key] = degraded("%s", why)
				break
			}
		}
	}
}
