package validation

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The Job hello example of the Kubernetes documentation.
const jobYAML = `
apiVersion: batch/v1
kind: Job
metadata:
  name: hello
spec:
  template:
    spec:
      containers:
      - name: hello
        image: busybox:1.28
        command: ['sh', '-c', 'echo "Hello, Kubernetes!" && sleep 3600']
      restartPolicy: OnFailure
`

// application/job/cronjob.yaml of the Kubernetes documentation.
const cronJobYAML = `
apiVersion: batch/v1
kind: CronJob
metadata:
  name: hello
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: hello
            image: busybox
            imagePullPolicy: IfNotPresent
            command:
            - /bin/sh
            - -c
            - date; echo Hello from the Kubernetes cluster
          restartPolicy: OnFailure
`

const testJobUID = "8a3b2f2e-5f0c-4f43-9d5e-0c6c2b7d1a11"

// testJob applies the Job defaults, including the generated selector and pod labels.
func testJob(t *testing.T) *batchv1.Job {
	j := fixture[batchv1.Job](t, jobYAML, true)
	j.Spec.Parallelism, j.Spec.Completions, j.Spec.BackoffLimit = ptr.To[int32](1), ptr.To[int32](1), ptr.To[int32](6)
	j.Spec.CompletionMode = ptr.To(batchv1.NonIndexedCompletion)
	j.Spec.Suspend = ptr.To(false)
	j.Spec.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed)
	j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.ControllerUidLabel: testJobUID}}
	j.Spec.Template.Labels = map[string]string{batchv1.ControllerUidLabel: testJobUID, batchv1.JobNameLabel: j.Name}
	return j
}

func testCronJob(t *testing.T) *batchv1.CronJob {
	cj := fixture[batchv1.CronJob](t, cronJobYAML, true)
	cj.Spec.ConcurrencyPolicy = batchv1.AllowConcurrent
	cj.Spec.Suspend = ptr.To(false)
	cj.Spec.SuccessfulJobsHistoryLimit, cj.Spec.FailedJobsHistoryLimit = ptr.To[int32](3), ptr.To[int32](1)
	cj.Spec.JobTemplate.Spec.BackoffLimit = ptr.To[int32](6)
	return cj
}

