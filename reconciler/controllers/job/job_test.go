package job_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/job"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

func TestBackoffDelay(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{{1, 10 * time.Second}, {2, 20 * time.Second}, {3, 40 * time.Second}, {6, 320 * time.Second}, {7, 6 * time.Minute}, {30, 6 * time.Minute}} {
		if got := job.BackoffDelay(10*time.Second, 6*time.Minute, tc.failures); got != tc.want {
			t.Errorf("BackoffDelay(%d) = %v, want %v", tc.failures, got, tc.want)
		}
	}
}

func newJob(name string, mutate func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: "busybox:1.28", Command: []string{"true"}}},
		}}},
	}
	mutate(j)
	return j
}

// jobPods returns the pods of job name that are neither finished nor being deleted.
func jobPods(client kubernetes.Interface, ns, name string) ([]corev1.Pod, error) {
	list, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + name})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out, nil
}

// finishPod plays the node agent: the pod ends with phase and exit code.
func finishPod(client kubernetes.Interface, pod corev1.Pod, phase corev1.PodPhase, exitCode int32) error {
	pod.Status.Phase = phase
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "busybox:1.28",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: metav1.Now()}}}}
	_, err := client.CoreV1().Pods(pod.Namespace).UpdateStatus(context.Background(), &pod, metav1.UpdateOptions{})
	return err
}

func condition(j *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if j.Status.Conditions[i].Type == t && j.Status.Conditions[i].Status == corev1.ConditionTrue {
			return &j.Status.Conditions[i]
		}
	}
	return nil
}

// waitCondition waits for condition t and returns the Job.
func waitCondition(t *testing.T, client kubernetes.Interface, ns, name string, ct batchv1.JobConditionType, timeout time.Duration) *batchv1.Job {
	t.Helper()
	var j *batchv1.Job
	controllertest.Eventually(t, timeout, fmt.Sprintf("job %s condition %s", name, ct), func() (bool, error) {
		var err error
		j, err = client.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && condition(j, ct) != nil, err
	})
	return j
}

