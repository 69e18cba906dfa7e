package job

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Event reasons and condition messages, as upstream.
const (
	ReasonSuccessfulCreate = "SuccessfulCreate"
	ReasonFailedCreate     = "FailedCreate"
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonCompleted        = "Completed"
	ReasonSuspended        = "Suspended"
	ReasonResumed          = "Resumed"

	MessageBackoffLimitExceeded = "Job has reached the specified backoff limit"
	MessageDeadlineExceeded     = "Job was active longer than specified deadline"
	MessageCompletionsReached   = "Reached expected number of succeeded pods"
)

// finalizerPatch removes the tracking finalizer without touching other finalizers.
var finalizerPatch = fmt.Appendf(nil, `{"metadata":{"$deleteFromPrimitiveList/finalizers":[%q]}}`, batchv1.JobTrackingFinalizer)

// sync brings one Job forward: it counts finished pods, decides success or failure, creates
// or deletes pods and writes status. It re-derives everything from current state.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	j, err := c.jobLister.Jobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		c.mu.Lock()
		delete(c.backoffs, key)
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	j = j.DeepCopy()
	now := c.cfg.Clock.Now()
	pods, err := c.podsForJob(ctx, j)
	if err != nil {
		return err
	}
	if finished, _ := finishedCondition(j); finished || j.DeletionTimestamp != nil {
		// Finished or being deleted: nothing counts any more, release every pod.
		if err := c.removeFinalizers(ctx, pods, nil); err != nil {
			return err
		}
		if finished {
			return c.handleTTL(ctx, j, now)
		}
		return nil
	}
	needsSync := c.expectations.Satisfied(key)

	// 1. Record newly finished pods as uncounted before their finalizers go, so that a crash
	// between the two steps can never lose or double-count a pod.
	uncounted := j.Status.UncountedTerminatedPods
	if uncounted == nil {
		uncounted = &batchv1.UncountedTerminatedPods{}
	}
	uSucc, uFail := sets.New(uncounted.Succeeded...), sets.New(uncounted.Failed...)
	var ignored []*corev1.Pod
	var failJobMsg string
	rec := c.backoffRecord(key)
	for _, p := range pods {
		if !hasFinalizer(p) || uSucc.Has(p.UID) || uFail.Has(p.UID) {
			continue
		}
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			uSucc.Insert(p.UID)
			rec.failures = 0
		case isPodFailed(p, j):
			action, msg := matchPodFailurePolicy(j.Spec.PodFailurePolicy, p)
			switch action {
			case batchv1.PodFailurePolicyActionIgnore:
				ignored = append(ignored, p)
				continue
			case batchv1.PodFailurePolicyActionFailJob:
				if failJobMsg == "" {
					failJobMsg = msg
				}
			}
			uFail.Insert(p.UID)
			if !rec.counted[p.UID] {
				rec.counted[p.UID] = true
				rec.failures++
				rec.lastFailure = now
			}
		}
	}
	if uSucc.Len() != len(uncounted.Succeeded) || uFail.Len() != len(uncounted.Failed) {
		j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: sortedUIDs(uSucc), Failed: sortedUIDs(uFail)}
		if j, err = c.client.BatchV1().Jobs(ns).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("record finished pods of job %s: %w", key, err)
		}
	}

	// 2. Release the recorded pods, then move them into the counters.
	var toRelease []*corev1.Pod
	byUID := map[types.UID]*corev1.Pod{}
	for _, p := range pods {
		byUID[p.UID] = p
		if uSucc.Has(p.UID) || uFail.Has(p.UID) {
			toRelease = append(toRelease, p)
		}
	}
	toRelease = append(toRelease, ignored...)
	released := sets.New[types.UID]()
	relErr := c.removeFinalizers(ctx, toRelease, released)
	status := j.Status.DeepCopy()
	completed := parseIndexes(status.CompletedIndexes, completions(j))
	var stillSucc, stillFail []types.UID
	for _, uid := range sortedUIDs(uSucc) {
		p, ok := byUID[uid]
		if ok && !released.Has(uid) {
			stillSucc = append(stillSucc, uid)
			continue
		}
		if isIndexed(j) {
			if ok {
				if ix, valid := podIndex(p, completions(j)); valid {
					completed.Insert(ix)
				}
			}
		} else {
			status.Succeeded++
		}
	}
	for _, uid := range sortedUIDs(uFail) {
		if _, ok := byUID[uid]; ok && !released.Has(uid) {
			stillFail = append(stillFail, uid)
			continue
		}
		status.Failed++
	}
	status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: stillSucc, Failed: stillFail}
	if isIndexed(j) {
		status.CompletedIndexes = formatIndexes(completed)
		status.Succeeded = int32(completed.Len())
	}

	// 3. Decide the outcome.
	var active, terminating []*corev1.Pod
	var ready int32
	for _, p := range pods {
		switch {
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		case p.DeletionTimestamp != nil:
			terminating = append(terminating, p)
		default:
			active = append(active, p)
			if internal.IsPodReady(p) {
				ready++
			}
		}
	}
	failedTotal := status.Failed + int32(len(stillFail))
	succeededTotal := status.Succeeded + int32(len(stillSucc))
	if isIndexed(j) {
		succeededTotal = status.Succeeded
	}
	if !hasCondition(status, batchv1.JobFailureTarget) && !hasCondition(status, batchv1.JobSuccessCriteriaMet) {
		switch {
		case failJobMsg != "":
			setCondition(status, batchv1.JobFailureTarget, batchv1.JobReasonPodFailurePolicy, failJobMsg, now)
		case failedTotal > backoffLimit(j):
			setCondition(status, batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded, MessageBackoffLimitExceeded, now)
		case pastDeadline(j, status, now):
			setCondition(status, batchv1.JobFailureTarget, batchv1.JobReasonDeadlineExceeded, MessageDeadlineExceeded, now)
		case complete(j, succeededTotal, int32(len(active)), completed):
			setCondition(status, batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached, MessageCompletionsReached, now)
		}
	}

	var manageErr error
	switch {
	case hasCondition(status, batchv1.JobFailureTarget) || hasCondition(status, batchv1.JobSuccessCriteriaMet):
		// Finishing: stop what still runs; the final condition waits until nothing runs.
		if len(active) > 0 {
			manageErr = c.deletePods(ctx, j, active, false)
			terminating = append(terminating, active...)
			active = nil
			ready = 0
		}
		if len(terminating) == 0 && len(stillSucc) == 0 && len(stillFail) == 0 && manageErr == nil && relErr == nil {
			c.finish(j, status, now)
		}
	case j.Spec.Suspend != nil && *j.Spec.Suspend:
		if setCondition(status, batchv1.JobSuspended, "JobSuspended", "Job suspended", now) {
			c.recorder.Event(j, corev1.EventTypeNormal, ReasonSuspended, "Job suspended")
		}
		if len(active) > 0 {
			manageErr = c.deletePods(ctx, j, active, true)
			active, ready = nil, 0
		}
	default:
		if cond := getCondition(status, batchv1.JobSuspended); cond != nil && cond.Status == corev1.ConditionTrue {
			setConditionStatus(status, batchv1.JobSuspended, corev1.ConditionFalse, "JobResumed", "Job resumed", now)
			c.recorder.Event(j, corev1.EventTypeNormal, ReasonResumed, "Job resumed")
			status.StartTime = nil
		}
		if status.StartTime == nil {
			t := metav1.NewTime(now)
			status.StartTime = &t
		}
		if needsSync {
			var created int
			created, manageErr = c.manage(ctx, key, j, active, succeededTotal, completed, now)
			_ = created
		}
		if ads := j.Spec.ActiveDeadlineSeconds; ads != nil {
			left := status.StartTime.Add(time.Duration(*ads) * time.Second).Sub(now)
			c.queue.AddAfter(key, max(left, 0)+10*time.Millisecond)
		}
	}

	status.Active = int32(len(active))
	status.Ready = &ready
	nTerm := int32(len(terminating))
	status.Terminating = &nTerm
	if err := c.writeStatus(ctx, j, status); err != nil {
		return errors.Join(manageErr, relErr, err)
	}
	return errors.Join(manageErr, relErr)
}