func TestValidateJob(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*batchv1.Job)
		want   []string
	}{
		{"job hello", func(*batchv1.Job) {}, none()},
		{"indexed", func(j *batchv1.Job) {
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
			j.Spec.Completions, j.Spec.Parallelism = ptr.To[int32](5), ptr.To[int32](2)
			j.Spec.BackoffLimitPerIndex, j.Spec.MaxFailedIndexes = ptr.To[int32](1), ptr.To[int32](2)
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0,2-4")}}}
		}, none()},
		{"pod failure policy", func(j *batchv1.Job) {
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
			j.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1, 42}}},
				{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
					{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
			}}
		}, none()},
		{"manual selector", func(j *batchv1.Job) {
			j.Spec.ManualSelector = ptr.To(true)
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "hello"}}
			j.Spec.Template.Labels = map[string]string{"app": "hello"}
		}, none()},
		{"restartPolicy Always", func(j *batchv1.Job) {
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
		}, errs(nsup("spec.template.spec.restartPolicy"))},
		{"restartPolicy missing", func(j *batchv1.Job) {
			j.Spec.Template.Spec.RestartPolicy = ""
		}, errs(req("spec.template.spec.restartPolicy"))},
		{"negative parallelism", func(j *batchv1.Job) { j.Spec.Parallelism = ptr.To[int32](-1) }, errs(inv("spec.parallelism"))},
		{"negative completions", func(j *batchv1.Job) { j.Spec.Completions = ptr.To[int32](-1) }, errs(inv("spec.completions"))},
		{"negative backoffLimit", func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To[int32](-6) }, errs(inv("spec.backoffLimit"))},
		{"zero activeDeadlineSeconds", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To[int64](0) }, errs(inv("spec.activeDeadlineSeconds"))},
		{"negative ttl", func(j *batchv1.Job) { j.Spec.TTLSecondsAfterFinished = ptr.To[int32](-1) }, errs(inv("spec.ttlSecondsAfterFinished"))},
		{"unknown completionMode", func(j *batchv1.Job) {
			j.Spec.CompletionMode = ptr.To[batchv1.CompletionMode]("Ordered")
		}, errs(nsup("spec.completionMode"))},
		{"indexed without completions", func(j *batchv1.Job) {
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
			j.Spec.Completions = nil
		}, errs(req("spec.completions"))},
		{"indexed too many completions", func(j *batchv1.Job) {
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
			j.Spec.Completions = ptr.To[int32](100001)
		}, errs(inv("spec.completions"))},
		{"backoffLimitPerIndex needs Indexed", func(j *batchv1.Job) {
			j.Spec.BackoffLimitPerIndex = ptr.To[int32](1)
		}, errs(forb("spec.backoffLimitPerIndex"))},
		{"no selector", func(j *batchv1.Job) { j.Spec.Selector = nil }, errs(req("spec.selector"))},
		{"selector does not match", func(j *batchv1.Job) {
			j.Spec.Template.Labels = map[string]string{"app": "hello"}
		}, errs(inv("spec.template.metadata.labels"))},
		{"pod failure policy needs Never", func(j *batchv1.Job) {
			j.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionCount, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0}}}}}
		}, errs(inv("spec.template.spec.restartPolicy"))},
		{"pod failure rule without requirement", func(j *batchv1.Job) {
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
			j.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: "Retry"}}}
		}, errs(nsup("spec.podFailurePolicy.rules[0].action"), inv("spec.podFailurePolicy.rules[0]"))},
		{"podReplacementPolicy", func(j *batchv1.Job) {
			j.Spec.PodReplacementPolicy = ptr.To[batchv1.PodReplacementPolicy]("Never")
		}, errs(nsup("spec.podReplacementPolicy"))},
		{"successPolicy needs Indexed", func(j *batchv1.Job) {
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To[int32](1)}}}
		}, errs(inv("spec.successPolicy"))},
		{"managedBy", func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To("not a path") }, errs(inv("spec.managedBy"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := testJob(t)
			c.mutate(j)
			checkErrs(t, ValidateJob(j), c.want)
		})
	}
}

func TestValidateJobUpdate(t *testing.T) {
	old := testJob(t)
	old.Status.StartTime = &metav1.Time{Time: time.Now()}

	ok := old.DeepCopy()
	ok.Spec.Suspend = ptr.To(true)
	ok.Spec.Parallelism = ptr.To[int32](3)
	ok.Spec.ActiveDeadlineSeconds = ptr.To[int64](600)
	ok.Spec.TTLSecondsAfterFinished = ptr.To[int32](100)
	checkErrs(t, ValidateJobUpdate(ok, old), none())

	cases := []struct {
		name   string
		mutate func(*batchv1.Job)
		want   []string
	}{
		{"template", func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Image = "busybox:1.36" }, errs(inv("spec.template"))},
		{"selector", func(j *batchv1.Job) {
			j.Spec.Selector.MatchLabels["x"] = "y"
			j.Spec.Template.Labels["x"] = "y"
		}, errs(inv("spec.selector"), inv("spec.template"))},
		{"completions", func(j *batchv1.Job) { j.Spec.Completions = ptr.To[int32](3) }, errs(inv("spec.completions"))},
		{"completionMode", func(j *batchv1.Job) {
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		}, errs(inv("spec.completionMode"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := old.DeepCopy()
			c.mutate(j)
			checkErrs(t, ValidateJobUpdate(j, old), c.want)
		})
	}

	// A suspended Job that never started may move its pods (upstream's mutable scheduling
	// directives), but not change what they run.
	suspended := testJob(t)
	suspended.Spec.Suspend = ptr.To(true)
	j := suspended.DeepCopy()
	j.Spec.Template.Spec.NodeSelector = map[string]string{"site": "shop-12"}
	j.Spec.Template.Annotations = map[string]string{"note": "moved"}
	checkErrs(t, ValidateJobUpdate(j, suspended), none())
	j.Spec.Template.Spec.Containers[0].Image = "busybox:1.36"
	checkErrs(t, ValidateJobUpdate(j, suspended), errs(inv("spec.template")))

	// Elastic Indexed Jobs scale completions with parallelism.
	indexed := testJob(t)
	indexed.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	indexed.Spec.Completions, indexed.Spec.Parallelism = ptr.To[int32](4), ptr.To[int32](4)
	j = indexed.DeepCopy()
	j.Spec.Completions, j.Spec.Parallelism = ptr.To[int32](6), ptr.To[int32](6)
	checkErrs(t, ValidateJobUpdate(j, indexed), none())

	j = old.DeepCopy()
	j.Status.Active, j.Status.Failed = -1, 2
	checkErrs(t, ValidateJobStatusUpdate(j, old), errs(inv("status.active")))
}

