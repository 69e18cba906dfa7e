package cronjob

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// Event reasons, as upstream.
const (
	ReasonSuccessfulCreate  = "SuccessfulCreate"
	ReasonFailedCreate      = "FailedCreate"
	ReasonSuccessfulDelete  = "SuccessfulDelete"
	ReasonFailedNeedsStart  = "FailedNeedsStart"
	ReasonJobAlreadyActive  = "JobAlreadyActive"
	ReasonMissSchedule      = "MissSchedule"
	ReasonSawCompletedJob   = "SawCompletedJob"
	ReasonUnknownTimeZone   = "UnknownTimeZone"
	ReasonInvalidSchedule   = "InvalidSchedule"
	ReasonUnexpectedJob     = "UnexpectedJob"
	defaultSuccessfulLimit  = 3
	defaultFailedLimit      = 1
	nextScheduleSlack       = 100 * time.Millisecond
	jobNameMinutesSeparator = "-"
)

// JobName is the deterministic name of the Job for scheduled time t: creating it twice fails,
// which makes creation idempotent.
func JobName(cj *batchv1.CronJob, t time.Time) string {
	return fmt.Sprintf("%s%s%d", cj.Name, jobNameMinutesSeparator, t.Unix()/60)
}

// sync reconciles one CronJob at the controller clock's now.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	// The workqueue never hands one key to two workers, but Sync may also be called directly:
	// two overlapping syncs of one CronJob could each decide to start a Job.
	unlock := c.lockKey(key)
	defer unlock()
	cj, err := c.cjLister.CronJobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	cj = cj.DeepCopy()
	all, err := c.jobLister.Jobs(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	now := c.clock.Now()
	var jobs []*batchv1.Job
	for _, j := range all {
		if ref := metav1.GetControllerOf(j); ref != nil && ref.UID == cj.UID {
			jobs = append(jobs, j)
		}
	}
	// The lister's order is a map's: sort so that Jobs the status lacks are added to
	// status.active oldest first, the same on every sync.
	slices.SortFunc(jobs, func(a, b *batchv1.Job) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	status := cj.Status.DeepCopy()
	c.reconcileActive(ctx, cj, status, jobs)
	next, syncErr := c.schedule(ctx, cj, status, now)
	if err := c.writeStatus(ctx, cj, status); err != nil {
		return errors.Join(syncErr, err)
	}
	histErr := c.cleanupHistory(ctx, cj, jobs)
	if !next.IsZero() {
		c.queue.AddAfter(key, next.Sub(now)+nextScheduleSlack)
	}
	return errors.Join(syncErr, histErr)
}

// reconcileActive drops finished or vanished Jobs from status.active, adds running Jobs it
// owns but lost track of, and advances lastSuccessfulTime.
func (c *Controller) reconcileActive(ctx context.Context, cj *batchv1.CronJob, status *batchv1.CronJobStatus, jobs []*batchv1.Job) {
	byUID := map[types.UID]*batchv1.Job{}
	for _, j := range jobs {
		byUID[j.UID] = j
	}
	inActive := map[types.UID]bool{}
	var kept []corev1.ObjectReference
	for _, ref := range status.Active {
		j, ok := byUID[ref.UID]
		if !ok {
			// The lister may lag behind a Job just created: ask the API before forgetting it.
			fresh, err := c.client.BatchV1().Jobs(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err == nil && fresh.UID == ref.UID {
				j = fresh
			} else if err != nil && !apierrors.IsNotFound(err) {
				kept = append(kept, ref)
				inActive[ref.UID] = true
				continue
			} else {
				continue
			}
		}
		if done, _ := finished(j); done {
			continue
		}
		kept = append(kept, ref)
		inActive[ref.UID] = true
	}
	var fresh *batchv1.CronJob
	freshRead := false
	for _, j := range jobs {
		done, cond := finished(j)
		if !done && !inActive[j.UID] && j.DeletionTimestamp == nil {
			// A Job this controller has just created is in the status it wrote, which the
			// lister may not show yet (the Job's own event can come first): ask the API
			// before calling it unexpected.
			if !freshRead {
				freshRead = true
				if f, err := c.client.BatchV1().CronJobs(cj.Namespace).Get(ctx, cj.Name, metav1.GetOptions{}); err == nil && f.UID == cj.UID {
					fresh = f
				}
			}
			if fresh == nil || !isActiveRef(fresh.Status.Active, j.UID) {
				c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonUnexpectedJob, "Saw a job that the controller did not create or forgot: %s", j.Name)
			}
			kept = append(kept, jobRef(j))
		}
		if done && isActiveRef(cj.Status.Active, j.UID) {
			c.recorder.Eventf(cj, corev1.EventTypeNormal, ReasonSawCompletedJob, "Saw completed job: %s, condition: %v", j.Name, cond)
		}
		if done && cond == batchv1.JobComplete && j.Status.CompletionTime != nil {
			if status.LastSuccessfulTime == nil || status.LastSuccessfulTime.Before(j.Status.CompletionTime) {
				t := *j.Status.CompletionTime
				status.LastSuccessfulTime = &t
			}
		}
	}
	status.Active = kept
}

func isActiveRef(refs []corev1.ObjectReference, uid types.UID) bool {
	for _, r := range refs {
		if r.UID == uid {
			return true
		}
	}
	return false
}

// schedule starts the Job of the most recent due time when the rules allow it; it returns the
// next scheduled time to look again at.
func (c *Controller) schedule(ctx context.Context, cj *batchv1.CronJob, status *batchv1.CronJobStatus, now time.Time) (time.Time, error) {
	if cj.DeletionTimestamp != nil {
		return time.Time{}, nil
	}
	loc := time.UTC
	if cj.Spec.TimeZone != nil {
		l, err := time.LoadLocation(*cj.Spec.TimeZone)
		if err != nil {
			c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonUnknownTimeZone, "invalid timeZone: %q: %s", *cj.Spec.TimeZone, err)
			return time.Time{}, nil
		}
		loc = l
	}
	sched, err := ParseSchedule(cj.Spec.Schedule, loc)
	if err != nil {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonInvalidSchedule, "invalid schedule: %s : %s", cj.Spec.Schedule, err)
		return time.Time{}, nil
	}
	if cj.Spec.Suspend != nil && *cj.Spec.Suspend {
		return time.Time{}, nil
	}
	next := sched.Next(now)
	scheduled, missed := sched.MostRecent(Earliest(cj, now), now)
	if missed > MaxMissedStarts {
		c.recorder.Event(cj, corev1.EventTypeWarning, ReasonFailedNeedsStart, TooManyMissedMessage)
		return next, nil
	}
	if scheduled == nil {
		return next, nil
	}
	if d := cj.Spec.StartingDeadlineSeconds; d != nil && scheduled.Add(time.Duration(*d)*time.Second).Before(now) {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonMissSchedule, "Missed scheduled time to start a job: %s", scheduled.UTC().Format(time.RFC1123Z))
		return next, nil
	}
	if status.LastScheduleTime != nil && !scheduled.After(status.LastScheduleTime.Time) {
		return next, nil
	}
	// The Job of this very time may exist already (created by a sync whose status write was
	// lost): it is not a prior run, so record it instead of applying the concurrency policy.
	if want := jobFromTemplate(cj, *scheduled).Name; slices.ContainsFunc(status.Active, func(r corev1.ObjectReference) bool { return r.Name == want }) {
		t := metav1.NewTime(*scheduled)
		status.LastScheduleTime = &t
		return next, nil
	}
	switch cj.Spec.ConcurrencyPolicy {
	case batchv1.ForbidConcurrent:
		// status.active and the Job lister may both be stale: a Job shown running may have
		// finished, and a Job created by a sync whose status write was lost may not be listed
		// yet. Decide from the Jobs the API reports running, never from the caches alone.
		running, err := c.runningJobs(ctx, cj)
		if err != nil {
			return next, err
		}
		status.Active = nil
		for _, j := range running {
			status.Active = append(status.Active, jobRef(j))
		}
		if want := jobFromTemplate(cj, *scheduled).Name; slices.ContainsFunc(running, func(j *batchv1.Job) bool { return j.Name == want }) {
			t := metav1.NewTime(*scheduled)
			status.LastScheduleTime = &t
			return next, nil
		}
		if len(running) > 0 {
			// Skipped runs stay missed: lastScheduleTime does not move.
			c.recorder.Event(cj, corev1.EventTypeNormal, ReasonJobAlreadyActive, "Not starting job because prior execution is running and concurrency policy is Forbid")
			return next, nil
		}
	case batchv1.ReplaceConcurrent:
		var kept []corev1.ObjectReference
		var errs []error
		for _, ref := range status.Active {
			if err := c.deleteJob(ctx, cj, ref.Namespace, ref.Name, ref.UID); err != nil {
				errs = append(errs, err)
				kept = append(kept, ref)
			}
		}
		status.Active = kept
		if len(errs) > 0 {
			return next, errors.Join(errs...)
		}
	}
	job := jobFromTemplate(cj, *scheduled)
	created, err := c.client.BatchV1().Jobs(cj.Namespace).Create(ctx, job, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		// Created by an earlier sync whose status update was lost: adopt that result.
		existing, gerr := c.client.BatchV1().Jobs(cj.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if gerr != nil {
			return next, gerr
		}
		if ref := metav1.GetControllerOf(existing); ref == nil || ref.UID != cj.UID {
			c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating job: %v", err)
			return next, nil
		}
		created = existing
	case err != nil:
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return time.Time{}, nil
		}
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating job: %v", err)
		return next, err
	default:
		c.recorder.Eventf(cj, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created job %v", created.Name)
	}
	if done, _ := finished(created); !done && !isActiveRef(status.Active, created.UID) {
		status.Active = append(status.Active, jobRef(created))
	}
	t := metav1.NewTime(*scheduled)
	status.LastScheduleTime = &t
	return next, nil
}