// finish turns the target condition into the final one.
func (c *Controller) finish(j *batchv1.Job, status *batchv1.JobStatus, now time.Time) {
	if cond := getCondition(status, batchv1.JobFailureTarget); cond != nil && cond.Status == corev1.ConditionTrue {
		if setCondition(status, batchv1.JobFailed, cond.Reason, cond.Message, now) {
			c.recorder.Event(j, corev1.EventTypeWarning, cond.Reason, cond.Message)
		}
		return
	}
	if cond := getCondition(status, batchv1.JobSuccessCriteriaMet); cond != nil && cond.Status == corev1.ConditionTrue {
		if setCondition(status, batchv1.JobComplete, cond.Reason, cond.Message, now) {
			t := metav1.NewTime(now)
			status.CompletionTime = &t
			c.recorder.Event(j, corev1.EventTypeNormal, ReasonCompleted, "Job completed")
		}
	}
}

// manage creates the pods missing to reach the wanted active count (after the failure
// backoff) or deletes the surplus.
func (c *Controller) manage(ctx context.Context, key string, j *batchv1.Job, active []*corev1.Pod, succeeded int32,
	completed sets.Set[int], now time.Time) (int, error) {
	want := wantActive(j, int32(len(active)), succeeded)
	diff := int(want) - len(active)
	if diff < 0 {
		return 0, c.deletePods(ctx, j, internal.PodsToDelete(active, -diff), true)
	}
	if diff == 0 {
		return 0, nil
	}
	if wait := c.backoffRemaining(key, now); wait > 0 {
		c.queue.AddAfter(key, wait)
		return 0, nil
	}
	var indexes []int
	if isIndexed(j) {
		indexes = pendingIndexes(completions(j), completed, active, diff)
		diff = len(indexes)
		if diff == 0 {
			return 0, nil
		}
	}
	c.expectations.ExpectCreations(key, diff)
	next := make(chan int, len(indexes))
	for _, ix := range indexes {
		next <- ix
	}
	ok, err := internal.SlowStartBatch(diff, internal.SlowStartInitialBatchSize, func() error {
		ix := -1
		if len(indexes) > 0 {
			ix = <-next
		}
		return c.createPod(ctx, j, ix)
	})
	for i := 0; i < diff-ok; i++ {
		c.expectations.CreationObserved(key)
	}
	return ok, err
}

