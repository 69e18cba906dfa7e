package cronjob_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/cronjob"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestNextDayOfMonthOrDayOfWeek(t *testing.T) {
	// "0 0 13 * 5" fires every Friday and every 13th: restricted day fields combine with OR.
	s, err := cronjob.ParseSchedule("0 0 13 * 5", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for cur := at("2024-10-01T00:00:00Z"); len(got) < 4; {
		cur = s.Next(cur)
		got = append(got, cur.Format("Mon 2006-01-02 15:04"))
	}
	want := "[Fri 2024-10-04 00:00 Fri 2024-10-11 00:00 Sun 2024-10-13 00:00 Fri 2024-10-18 00:00]"
	if fmt.Sprint(got) != want {
		t.Fatalf("next runs = %v, want %v", got, want)
	}
	hourly, _ := cronjob.ParseSchedule("@hourly", nil)
	if n := hourly.Next(at("2024-10-01T10:15:00Z")); !n.Equal(at("2024-10-01T11:00:00Z")) {
		t.Fatalf("@hourly next = %v", n)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	daily, _ := cronjob.ParseSchedule("0 9 * * *", berlin)
	if n := daily.Next(at("2024-10-01T00:00:00Z")); !n.Equal(at("2024-10-01T07:00:00Z")) {
		t.Fatalf("09:00 Europe/Berlin next = %v (UTC %v)", n, n.UTC())
	}
}

func TestOutageExamples(t *testing.T) {
	every, _ := cronjob.ParseSchedule("* * * * *", nil)
	for _, tc := range []struct {
		name        string
		deadline    *int64
		now         string
		wantStart   bool
		wantMissed  int
		wantLatestT string
	}{
		// Down 08:29-10:21, no startingDeadlineSeconds: more than 100 missed, no Job.
		{"too many missed without a deadline", nil, "2024-05-01T10:21:00Z", false, 101, ""},
		// startingDeadlineSeconds 200: only the last 200 s count; a Job starts at 10:22.
		{"deadline 200 s bounds the missed runs", ptr.To[int64](200), "2024-05-01T10:22:00Z", true, 4, "2024-05-01T10:22:00Z"},
		{"just up", nil, "2024-05-01T08:30:30Z", true, 1, "2024-05-01T08:30:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "hello", CreationTimestamp: metav1.NewTime(at("2024-05-01T08:29:00Z"))}}
			cj.Spec.StartingDeadlineSeconds = tc.deadline
			now := at(tc.now)
			latest, missed := every.MostRecent(cronjob.Earliest(cj, now), now)
			start := missed <= cronjob.MaxMissedStarts && latest != nil
			if start != tc.wantStart || missed != tc.wantMissed {
				t.Fatalf("start %v missed %d, want start %v missed %d", start, missed, tc.wantStart, tc.wantMissed)
			}
			if tc.wantStart && !latest.Equal(at(tc.wantLatestT)) {
				t.Fatalf("latest = %v, want %v", latest, tc.wantLatestT)
			}
		})
	}
}

func newCronJob(name, schedule string, mutate func(*batchv1.CronJob)) *batchv1.CronJob {
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.CronJobSpec{Schedule: schedule, JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyOnFailure,
				Containers: []corev1.Container{{Name: "hello", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent,
					Command: []string{"/bin/sh", "-c", "date; echo Hello from the Kubernetes cluster"}}},
			}},
		}}},
	}
	if mutate != nil {
		mutate(cj)
	}
	return cj
}

func ownedJobs(client kubernetes.Interface, ns string, cj *batchv1.CronJob) (map[string]batchv1.Job, error) {
	list, err := client.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]batchv1.Job{}
	for _, j := range list.Items {
		if ref := metav1.GetControllerOf(&j); ref != nil && ref.UID == cj.UID && j.DeletionTimestamp == nil {
			out[j.Name] = j
		}
	}
	return out, nil
}