// Earliest is where the window of due times starts: the last scheduled time (or the
// CronJob's creation), moved up to now - startingDeadlineSeconds when that is later.
func Earliest(cj *batchv1.CronJob, now time.Time) time.Time {
	earliest := cj.CreationTimestamp.Time
	if cj.Status.LastScheduleTime != nil {
		earliest = cj.Status.LastScheduleTime.Time
	}
	if d := cj.Spec.StartingDeadlineSeconds; d != nil {
		if deadline := now.Add(-time.Duration(*d) * time.Second); deadline.After(earliest) {
			earliest = deadline
		}
	}
	return earliest
}

// jobFromTemplate builds the Job for scheduled time t.
func jobFromTemplate(cj *batchv1.CronJob, t time.Time) *batchv1.Job {
	tmpl := cj.Spec.JobTemplate
	annotations := map[string]string{}
	for k, v := range tmpl.Annotations {
		annotations[k] = v
	}
	loc := time.UTC
	if cj.Spec.TimeZone != nil {
		if l, err := time.LoadLocation(*cj.Spec.TimeZone); err == nil {
			loc = l
		}
	}
	annotations[batchv1.CronJobScheduledTimestampAnnotation] = t.In(loc).Format(time.RFC3339)
	var lbls map[string]string
	if tmpl.Labels != nil {
		lbls = map[string]string{}
		for k, v := range tmpl.Labels {
			lbls[k] = v
		}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:            JobName(cj, t),
			Namespace:       cj.Namespace,
			Labels:          lbls,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, controllerKind)},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
}