// wantActive is upstream's count of pods that should run: parallelism, bounded by the
// completions still missing; in work-queue mode (no completions) nothing new starts once a
// pod has succeeded.
func wantActive(j *batchv1.Job, active, succeeded int32) int32 {
	par := int32(1)
	if j.Spec.Parallelism != nil {
		par = *j.Spec.Parallelism
	}
	if j.Spec.Completions == nil {
		if succeeded > 0 {
			return min(active, par)
		}
		return par
	}
	return max(min(par, *j.Spec.Completions-succeeded), 0)
}

// pendingIndexes returns up to n of the lowest indexes neither completed nor running.
func pendingIndexes(total int32, completed sets.Set[int], active []*corev1.Pod, n int) []int {
	running := sets.New[int]()
	for _, p := range active {
		if ix, ok := podIndex(p, total); ok {
			running.Insert(ix)
		}
	}
	var out []int
	for i := 0; i < int(total) && len(out) < n; i++ {
		if !completed.Has(i) && !running.Has(i) {
			out = append(out, i)
		}
	}
	return out
}

func (c *Controller) createPod(ctx context.Context, j *batchv1.Job, index int) error {
	pod := internal.PodFromTemplate(&j.Spec.Template, j, controllerKind)
	pod.Finalizers = append(pod.Finalizers, batchv1.JobTrackingFinalizer)
	if index >= 0 {
		ix := strconv.Itoa(index)
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Annotations[batchv1.JobCompletionIndexAnnotation] = ix
		pod.Labels[batchv1.JobCompletionIndexAnnotation] = ix
		pod.GenerateName = fmt.Sprintf("%s-%d-", j.Name, index)
		if pod.Spec.Hostname == "" {
			pod.Spec.Hostname = fmt.Sprintf("%s-%d", j.Name, index)
		}
		for i := range pod.Spec.Containers {
			pod.Spec.Containers[i].Env = append(pod.Spec.Containers[i].Env, indexEnv())
		}
		for i := range pod.Spec.InitContainers {
			pod.Spec.InitContainers[i].Env = append(pod.Spec.InitContainers[i].Env, indexEnv())
		}
	}
	created, err := c.client.CoreV1().Pods(j.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil
		}
		c.recorder.Eventf(j, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating: %v", err)
		return err
	}
	c.recorder.Eventf(j, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created pod: %v", created.Name)
	return nil
}

func indexEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "JOB_COMPLETION_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: fmt.Sprintf("metadata.annotations['%s']", batchv1.JobCompletionIndexAnnotation)}}}
}

// deletePods deletes pods; with expect the deletions are recorded as expectations.
func (c *Controller) deletePods(ctx context.Context, j *batchv1.Job, pods []*corev1.Pod, expect bool) error {
	key, _ := cache.MetaNamespaceKeyFunc(j)
	if expect {
		keys := make([]string, len(pods))
		for i, p := range pods {
			keys[i] = internal.PodKey(p)
		}
		c.expectations.ExpectDeletions(key, keys)
	}
	var errs []error
	for _, p := range pods {
		err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil {
			if expect {
				c.expectations.DeletionObserved(key, internal.PodKey(p))
			}
			if !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
			continue
		}
		c.recorder.Eventf(j, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted pod: %v", p.Name)
	}
	return errors.Join(errs...)
}

// removeFinalizers removes the tracking finalizer from pods; the UIDs of pods now without it
// (or gone) go into done when it is not nil.
func (c *Controller) removeFinalizers(ctx context.Context, pods []*corev1.Pod, done sets.Set[types.UID]) error {
	var errs []error
	for _, p := range pods {
		if !hasFinalizer(p) {
			if done != nil {
				done.Insert(p.UID)
			}
			continue
		}
		_, err := c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, finalizerPatch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove finalizer of pod %s: %w", internal.PodKey(p), err))
			continue
		}
		if done != nil {
			done.Insert(p.UID)
		}
	}
	return errors.Join(errs...)
}