func completeJob(client kubernetes.Interface, j batchv1.Job, now time.Time) error {
	start, end := metav1.NewTime(now.Add(-time.Second)), metav1.NewTime(now)
	j.Status.StartTime, j.Status.CompletionTime, j.Status.Succeeded = &start, &end, 1
	j.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: end, Reason: batchv1.JobReasonCompletionsReached},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: end, Reason: batchv1.JobReasonCompletionsReached},
	}
	_, err := client.BatchV1().Jobs(j.Namespace).UpdateStatus(context.Background(), &j, metav1.UpdateOptions{})
	return err
}

func TestCronJobController(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	_, client, c := controllertest.StartController(t, func(cc *controllers.Context) (*cronjob.Controller, error) {
		return cronjob.NewController(cc, cronjob.Config{Clock: clk})
	})
	ctx := context.Background()
	const ns = "cron"
	controllertest.Namespace(t, client, ns)
	create := func(t *testing.T, cj *batchv1.CronJob) *batchv1.CronJob {
		t.Helper()
		// Each case starts at the wall clock, so the background workers see nothing due yet.
		clk.SetTime(time.Now())
		out, err := client.BatchV1().CronJobs(ns).Create(ctx, cj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create cronjob %s: %v", cj.Name, err)
		}
		return out
	}
	// syncUntil syncs the CronJob (informers may lag) until cond holds.
	syncUntil := func(t *testing.T, cj *batchv1.CronJob, what string, cond func(map[string]batchv1.Job) bool) map[string]batchv1.Job {
		t.Helper()
		var jobs map[string]batchv1.Job
		controllertest.Eventually(t, 15*time.Second, what, func() (bool, error) {
			// The background workers sync the same CronJob: a conflict here is retried.
			_ = c.Sync(ctx, ns+"/"+cj.Name)
			var err error
			jobs, err = ownedJobs(client, ns, cj)
			return err == nil && cond(jobs), err
		})
		return jobs
	}
	// minuteAfter sets the fake clock to 5 s past the first minute matching step after base.
	minuteAfter := func(base time.Time, step int) time.Time {
		m := base.Truncate(time.Duration(step) * time.Minute).Add(time.Duration(step) * time.Minute)
		clk.SetTime(m.Add(5 * time.Second))
		return m
	}
	name := func(cj *batchv1.CronJob, t time.Time) string { return fmt.Sprintf("%s-%d", cj.Name, t.Unix()/60) }

	t.Run("creates Jobs at scheduled times", func(t *testing.T) {
		cj := create(t, newCronJob("every5", "*/5 * * * *", nil))
		t1 := minuteAfter(cj.CreationTimestamp.Time, 5)
		jobs := syncUntil(t, cj, "first job", func(j map[string]batchv1.Job) bool { return len(j) == 1 })
		j, ok := jobs[name(cj, t1)]
		if !ok {
			t.Fatalf("jobs = %v, want %s", keys(jobs), name(cj, t1))
		}
		if got := j.Annotations[batchv1.CronJobScheduledTimestampAnnotation]; got != t1.UTC().Format(time.RFC3339) {
			t.Fatalf("scheduled-timestamp annotation = %q", got)
		}
		t2 := minuteAfter(t1, 5)
		jobs = syncUntil(t, cj, "second job", func(j map[string]batchv1.Job) bool { return len(j) == 2 })
		if _, ok := jobs[name(cj, t2)]; !ok {
			t.Fatalf("jobs = %v, want %s", keys(jobs), name(cj, t2))
		}
		controllertest.Eventually(t, 10*time.Second, "status lastScheduleTime and active", func() (bool, error) {
			// The background workers sync the same CronJob: a conflict here is retried.
			_ = c.Sync(ctx, ns+"/"+cj.Name)
			cur, err := client.BatchV1().CronJobs(ns).Get(ctx, cj.Name, metav1.GetOptions{})
			return err == nil && cur.Status.LastScheduleTime != nil && cur.Status.LastScheduleTime.Time.Equal(t2) && len(cur.Status.Active) == 2, err
		})
	})

	t.Run("Forbid skips while active", func(t *testing.T) {
		cj := create(t, newCronJob("forbid", "* * * * *", func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = batchv1.ForbidConcurrent }))
		t1 := minuteAfter(cj.CreationTimestamp.Time, 1)
		jobs := syncUntil(t, cj, "first job", func(j map[string]batchv1.Job) bool { return len(j) == 1 })
		controllertest.Eventually(t, 10*time.Second, "active recorded", func() (bool, error) {
			cur, err := client.BatchV1().CronJobs(ns).Get(ctx, cj.Name, metav1.GetOptions{})
			return err == nil && len(cur.Status.Active) == 1, err
		})
		time.Sleep(300 * time.Millisecond) // let the controller's informer see the status
		t2 := minuteAfter(t1, 1)
		for i := 0; i < 3; i++ {
			if err := c.Sync(ctx, ns+"/"+cj.Name); err != nil {
				t.Fatal(err)
			}
		}
		if now, _ := ownedJobs(client, ns, cj); len(now) != 1 {
			t.Fatalf("Forbid started a second job while one is active: %v", keys(now))
		}
		// Move the clock to t3 before the active Job finishes. The background workers sync on
		// the Job's update event at once; were the clock still at t2, a sync seeing the Job
		// finished would rightly start the missed t2 run (no startingDeadlineSeconds, and a
		// skipped run stays missed), racing with this test's expectation that t2 is skipped.
		t3 := minuteAfter(t2, 1)
		if err := completeJob(client, jobs[name(cj, t1)], clk.Now()); err != nil {
			t.Fatal(err)
		}
		jobs = syncUntil(t, cj, "job after the active one finished", func(j map[string]batchv1.Job) bool { return len(j) == 2 })
		if _, ok := jobs[name(cj, t3)]; !ok {
			t.Fatalf("jobs = %v, want %s (t2 is skipped)", keys(jobs), name(cj, t3))
		}
		controllertest.Eventually(t, 10*time.Second, "lastSuccessfulTime and lastScheduleTime", func() (bool, error) {
			// The background workers sync the same CronJob: a conflict here is retried.
			_ = c.Sync(ctx, ns+"/"+cj.Name)
			cur, err := client.BatchV1().CronJobs(ns).Get(ctx, cj.Name, metav1.GetOptions{})
			return err == nil && cur.Status.LastSuccessfulTime != nil && cur.Status.LastScheduleTime != nil &&
				cur.Status.LastScheduleTime.Time.Equal(t3) && len(cur.Status.Active) == 1 && cur.Status.Active[0].Name == name(cj, t3), err
		})
	})

	t.Run("Replace deletes the running Job", func(t *testing.T) {
		cj := create(t, newCronJob("replace", "* * * * *", func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = batchv1.ReplaceConcurrent }))
		t1 := minuteAfter(cj.CreationTimestamp.Time, 1)
		syncUntil(t, cj, "first job", func(j map[string]batchv1.Job) bool { return len(j) == 1 })
		t2 := minuteAfter(t1, 1)
		jobs := syncUntil(t, cj, "replacement", func(j map[string]batchv1.Job) bool {
			_, ok := j[name(cj, t2)]
			return ok && len(j) == 1
		})
		_ = jobs
		if _, err := client.BatchV1().Jobs(ns).Get(ctx, name(cj, t1), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("replaced job still there: %v", err)
		}
	})

	t.Run("history limits", func(t *testing.T) {
		cj := create(t, newCronJob("hist", "* * * * *", func(cj *batchv1.CronJob) {
			cj.Spec.SuccessfulJobsHistoryLimit = ptr.To[int32](1)
		}))
		tm := cj.CreationTimestamp.Time
		var last time.Time
		for i := 0; i < 3; i++ {
			tm = minuteAfter(tm, 1)
			want := name(cj, tm)
			jobs := syncUntil(t, cj, "job "+want, func(j map[string]batchv1.Job) bool { _, ok := j[want]; return ok })
			if err := completeJob(client, jobs[want], clk.Now()); err != nil {
				t.Fatal(err)
			}
			last = tm
		}
		syncUntil(t, cj, "only the newest finished job kept", func(j map[string]batchv1.Job) bool {
			_, ok := j[name(cj, last)]
			return ok && len(j) == 1
		})
	})

	t.Run("too many missed start times", func(t *testing.T) {
		cj := create(t, newCronJob("missed", "* * * * *", nil))
		clk.SetTime(cj.CreationTimestamp.Add(3 * time.Hour))
		controllertest.Eventually(t, 15*time.Second, "FailedNeedsStart event", func() (bool, error) {
			// The background workers sync the same CronJob: a conflict here is retried.
			_ = c.Sync(ctx, ns+"/"+cj.Name)
			evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=missed"})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.Reason == "FailedNeedsStart" && e.Type == corev1.EventTypeWarning && e.Message == cronjob.TooManyMissedMessage {
					return true, nil
				}
			}
			return false, nil
		})
		if jobs, _ := ownedJobs(client, ns, cj); len(jobs) != 0 {
			t.Fatalf("started %v despite more than 100 missed start times", keys(jobs))
		}
	})
}