func TestJobController(t *testing.T) {
	cfg := job.DefaultConfig()
	cfg.BackoffBase = 50 * time.Millisecond
	cfg.BackoffMax = 200 * time.Millisecond
	_, client, _ := controllertest.StartController(t, func(c *controllers.Context) (*job.Controller, error) {
		return job.NewController(c, cfg)
	})
	ctx := context.Background()
	const ns = "jobs"
	controllertest.Namespace(t, client, ns)
	create := func(t *testing.T, j *batchv1.Job) {
		t.Helper()
		if _, err := client.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create job %s: %v", j.Name, err)
		}
	}

	t.Run("completions 5 parallelism 2", func(t *testing.T) {
		create(t, newJob("five", func(j *batchv1.Job) { j.Spec.Completions, j.Spec.Parallelism = ptr.To[int32](5), ptr.To[int32](2) }))
		seen := sets.New[string]()
		controllertest.Eventually(t, 60*time.Second, "job five to complete", func() (bool, error) {
			pods, err := jobPods(client, ns, "five")
			if err != nil {
				return false, err
			}
			if len(pods) > 2 {
				t.Fatalf("%d active pods, parallelism is 2", len(pods))
			}
			for _, p := range pods {
				if !hasString(p.Finalizers, batchv1.JobTrackingFinalizer) {
					t.Fatalf("pod %s lacks the tracking finalizer: %v", p.Name, p.Finalizers)
				}
				seen.Insert(p.Name)
				if err := finishPod(client, p, corev1.PodSucceeded, 0); err != nil && !apierrors.IsConflict(err) {
					return false, err
				}
			}
			j, err := client.BatchV1().Jobs(ns).Get(ctx, "five", metav1.GetOptions{})
			return err == nil && condition(j, batchv1.JobComplete) != nil, err
		})
		j := waitCondition(t, client, ns, "five", batchv1.JobComplete, 10*time.Second)
		if j.Status.Succeeded != 5 || j.Status.Active != 0 || j.Status.CompletionTime == nil || condition(j, batchv1.JobSuccessCriteriaMet) == nil {
			t.Fatalf("status = %+v", j.Status)
		}
		if seen.Len() != 5 {
			t.Fatalf("ran %d pods, want 5: %v", seen.Len(), sets.List(seen))
		}
		controllertest.Eventually(t, 10*time.Second, "finalizers removed", func() (bool, error) {
			list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=five"})
			if err != nil {
				return false, err
			}
			for _, p := range list.Items {
				if hasString(p.Finalizers, batchv1.JobTrackingFinalizer) {
					return false, nil
				}
			}
			return len(list.Items) == 5, nil
		})
	})

	t.Run("backoffLimit", func(t *testing.T) {
		create(t, newJob("failing", func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To[int32](2) }))
		controllertest.Eventually(t, 60*time.Second, "job failing to fail", func() (bool, error) {
			pods, err := jobPods(client, ns, "failing")
			if err != nil {
				return false, err
			}
			for _, p := range pods {
				if err := finishPod(client, p, corev1.PodFailed, 1); err != nil && !apierrors.IsConflict(err) {
					return false, err
				}
			}
			j, err := client.BatchV1().Jobs(ns).Get(ctx, "failing", metav1.GetOptions{})
			return err == nil && condition(j, batchv1.JobFailed) != nil, err
		})
		j := waitCondition(t, client, ns, "failing", batchv1.JobFailed, 10*time.Second)
		c := condition(j, batchv1.JobFailed)
		if c.Reason != batchv1.JobReasonBackoffLimitExceeded || c.Message != "Job has reached the specified backoff limit" {
			t.Fatalf("Failed condition = %+v", c)
		}
		if j.Status.Failed != 3 || condition(j, batchv1.JobFailureTarget) == nil {
			t.Fatalf("status = %+v, want failed 3 and FailureTarget", j.Status)
		}
	})

	t.Run("podFailurePolicy FailJob", func(t *testing.T) {
		create(t, newJob("policy", func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
			}}
		}))
		var pod corev1.Pod
		controllertest.Eventually(t, 30*time.Second, "pod of job policy", func() (bool, error) {
			pods, err := jobPods(client, ns, "policy")
			if len(pods) == 1 {
				pod = pods[0]
			}
			return len(pods) == 1, err
		})
		if err := finishPod(client, pod, corev1.PodFailed, 42); err != nil {
			t.Fatal(err)
		}
		j := waitCondition(t, client, ns, "policy", batchv1.JobFailed, 30*time.Second)
		want := fmt.Sprintf("Container main for pod %s/%s failed with exit code 42 matching FailJob rule at index 0", ns, pod.Name)
		if c := condition(j, batchv1.JobFailed); c.Reason != batchv1.JobReasonPodFailurePolicy || c.Message != want {
			t.Fatalf("Failed condition = %+v, want message %q", c, want)
		}
	})

	t.Run("activeDeadlineSeconds", func(t *testing.T) {
		create(t, newJob("slow", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To[int64](2) }))
		j := waitCondition(t, client, ns, "slow", batchv1.JobFailed, 30*time.Second)
		if c := condition(j, batchv1.JobFailed); c.Reason != batchv1.JobReasonDeadlineExceeded || c.Message != "Job was active longer than specified deadline" {
			t.Fatalf("Failed condition = %+v", c)
		}
		if j.Status.Active != 0 {
			t.Fatalf("active = %d after the deadline", j.Status.Active)
		}
		controllertest.Eventually(t, 10*time.Second, "deadline pods gone", func() (bool, error) {
			pods, err := jobPods(client, ns, "slow")
			return len(pods) == 0, err
		})
	})

	t.Run("Indexed", func(t *testing.T) {
		create(t, newJob("idx", func(j *batchv1.Job) {
			j.Spec.Completions, j.Spec.Parallelism = ptr.To[int32](3), ptr.To[int32](3)
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		}))
		var pods []corev1.Pod
		controllertest.Eventually(t, 30*time.Second, "3 indexed pods", func() (bool, error) {
			var err error
			pods, err = jobPods(client, ns, "idx")
			return len(pods) == 3, err
		})
		var got []string
		for _, p := range pods {
			ix := p.Annotations[batchv1.JobCompletionIndexAnnotation]
			got = append(got, ix)
			if p.Labels[batchv1.JobCompletionIndexAnnotation] != ix || p.Spec.Hostname != "idx-"+ix {
				t.Fatalf("pod %s: index label %q, hostname %q, want index %s", p.Name, p.Labels[batchv1.JobCompletionIndexAnnotation], p.Spec.Hostname, ix)
			}
		}
		sort.Strings(got)
		if fmt.Sprint(got) != "[0 1 2]" {
			t.Fatalf("indexes = %v", got)
		}
		for _, p := range pods {
			if p.Annotations[batchv1.JobCompletionIndexAnnotation] == "1" {
				continue
			}
			if err := finishPod(client, p, corev1.PodSucceeded, 0); err != nil {
				t.Fatal(err)
			}
		}
		controllertest.Eventually(t, 10*time.Second, "completedIndexes 0,2", func() (bool, error) {
			j, err := client.BatchV1().Jobs(ns).Get(ctx, "idx", metav1.GetOptions{})
			return err == nil && j.Status.CompletedIndexes == "0,2" && j.Status.Succeeded == 2, err
		})
		for _, p := range pods {
			if p.Annotations[batchv1.JobCompletionIndexAnnotation] == "1" {
				if err := finishPod(client, p, corev1.PodSucceeded, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		j := waitCondition(t, client, ns, "idx", batchv1.JobComplete, 10*time.Second)
		if j.Status.CompletedIndexes != "0-2" || j.Status.Succeeded != 3 {
			t.Fatalf("status = %+v", j.Status)
		}
	})

	t.Run("ttlSecondsAfterFinished", func(t *testing.T) {
		create(t, newJob("ttl", func(j *batchv1.Job) { j.Spec.TTLSecondsAfterFinished = ptr.To[int32](1) }))
		controllertest.Eventually(t, 30*time.Second, "job ttl to complete", func() (bool, error) {
			pods, err := jobPods(client, ns, "ttl")
			for _, p := range pods {
				_ = finishPod(client, p, corev1.PodSucceeded, 0)
			}
			j, err2 := client.BatchV1().Jobs(ns).Get(ctx, "ttl", metav1.GetOptions{})
			if err2 == nil && condition(j, batchv1.JobComplete) != nil {
				return true, nil
			}
			return false, err
		})
		controllertest.Eventually(t, 20*time.Second, "job ttl deleted", func() (bool, error) {
			_, err := client.BatchV1().Jobs(ns).Get(ctx, "ttl", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
	})

	t.Run("suspend", func(t *testing.T) {
		create(t, newJob("susp", func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(true) }))
		j := waitCondition(t, client, ns, "susp", batchv1.JobSuspended, 10*time.Second)
		if pods, _ := jobPods(client, ns, "susp"); len(pods) != 0 || j.Status.StartTime != nil {
			t.Fatalf("suspended job has %d pods, startTime %v", len(pods), j.Status.StartTime)
		}
	})
}

func hasString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