func jobRef(j *batchv1.Job) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: j.Namespace, Name: j.Name,
		UID: j.UID, ResourceVersion: j.ResourceVersion}
}

// cleanupHistory deletes the oldest finished Jobs beyond the history limits.
func (c *Controller) cleanupHistory(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) error {
	if cj.DeletionTimestamp != nil {
		return nil
	}
	var succeeded, failed []*batchv1.Job
	for _, j := range jobs {
		if j.DeletionTimestamp != nil {
			continue
		}
		switch _, cond := finished(j); cond {
		case batchv1.JobComplete:
			succeeded = append(succeeded, j)
		case batchv1.JobFailed:
			failed = append(failed, j)
		}
	}
	limit := func(p *int32, def int32) int32 {
		if p == nil {
			return def
		}
		return *p
	}
	var errs []error
	for _, group := range []struct {
		jobs  []*batchv1.Job
		limit int32
	}{
		{succeeded, limit(cj.Spec.SuccessfulJobsHistoryLimit, defaultSuccessfulLimit)},
		{failed, limit(cj.Spec.FailedJobsHistoryLimit, defaultFailedLimit)},
	} {
		if int32(len(group.jobs)) <= group.limit {
			continue
		}
		sort.Slice(group.jobs, func(i, k int) bool { return startTime(group.jobs[i]).Before(startTime(group.jobs[k])) })
		for _, j := range group.jobs[:int32(len(group.jobs))-group.limit] {
			if err := c.deleteJob(ctx, cj, j.Namespace, j.Name, j.UID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func startTime(j *batchv1.Job) time.Time {
	if j.Status.StartTime != nil {
		return j.Status.StartTime.Time
	}
	return j.CreationTimestamp.Time
}

func (c *Controller) deleteJob(ctx context.Context, cj *batchv1.CronJob, ns, name string, uid types.UID) error {
	policy := metav1.DeletePropagationBackground
	err := c.client.BatchV1().Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, "FailedDelete", "Deleted job: %v", err)
		return fmt.Errorf("delete job %s/%s: %w", ns, name, err)
	}
	if err == nil {
		c.recorder.Eventf(cj, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted job %v", name)
	}
	return nil
}

// finished reports whether a Job has its Complete or Failed condition, and which.
func finished(j *batchv1.Job) (bool, batchv1.JobConditionType) {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true, c.Type
		}
	}
	return false, ""
}

// runningJobs lists, from the API rather than the lister, the Jobs of cj that have not
// finished and are not being deleted.
func (c *Controller) runningJobs(ctx context.Context, cj *batchv1.CronJob) ([]*batchv1.Job, error) {
	list, err := c.client.BatchV1().Jobs(cj.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list jobs of cronjob %s/%s: %w", cj.Namespace, cj.Name, err)
	}
	var out []*batchv1.Job
	for i := range list.Items {
		j := &list.Items[i]
		if ref := metav1.GetControllerOf(j); ref == nil || ref.UID != cj.UID || j.DeletionTimestamp != nil {
			continue
		}
		if done, _ := finished(j); !done {
			out = append(out, j)
		}
	}
	return out, nil
}

// writeStatus writes status. The CronJob came from the lister and may be stale: on a conflict
// it re-reads the CronJob from the API and merges, so that the record of a Job this sync
// created is not lost (retrying a few times).
func (c *Controller) writeStatus(ctx context.Context, cj *batchv1.CronJob, status *batchv1.CronJobStatus) error {
	if cj.Status.String() == status.String() {
		return nil
	}
	cur := cj.DeepCopy()
	cur.Status = *status
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		_, err := c.client.BatchV1().CronJobs(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh, gerr := c.client.BatchV1().CronJobs(cj.Namespace).Get(ctx, cj.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		if fresh.UID != cj.UID {
			return nil // deleted and recreated: nothing of ours to record
		}
		merged, merr := c.mergeStatus(ctx, status, &fresh.Status)
		if merr != nil {
			return merr
		}
		fresh.Status = *merged
		cur = fresh
		return err
	})
	if err != nil {
		return fmt.Errorf("update status of cronjob %s/%s: %w", cj.Namespace, cj.Name, err)
	}
	return nil
}

// mergeStatus combines the status this sync computed with the one another writer stored:
// the later schedule and success times win, and active keeps this sync's Jobs plus the stored
// ones the API still reports running.
func (c *Controller) mergeStatus(ctx context.Context, ours, stored *batchv1.CronJobStatus) (*batchv1.CronJobStatus, error) {
	out := ours.DeepCopy()
	later := func(a, b *metav1.Time) *metav1.Time {
		if a == nil || (b != nil && a.Before(b)) {
			return b.DeepCopy()
		}
		return a.DeepCopy()
	}
	out.LastScheduleTime = later(ours.LastScheduleTime, stored.LastScheduleTime)
	out.LastSuccessfulTime = later(ours.LastSuccessfulTime, stored.LastSuccessfulTime)
	for _, ref := range stored.Active {
		if isActiveRef(out.Active, ref.UID) {
			continue
		}
		j, err := c.client.BatchV1().Jobs(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if done, _ := finished(j); j.UID == ref.UID && !done {
			out.Active = append(out.Active, ref)
		}
	}
	return out, nil
}