// handleTTL deletes a finished Job once ttlSecondsAfterFinished has passed, else looks again then.
func (c *Controller) handleTTL(ctx context.Context, j *batchv1.Job, now time.Time) error {
	if j.Spec.TTLSecondsAfterFinished == nil || j.DeletionTimestamp != nil {
		return nil
	}
	_, cond := finishedCondition(j)
	finishedAt := cond.LastTransitionTime.Time
	if j.Status.CompletionTime != nil {
		finishedAt = j.Status.CompletionTime.Time
	}
	expire := finishedAt.Add(time.Duration(*j.Spec.TTLSecondsAfterFinished) * time.Second)
	if left := expire.Sub(now); left > 0 {
		key, _ := cache.MetaNamespaceKeyFunc(j)
		c.queue.AddAfter(key, left)
		return nil
	}
	policy := metav1.DeletePropagationBackground
	err := c.client.BatchV1().Jobs(j.Namespace).Delete(ctx, j.Name, metav1.DeleteOptions{
		PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &j.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete expired job %s/%s: %w", j.Namespace, j.Name, err)
	}
	c.log.WithField("job", j.Namespace+"/"+j.Name).Info("deleted finished job after its TTL")
	return nil
}

func (c *Controller) writeStatus(ctx context.Context, j *batchv1.Job, status *batchv1.JobStatus) error {
	if equalStatus(&j.Status, status) {
		return nil
	}
	j.Status = *status
	if _, err := c.client.BatchV1().Jobs(j.Namespace).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}

func equalStatus(a, b *batchv1.JobStatus) bool {
	return a.String() == b.String()
}

func (c *Controller) backoffRecord(key string) *backoffRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.backoffs[key]
	if !ok {
		r = &backoffRecord{counted: map[types.UID]bool{}}
		c.backoffs[key] = r
	}
	return r
}

// backoffRemaining is how long the Job must still wait before replacing a failed pod:
// BackoffBase doubled per consecutive failure after the first, capped at BackoffMax.
func (c *Controller) backoffRemaining(key string, now time.Time) time.Duration {
	r := c.backoffRecord(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.failures == 0 {
		return 0
	}
	return r.lastFailure.Add(BackoffDelay(c.cfg.BackoffBase, c.cfg.BackoffMax, r.failures)).Sub(now)
}

// BackoffDelay is the retry delay after failures consecutive failures.
func BackoffDelay(base, maxDelay time.Duration, failures int) time.Duration {
	d := base
	for i := 1; i < failures; i++ {
		d *= 2
		if d >= maxDelay {
			return maxDelay
		}
	}
	return min(d, maxDelay)
}

// isPodFailed is upstream's: a Failed pod, or (without podFailurePolicy, which needs a
// terminal phase to match) a pod deleted before it succeeded.
func isPodFailed(p *corev1.Pod, j *batchv1.Job) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	if j.Spec.PodFailurePolicy != nil {
		return false
	}
	return p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded
}

// matchPodFailurePolicy returns the action of the first rule matching a failed pod (Count
// when none does) and, for FailJob, upstream's message.
func matchPodFailurePolicy(policy *batchv1.PodFailurePolicy, p *corev1.Pod) (batchv1.PodFailurePolicyAction, string) {
	if policy == nil || p.Status.Phase != corev1.PodFailed {
		return batchv1.PodFailurePolicyActionCount, ""
	}
	for i, rule := range policy.Rules {
		if req := rule.OnExitCodes; req != nil {
			for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				if req.ContainerName != nil && *req.ContainerName != cs.Name {
					continue
				}
				t := cs.State.Terminated
				if t == nil || t.ExitCode == 0 {
					continue
				}
				in := false
				for _, v := range req.Values {
					if v == t.ExitCode {
						in = true
					}
				}
				if in == (req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) {
					return rule.Action, fmt.Sprintf("Container %s for pod %s/%s failed with exit code %d matching %s rule at index %d",
						cs.Name, p.Namespace, p.Name, t.ExitCode, rule.Action, i)
				}
			}
		}
		for _, pat := range rule.OnPodConditions {
			for _, cond := range p.Status.Conditions {
				st := pat.Status
				if st == "" {
					st = corev1.ConditionTrue
				}
				if cond.Type == pat.Type && cond.Status == st {
					return rule.Action, fmt.Sprintf("Pod %s/%s has condition %s matching %s rule at index %d",
						p.Namespace, p.Name, cond.Type, rule.Action, i)
				}
			}
		}
	}
	return batchv1.PodFailurePolicyActionCount, ""
}