func keys(m map[string]batchv1.Job) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestJustCreatedJobIsNotUnexpected: the Job's own event can reach the controller before the
// status that lists it (both written by the controller). That Job is no "UnexpectedJob"; a
// running Job that the status in the API does not list either is.
func TestJustCreatedJobIsNotUnexpected(t *testing.T) {
	created := at("2026-12-05T13:00:00Z")
	scheduled := at("2026-12-05T13:44:00Z")
	cj := newCronJob("tick", "* * * * *", nil)
	cj.Namespace, cj.UID, cj.CreationTimestamp = "qa", "cj-uid", metav1.NewTime(created)
	job := func(name string, uid types.UID) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "qa", UID: uid,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))}}}
	}
	ours := job(fmt.Sprintf("tick-%d", scheduled.Unix()/60), "job-ours")
	stray := job("tick-by-hand", "job-stray")

	// The API has the status the controller wrote; the lister still has the one before.
	written := cj.DeepCopy()
	written.Status.Active = []corev1.ObjectReference{{Kind: "Job", APIVersion: "batch/v1", Namespace: "qa", Name: ours.Name, UID: ours.UID}}
	written.Status.LastScheduleTime = &metav1.Time{Time: scheduled}
	client := fake.NewClientset(written, ours, stray)
	factory := informers.NewSharedInformerFactory(client, 0)
	recorder := record.NewFakeRecorder(10)
	c, err := cronjob.NewController(&controllers.Context{Client: client, Informers: factory,
		Recorder: func(string) record.EventRecorder { return recorder }},
		cronjob.Config{Clock: clocktesting.NewFakeClock(scheduled.Add(5 * time.Second))})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []any{cj, ours, stray} {
		var err error
		switch o := o.(type) {
		case *batchv1.CronJob:
			err = factory.Batch().V1().CronJobs().Informer().GetIndexer().Add(o)
		case *batchv1.Job:
			err = factory.Batch().V1().Jobs().Informer().GetIndexer().Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Sync(context.Background(), "qa/tick"); err != nil {
		t.Fatal(err)
	}
	close(recorder.Events)
	var got []string
	for e := range recorder.Events {
		got = append(got, e)
	}
	want := []string{"Warning UnexpectedJob Saw a job that the controller did not create or forgot: tick-by-hand"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %q, want %q", got, want)
	}
	cur, err := client.BatchV1().CronJobs("qa").Get(context.Background(), "tick", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var active []string
	for _, r := range cur.Status.Active {
		active = append(active, r.Name)
	}
	if fmt.Sprint(active) != fmt.Sprint([]string{ours.Name, stray.Name}) {
		t.Errorf("status.active %v, want both running Jobs", active)
	}
	jobs, err := client.BatchV1().Jobs("qa").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(jobs.Items) != 2 {
		t.Errorf("Jobs after the sync: %d (%v), want the 2 there were", len(jobs.Items), err)
	}
}