func TestValidateCronJob(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*batchv1.CronJob)
		want   []string
	}{
		{"cronjob.yaml", func(*batchv1.CronJob) {}, none()},
		{"both day fields restricted", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "0 0 13 * 5" }, none()},
		{"macro and time zone", func(cj *batchv1.CronJob) {
			cj.Spec.Schedule = "@daily"
			cj.Spec.TimeZone = ptr.To("Europe/Berlin")
			cj.Spec.ConcurrencyPolicy = batchv1.ReplaceConcurrent
			cj.Spec.StartingDeadlineSeconds = ptr.To[int64](200)
		}, none()},
		{"names, ranges, steps", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "*/15 8-18/2 1,15 JAN-jun mon-FRI" }, none()},
		{"52-character name", func(cj *batchv1.CronJob) { cj.Name = strings.Repeat("a", 52) }, none()},
		{"53-character name", func(cj *batchv1.CronJob) { cj.Name = strings.Repeat("a", 53) }, errs(inv("metadata.name"))},
		{"no schedule", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "" }, errs(req("spec.schedule"))},
		{"four fields", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "* * * *" }, errs(inv("spec.schedule"))},
		{"minute out of range", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "60 * * * *" }, errs(inv("spec.schedule"))},
		{"unknown macro", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "@fortnightly" }, errs(inv("spec.schedule"))},
		{"TZ in schedule", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "TZ=UTC 0 * * * *" }, errs(inv("spec.schedule"))},
		{"CRON_TZ in schedule", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "CRON_TZ=Europe/Paris 0 * * * *" }, errs(inv("spec.schedule"))},
		{"unknown time zone", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = ptr.To("Mars/Olympus_Mons") }, errs(inv("spec.timeZone"))},
		{"Local time zone", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = ptr.To("Local") }, errs(inv("spec.timeZone"))},
		{"concurrencyPolicy", func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = "Queue" }, errs(nsup("spec.concurrencyPolicy"))},
		{"negative startingDeadlineSeconds", func(cj *batchv1.CronJob) {
			cj.Spec.StartingDeadlineSeconds = ptr.To[int64](-1)
		}, errs(inv("spec.startingDeadlineSeconds"))},
		{"negative history limits", func(cj *batchv1.CronJob) {
			cj.Spec.SuccessfulJobsHistoryLimit, cj.Spec.FailedJobsHistoryLimit = ptr.To[int32](-1), ptr.To[int32](-1)
		}, errs(inv("spec.successfulJobsHistoryLimit"), inv("spec.failedJobsHistoryLimit"))},
		{"jobTemplate restartPolicy", func(cj *batchv1.CronJob) {
			cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
		}, errs(nsup("spec.jobTemplate.spec.template.spec.restartPolicy"))},
		{"jobTemplate selector", func(cj *batchv1.CronJob) {
			cj.Spec.JobTemplate.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
		}, errs(inv("spec.jobTemplate.spec.selector"))},
		{"jobTemplate negative backoffLimit", func(cj *batchv1.CronJob) {
			cj.Spec.JobTemplate.Spec.BackoffLimit = ptr.To[int32](-1)
		}, errs(inv("spec.jobTemplate.spec.backoffLimit"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cj := testCronJob(t)
			c.mutate(cj)
			checkErrs(t, ValidateCronJob(cj), c.want)
		})
	}

	cj := testCronJob(t)
	cj.Spec.Schedule = "TZ=UTC 0 * * * *"
	if got := ValidateCronJob(cj).ToAggregate().Error(); !strings.Contains(got, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead") {
		t.Errorf("TZ message: %s", got)
	}

	// An object stored before the rule keeps its TZ= schedule across updates, unless it also
	// sets timeZone; the 52-character limit is not re-applied.
	old := testCronJob(t)
	old.Name = strings.Repeat("a", 60)
	old.Spec.Schedule = "TZ=UTC 0 * * * *"
	upd := old.DeepCopy()
	upd.Spec.Suspend = ptr.To(true)
	checkErrs(t, ValidateCronJobUpdate(upd, old), none())
	upd.Spec.TimeZone = ptr.To("UTC")
	checkErrs(t, ValidateCronJobUpdate(upd, old), errs(inv("spec.schedule")))
}