func complete(j *batchv1.Job, succeeded, active int32, completed sets.Set[int]) bool {
	if isIndexed(j) {
		return completed.Len() >= int(completions(j))
	}
	if j.Spec.Completions == nil {
		return succeeded > 0 && active == 0
	}
	return succeeded >= *j.Spec.Completions
}

func pastDeadline(j *batchv1.Job, status *batchv1.JobStatus, now time.Time) bool {
	if j.Spec.ActiveDeadlineSeconds == nil || status.StartTime == nil || (j.Spec.Suspend != nil && *j.Spec.Suspend) {
		return false
	}
	return !now.Before(status.StartTime.Add(time.Duration(*j.Spec.ActiveDeadlineSeconds) * time.Second))
}

func backoffLimit(j *batchv1.Job) int32 {
	if j.Spec.BackoffLimit == nil {
		return 6
	}
	return *j.Spec.BackoffLimit
}

func completions(j *batchv1.Job) int32 {
	if j.Spec.Completions == nil {
		return 1
	}
	return *j.Spec.Completions
}

func isIndexed(j *batchv1.Job) bool {
	return j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion
}

func hasFinalizer(p *corev1.Pod) bool {
	for _, f := range p.Finalizers {
		if f == batchv1.JobTrackingFinalizer {
			return true
		}
	}
	return false
}

// podIndex reads a pod's completion index, valid when it is within [0, total).
func podIndex(p *corev1.Pod, total int32) (int, bool) {
	v, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]
	if !ok {
		return 0, false
	}
	ix, err := strconv.Atoi(v)
	if err != nil || ix < 0 || ix >= int(total) {
		return 0, false
	}
	return ix, true
}

// parseIndexes reads completedIndexes ("1,3-5"), keeping indexes below total.
func parseIndexes(s string, total int32) sets.Set[int] {
	out := sets.New[int]()
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		for i := a; i <= b && i < int(total); i++ {
			out.Insert(i)
		}
	}
	return out
}

// formatIndexes writes indexes the way upstream does: sorted, consecutive runs as "a-b".
func formatIndexes(s sets.Set[int]) string {
	ix := sets.List(s)
	var parts []string
	for i := 0; i < len(ix); {
		k := i
		for k+1 < len(ix) && ix[k+1] == ix[k]+1 {
			k++
		}
		if k == i {
			parts = append(parts, strconv.Itoa(ix[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ix[i], ix[k]))
		}
		i = k + 1
	}
	return strings.Join(parts, ",")
}

func sortedUIDs(s sets.Set[types.UID]) []types.UID {
	out := s.UnsortedList()
	sort.Slice(out, func(i, k int) bool { return out[i] < out[k] })
	return out
}

// finishedCondition returns the Job's Complete or Failed condition when it is True.
func finishedCondition(j *batchv1.Job) (bool, *batchv1.JobCondition) {
	for i := range j.Status.Conditions {
		c := &j.Status.Conditions[i]
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true, c
		}
	}
	return false, nil
}

func getCondition(s *batchv1.JobStatus, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

func hasCondition(s *batchv1.JobStatus, t batchv1.JobConditionType) bool {
	c := getCondition(s, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

// setCondition sets condition t True; it reports whether anything changed.
func setCondition(s *batchv1.JobStatus, t batchv1.JobConditionType, reason, msg string, now time.Time) bool {
	return setConditionStatus(s, t, corev1.ConditionTrue, reason, msg, now)
}

func setConditionStatus(s *batchv1.JobStatus, t batchv1.JobConditionType, st corev1.ConditionStatus, reason, msg string, now time.Time) bool {
	if c := getCondition(s, t); c != nil {
		if c.Status == st && c.Reason == reason && c.Message == msg {
			return false
		}
		if c.Status != st {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		c.Status, c.Reason, c.Message, c.LastProbeTime = st, reason, msg, metav1.NewTime(now)
		return true
	}
	s.Conditions = append(s.Conditions, batchv1.JobCondition{Type: t, Status: st, Reason: reason, Message: msg,
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)})
	return true
}
