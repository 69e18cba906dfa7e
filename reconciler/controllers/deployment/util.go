package deployment

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Annotations the controller keeps on Deployments and their ReplicaSets (upstream's names).
const (
	RevisionAnnotation        = "deployment.kubernetes.io/revision"
	RevisionHistoryAnnotation = "deployment.kubernetes.io/revision-history"
	DesiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	MaxReplicasAnnotation     = "deployment.kubernetes.io/max-replicas"
	// deprecatedRollbackTo is the annotation of the removed rollback subresource: never
	// copied to a ReplicaSet.
	deprecatedRollbackTo = "deprecated.deployment.rollback.to"
	// maxRevHistoryLengthInChars bounds the revision-history annotation.
	maxRevHistoryLengthInChars = 2000
)

// Condition reasons, as upstream (kubectl rollout status reads ProgressDeadlineExceeded).
const (
	ReasonNewRSCreated     = "NewReplicaSetCreated"
	ReasonFoundNewRS       = "FoundNewReplicaSet"
	ReasonRSUpdated        = "ReplicaSetUpdated"
	ReasonNewRSAvailable   = "NewReplicaSetAvailable"
	ReasonTimedOut         = "ProgressDeadlineExceeded"
	ReasonFailedRSCreate   = "ReplicaSetCreateError"
	ReasonPaused           = "DeploymentPaused"
	ReasonResumed          = "DeploymentResumed"
	ReasonMinimumAvailable = "MinimumReplicasAvailable"
	ReasonMinimumUnavail   = "MinimumReplicasUnavailable"
)

var annotationsToSkip = map[string]bool{
	corev1.LastAppliedConfigAnnotation: true,
	RevisionAnnotation:                 true,
	RevisionHistoryAnnotation:          true,
	DesiredReplicasAnnotation:          true,
	MaxReplicasAnnotation:              true,
	deprecatedRollbackTo:               true,
}

func specReplicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

func rsReplicas(rs *appsv1.ReplicaSet) int32 {
	if rs == nil || rs.Spec.Replicas == nil {
		return 0
	}
	return *rs.Spec.Replicas
}

func isRollingUpdate(d *appsv1.Deployment) bool {
	return d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType || d.Spec.Strategy.Type == ""
}

// ResolveFenceposts turns maxSurge and maxUnavailable (ints or percentages of desired) into
// numbers: surge rounds up, unavailable rounds down, and when both come out 0 unavailable is
// 1 so that a rollout can make progress.
func ResolveFenceposts(maxSurge, maxUnavailable *intstr.IntOrString, desired int32) (int32, int32, error) {
	surge, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxSurge, intstr.FromInt32(0)), int(desired), true)
	if err != nil {
		return 0, 0, err
	}
	unavailable, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxUnavailable, intstr.FromInt32(0)), int(desired), false)
	if err != nil {
		return 0, 0, err
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return int32(surge), int32(unavailable), nil
}

func rollingParams(d *appsv1.Deployment) (*intstr.IntOrString, *intstr.IntOrString) {
	if d.Spec.Strategy.RollingUpdate == nil {
		def := intstr.FromString("25%")
		return &def, &def
	}
	return d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable
}

// MaxSurge is how many pods above spec.replicas a rolling update may run (0 for Recreate).
func MaxSurge(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) {
		return 0
	}
	s, u := rollingParams(d)
	surge, _, _ := ResolveFenceposts(s, u, specReplicas(d))
	return surge
}

// MaxUnavailable is how many pods below spec.replicas may be unavailable during a rolling
// update (0 for Recreate or zero replicas), never more than spec.replicas.
func MaxUnavailable(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) || specReplicas(d) == 0 {
		return 0
	}
	s, u := rollingParams(d)
	_, unavailable, _ := ResolveFenceposts(s, u, specReplicas(d))
	return min(unavailable, specReplicas(d))
}

// podCount is how many pods a ReplicaSet may have now: its spec, or more while its
// controller has not yet deleted the surplus. Counting the larger keeps a rollout under
// replicas+maxSurge when the ReplicaSet controller lags behind a scale-down.
func podCount(rs *appsv1.ReplicaSet) int32 {
	if rs == nil {
		return 0
	}
	return max(rsReplicas(rs), rs.Status.Replicas)
}

// availableCount is how many available pods a ReplicaSet keeps for sure: its status, or its
// spec when a scale-down is still to happen (the ReplicaSet controller deletes unavailable
// pods first). Counting the smaller keeps a rollout above replicas-maxUnavailable.
func availableCount(rs *appsv1.ReplicaSet) int32 {
	if rs == nil {
		return 0
	}
	return min(rsReplicas(rs), rs.Status.AvailableReplicas)
}

func sumPodCount(rss []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rss {
		n += podCount(rs)
	}
	return n
}

func sumAvailable(rss []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rss {
		n += availableCount(rs)
	}
	return n
}

func sumSpec(rss []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rss {
		n += rsReplicas(rs)
	}
	return n
}