func TestParseCronSchedule(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse("2006-01-02 15:04 Mon", s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	cases := []struct {
		spec string
		when string
		want bool
	}{
		{"* * * * *", "2026-11-29 14:51 Sun", true},
		// Both day fields restricted combine with OR.
		{"0 0 13 * 5", "2026-11-13 00:00 Fri", true},
		{"0 0 13 * 5", "2026-11-20 00:00 Fri", true},
		{"0 0 13 * 5", "2026-10-13 00:00 Tue", true},
		{"0 0 13 * 5", "2026-10-14 00:00 Wed", false},
		{"0 0 13 * 5", "2026-11-13 00:01 Fri", false},
		// One day field restricted: AND with the other "*".
		{"0 0 * * 5", "2026-11-13 00:00 Fri", true},
		{"0 0 * * 5", "2026-11-14 00:00 Sat", false},
		// 7 is Sunday too.
		{"30 2 * * 7", "2026-11-29 02:30 Sun", true},
		{"30 2 * * SUN", "2026-11-29 02:30 Sun", true},
		{"*/20 * * * *", "2026-11-29 14:40 Sun", true},
		{"*/20 * * * *", "2026-11-29 14:50 Sun", false},
		{"5/20 * * * *", "2026-11-29 14:45 Sun", true},
		{"0 9-17/4 * * *", "2026-11-29 13:00 Sun", true},
		{"0 9-17/4 * * *", "2026-11-29 15:00 Sun", false},
		{"@hourly", "2026-11-29 15:00 Sun", true},
		{"@yearly", "2027-01-01 00:00 Fri", true},
		{"@weekly", "2026-11-29 00:00 Sun", true},
		{"0 0 1 feb,DEC *", "2026-12-01 00:00 Tue", true},
	}
	for _, c := range cases {
		s, err := ParseCronSchedule(c.spec)
		if err != nil {
			t.Errorf("%q: %v", c.spec, err)
			continue
		}
		if got := s.Matches(at(c.when)); got != c.want {
			t.Errorf("%q at %s: got %v, want %v", c.spec, c.when, got, c.want)
		}
	}
	for _, bad := range []string{"", "* * * * * *", "61 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *",
		"* * * * 8", "*/0 * * * *", "5-1 * * * *", "a * * * *", "* * * FOO *", "1,,2 * * * *", "@every 5m"} {
		if _, err := ParseCronSchedule(bad); err == nil {
			t.Errorf("%q: parsed, want an error", bad)
		}
	}
}