// NewRSNewReplicas is the size the new ReplicaSet may grow to now.
func NewRSNewReplicas(d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) int32 {
	if !isRollingUpdate(d) {
		return specReplicas(d)
	}
	maxTotal := specReplicas(d) + MaxSurge(d)
	current := sumPodCount(all)
	if current >= maxTotal {
		return rsReplicas(newRS)
	}
	up := min(maxTotal-current, specReplicas(d)-rsReplicas(newRS))
	return rsReplicas(newRS) + max(up, 0)
}

// Revision reads a ReplicaSet's revision annotation (0 when absent or invalid).
func Revision(obj metav1.Object) int64 {
	v, err := strconv.ParseInt(obj.GetAnnotations()[RevisionAnnotation], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

func maxRevision(rss []*appsv1.ReplicaSet) int64 {
	var m int64
	for _, rs := range rss {
		m = max(m, Revision(rs))
	}
	return m
}

// setNewReplicaSetAnnotations copies the Deployment's annotations to its new ReplicaSet and
// sets the revision; a ReplicaSet brought back by a rollback remembers its earlier revisions
// in revision-history. It reports whether anything changed.
func setNewReplicaSetAnnotations(d *appsv1.Deployment, rs *appsv1.ReplicaSet, newRevision string, exists bool) bool {
	changed := false
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	for k, v := range d.Annotations {
		if annotationsToSkip[k] || rs.Annotations[k] == v {
			continue
		}
		rs.Annotations[k] = v
		changed = true
	}
	oldRevision, had := rs.Annotations[RevisionAnnotation]
	oldInt, err := strconv.ParseInt(oldRevision, 10, 64)
	if err != nil {
		if oldRevision != "" {
			return changed
		}
		oldInt = 0
	}
	newInt, err := strconv.ParseInt(newRevision, 10, 64)
	if err != nil {
		return changed
	}
	if oldInt < newInt {
		rs.Annotations[RevisionAnnotation] = newRevision
		changed = true
		if had {
			rs.Annotations[RevisionHistoryAnnotation] = appendRevisionHistory(rs.Annotations[RevisionHistoryAnnotation], oldRevision)
		}
	}
	if !exists && setReplicasAnnotations(rs, specReplicas(d), specReplicas(d)+MaxSurge(d)) {
		changed = true
	}
	return changed
}

// appendRevisionHistory adds rev to a comma list, dropping the oldest entries beyond the limit.
func appendRevisionHistory(history, rev string) string {
	if history == "" {
		return rev
	}
	old := strings.Split(history, ",")
	total := len(history) + len(rev) + 1
	start := 0
	for total > maxRevHistoryLengthInChars && start < len(old) {
		total -= len(old[start]) + 1
		start++
	}
	return strings.Join(append(old[start:], rev), ",")
}

// setReplicasAnnotations records desired and max replicas on a ReplicaSet (proportional
// scaling reads them); it reports whether they changed.
func setReplicasAnnotations(rs *appsv1.ReplicaSet, desired, maxReplicas int32) bool {
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	d, m := strconv.Itoa(int(desired)), strconv.Itoa(int(maxReplicas))
	if rs.Annotations[DesiredReplicasAnnotation] == d && rs.Annotations[MaxReplicasAnnotation] == m {
		return false
	}
	rs.Annotations[DesiredReplicasAnnotation] = d
	rs.Annotations[MaxReplicasAnnotation] = m
	return true
}

func replicasAnnotationsNeedUpdate(rs *appsv1.ReplicaSet, desired, maxReplicas int32) bool {
	return rs.Annotations[DesiredReplicasAnnotation] != strconv.Itoa(int(desired)) ||
		rs.Annotations[MaxReplicasAnnotation] != strconv.Itoa(int(maxReplicas))
}

func intAnnotation(rs *appsv1.ReplicaSet, key string) (int32, bool) {
	v, ok := rs.Annotations[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}

// GetProportion is the share of a scaling of the whole Deployment (toAdd, of which added
// is already handed out) that falls to rs: proportional to its size against the size the
// Deployment had (its max-replicas annotation).
func GetProportion(rs *appsv1.ReplicaSet, d *appsv1.Deployment, toAdd, added int32) int32 {
	if rs == nil || rsReplicas(rs) == 0 || toAdd == 0 || toAdd == added {
		return 0
	}
	fraction := replicaSetFraction(rs, d)
	allowed := toAdd - added
	if toAdd > 0 {
		return min(fraction, allowed)
	}
	return max(fraction, allowed)
}

func replicaSetFraction(rs *appsv1.ReplicaSet, d *appsv1.Deployment) int32 {
	if specReplicas(d) == 0 {
		return -rsReplicas(rs)
	}
	deploymentReplicas := specReplicas(d) + MaxSurge(d)
	annotated, ok := intAnnotation(rs, MaxReplicasAnnotation)
	if !ok || annotated == 0 {
		annotated = d.Status.Replicas
	}
	if annotated == 0 {
		return 0
	}
	size := float64(rsReplicas(rs)*deploymentReplicas) / float64(annotated)
	return int32(math.Round(size)) - rsReplicas(rs)
}

// filterActive returns the ReplicaSets with a non-zero spec.replicas.
func filterActive(rss []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range rss {
		if rs != nil && rsReplicas(rs) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

func byCreation(rss []*appsv1.ReplicaSet) {
	sort.SliceStable(rss, func(i, j int) bool {
		a, b := rss[i], rss[j]
		if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.Name < b.Name
		}
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	})
}

// bySize sorts larger first; among equals, newer first when newerFirst, else older first.
func bySize(rss []*appsv1.ReplicaSet, newerFirst bool) {
	sort.SliceStable(rss, func(i, j int) bool {
		a, b := rss[i], rss[j]
		if rsReplicas(a) != rsReplicas(b) {
			return rsReplicas(a) > rsReplicas(b)
		}
		if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.Name < b.Name
		}
		if newerFirst {
			return b.CreationTimestamp.Before(&a.CreationTimestamp)
		}
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	})
}

func byRevision(rss []*appsv1.ReplicaSet) {
	sort.SliceStable(rss, func(i, j int) bool {
		ri, rj := Revision(rss[i]), Revision(rss[j])
		if ri == rj {
			return rss[i].CreationTimestamp.Before(&rss[j].CreationTimestamp)
		}
		return ri < rj
	})
}

// findActiveOrLatest returns the only active ReplicaSet, or the newest when none is active,
// or nil when several are active (a rollout is in progress).
func findActiveOrLatest(newRS *appsv1.ReplicaSet, oldRSs []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	if newRS == nil && len(oldRSs) == 0 {
		return nil
	}
	olds := append([]*appsv1.ReplicaSet(nil), oldRSs...)
	byCreation(olds)
	for i, j := 0, len(olds)-1; i < j; i, j = i+1, j-1 {
		olds[i], olds[j] = olds[j], olds[i]
	}
	active := filterActive(append(olds, newRS))
	switch len(active) {
	case 0:
		if newRS != nil {
			return newRS
		}
		return olds[0]
	case 1:
		return active[0]
	}
	return nil
}

// isSaturated reports whether rs is the Deployment's new ReplicaSet at full, available size.
func isSaturated(d *appsv1.Deployment, rs *appsv1.ReplicaSet) bool {
	if rs == nil {
		return false
	}
	desired, ok := intAnnotation(rs, DesiredReplicasAnnotation)
	return ok && desired == specReplicas(d) && rsReplicas(rs) == specReplicas(d) && rs.Status.AvailableReplicas == specReplicas(d)
}

// hasProgressDeadline reports whether progressDeadlineSeconds is set (MaxInt32 means none).
func hasProgressDeadline(d *appsv1.Deployment) bool {
	return d.Spec.ProgressDeadlineSeconds != nil && *d.Spec.ProgressDeadlineSeconds != math.MaxInt32
}

func getCondition(status appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range status.Conditions {
		if status.Conditions[i].Type == t {
			return &status.Conditions[i]
		}
	}
	return nil
}

func newCondition(t appsv1.DeploymentConditionType, s corev1.ConditionStatus, reason, msg string, now time.Time) appsv1.DeploymentCondition {
	return appsv1.DeploymentCondition{Type: t, Status: s, Reason: reason, Message: msg,
		LastUpdateTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
}

// setCondition replaces the condition of c's type unless status and reason are unchanged;
// the transition time stays when only the reason changes.
func setCondition(status *appsv1.DeploymentStatus, c appsv1.DeploymentCondition) {
	cur := getCondition(*status, c.Type)
	if cur != nil && cur.Status == c.Status && cur.Reason == c.Reason {
		return
	}
	if cur != nil && cur.Status == c.Status {
		c.LastTransitionTime = cur.LastTransitionTime
	}
	removeCondition(status, c.Type)
	status.Conditions = append(status.Conditions, c)
}

func removeCondition(status *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	var out []appsv1.DeploymentCondition
	for _, c := range status.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	status.Conditions = out
}

// deploymentComplete reports whether every desired replica is updated and available.
func deploymentComplete(d *appsv1.Deployment, s *appsv1.DeploymentStatus) bool {
	n := specReplicas(d)
	return s.UpdatedReplicas == n && s.Replicas == n && s.AvailableReplicas == n && s.ObservedGeneration >= d.Generation
}

// deploymentProgressing reports whether the new status shows progress over the old one.
func deploymentProgressing(d *appsv1.Deployment, s *appsv1.DeploymentStatus) bool {
	old := d.Status
	return s.UpdatedReplicas > old.UpdatedReplicas ||
		(s.Replicas-s.UpdatedReplicas) < (old.Replicas-old.UpdatedReplicas) ||
		s.ReadyReplicas > old.ReadyReplicas || s.AvailableReplicas > old.AvailableReplicas
}

// deploymentTimedOut reports whether the rollout made no progress for progressDeadlineSeconds.
func deploymentTimedOut(d *appsv1.Deployment, s *appsv1.DeploymentStatus, now time.Time) bool {
	if !hasProgressDeadline(d) {
		return false
	}
	c := getCondition(*s, appsv1.DeploymentProgressing)
	if c == nil || c.Reason == ReasonNewRSAvailable {
		return false
	}
	if c.Reason == ReasonTimedOut {
		return true
	}
	return c.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second).Before(now)
}
