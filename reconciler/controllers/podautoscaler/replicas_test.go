package podautoscaler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// podSpec describes a test pod: its CPU and memory requests per container, its phase and
// readiness, and its usage (negative: no metrics).
type podSpec struct {
	cpuRequest string // of each container; "" for none
	memRequest string
	phase      corev1.PodPhase // Running when empty
	notReady   bool
	deleting   bool
	started    time.Duration // how long ago it started (10 min when 0; no start time when negative)
	readySince time.Duration // how long ago its Ready condition last changed (started when 0)
	usage      int64         // milli-units; -1: no metrics
}

func makePods(specs ...podSpec) ([]*corev1.Pod, podMetrics) {
	var pods []*corev1.Pod
	metrics := podMetrics{}
	for i, s := range specs {
		name := fmt.Sprintf("pod-%d", i)
		if s.started == 0 {
			s.started = 10 * time.Minute
		}
		if s.readySince == 0 {
			s.readySince = s.started
		}
		if s.phase == "" {
			s.phase = corev1.PodRunning
		}
		reqs := corev1.ResourceList{}
		if s.cpuRequest != "" {
			reqs[corev1.ResourceCPU] = apiresource.MustParse(s.cpuRequest)
		}
		if s.memRequest != "" {
			reqs[corev1.ResourceMemory] = apiresource.MustParse(s.memRequest)
		}
		ready := corev1.ConditionTrue
		if s.notReady {
			ready = corev1.ConditionFalse
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: reqs}}}},
			Status: corev1.PodStatus{
				Phase: s.phase,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready,
					LastTransitionTime: metav1.NewTime(testNow.Add(-s.readySince))}},
			},
		}
		if s.started > 0 {
			p.Status.StartTime = &metav1.Time{Time: testNow.Add(-s.started)}
		}
		if s.deleting {
			p.DeletionTimestamp = &metav1.Time{Time: testNow}
		}
		pods = append(pods, p)
		if s.usage >= 0 {
			metrics[name] = podMetric{Timestamp: testNow, Window: 12 * time.Second, Value: s.usage}
		}
	}
	return pods, metrics
}

func running(cpuRequest string, usage int64) podSpec {
	return podSpec{cpuRequest: cpuRequest, usage: usage}
}

// readyAnd is three ready pods at 1 core of 1 requested, and another.
func readyAnd(other podSpec) []podSpec {
	return []podSpec{running("1", 1000), running("1", 1000), running("1", 1000), other}
}

var testCalc = replicaCalculator{cpuInitializationPeriod: 5 * time.Minute, delayOfInitialReadinessStatus: 30 * time.Second}

var defaultTol = tolerances{0.1, 0.1}

func TestResourceReplicas(t *testing.T) {
	cases := []struct {
		name            string
		pods            []podSpec
		current         int32
		target          int32 // percent
		resource        corev1.ResourceName
		tol             *tolerances
		want            int32
		wantUtilization int32
		wantRaw         int64
		wantErr         string
	}{
		{name: "scale up: 100% of a 50% target doubles", current: 3, target: 50,
			pods: []podSpec{running("1", 900), running("1", 1000), running("1", 1100)}, want: 6, wantUtilization: 100, wantRaw: 1000},
		{name: "at target", current: 3, target: 50,
			pods: []podSpec{running("1", 520), running("1", 480), running("1", 500)}, want: 3, wantUtilization: 50, wantRaw: 500},
		{name: "within the 10% tolerance", current: 3, target: 50,
			pods: []podSpec{running("1", 550), running("1", 550), running("1", 550)}, want: 3, wantUtilization: 55, wantRaw: 550},
		{name: "just beyond the tolerance", current: 3, target: 50,
			pods: []podSpec{running("1", 560), running("1", 560), running("1", 560)}, want: 4, wantUtilization: 56, wantRaw: 560},
		{name: "below the tolerance scales down", current: 3, target: 50,
			pods: []podSpec{running("1", 440), running("1", 440), running("1", 440)}, want: 3, wantUtilization: 44, wantRaw: 440},
		{name: "an HPA's own tolerance", current: 3, target: 50, tol: &tolerances{scaleDown: 0.5, scaleUp: 0.01},
			pods: []podSpec{running("1", 510), running("1", 510), running("1", 510)}, want: 4, wantUtilization: 51, wantRaw: 510},
		{name: "scale down", current: 4, target: 50,
			pods: []podSpec{running("1", 100), running("1", 100), running("1", 100), running("1", 100)}, want: 1, wantUtilization: 10, wantRaw: 100},
		{name: "missing metrics count as 100% on scale down", current: 4, target: 50,
			pods: []podSpec{running("1", 100), running("1", 100), running("1", 100), running("1", -1)}, want: 3, wantUtilization: 10, wantRaw: 100},
		{name: "missing metrics count as the target when above 100%", current: 2, target: 200,
			pods: []podSpec{running("1", 100), running("1", -1)}, want: 2, wantUtilization: 10, wantRaw: 100},
		{name: "missing metrics count as 0 on scale up", current: 4, target: 50,
			pods: []podSpec{running("1", 1000), running("1", 1000), running("1", 1000), running("1", -1)}, want: 6, wantUtilization: 100, wantRaw: 1000},
		{name: "missing metrics that reverse the direction: no change", current: 4, target: 50,
			pods: []podSpec{running("1", 400), running("1", 400), running("1", -1), running("1", -1)}, want: 4, wantUtilization: 40, wantRaw: 400},
		{name: "pending pods count as 0 on scale up", current: 3, target: 50,
			pods: []podSpec{running("1", 1000), running("1", 1000), {cpuRequest: "1", phase: corev1.PodPending, usage: -1}}, want: 4, wantUtilization: 100, wantRaw: 1000},
		{name: "pending pods are left out on scale down", current: 3, target: 50,
			pods: []podSpec{running("1", 100), running("1", 100), {cpuRequest: "1", phase: corev1.PodPending, usage: -1}}, want: 1, wantUtilization: 10, wantRaw: 100},
		{name: "failed and deleted pods are ignored", current: 4, target: 50,
			pods: []podSpec{running("1", 1000), running("1", 1000), {cpuRequest: "1", phase: corev1.PodFailed, usage: 5000},
				{cpuRequest: "1", deleting: true, usage: 5000}}, want: 4, wantUtilization: 100, wantRaw: 1000},
		// Three pods at 100% of a 50% target and a fourth at 300%: unready, it counts as 0
		// (ratio 1.5, 6 replicas); counted, the ratio is 3 (12 replicas).
		{name: "a not-ready pod within the CPU initialization period is unready", current: 4, target: 50,
			pods: readyAnd(podSpec{cpuRequest: "1", notReady: true, started: time.Minute, readySince: time.Second, usage: 3000}), want: 6, wantUtilization: 100, wantRaw: 1000},
		{name: "a pod ready for less than a window after starting is unready", current: 4, target: 50,
			pods: readyAnd(podSpec{cpuRequest: "1", started: time.Minute, readySince: 5 * time.Second, usage: 3000}), want: 6, wantUtilization: 100, wantRaw: 1000},
		{name: "a pod ready for a whole window after starting counts", current: 4, target: 50,
			pods: readyAnd(podSpec{cpuRequest: "1", started: time.Minute, readySince: 30 * time.Second, usage: 3000}), want: 12, wantUtilization: 150, wantRaw: 1500},
		{name: "a pod never ready since it started is unready", current: 4, target: 50,
			pods: readyAnd(podSpec{cpuRequest: "1", notReady: true, started: 10 * time.Minute, readySince: 10 * time.Minute, usage: 3000}), want: 6, wantUtilization: 100, wantRaw: 1000},
		{name: "a pod ready before and not now, after the initialization period, counts", current: 4, target: 50,
			pods: readyAnd(podSpec{cpuRequest: "1", notReady: true, started: 10 * time.Minute, readySince: time.Minute, usage: 3000}), want: 12, wantUtilization: 150, wantRaw: 1500},
		{name: "a pod without a start time is unready", current: 4, target: 50,
			pods: readyAnd(podSpec{cpuRequest: "1", started: -1, usage: 3000}), want: 6, wantUtilization: 100, wantRaw: 1000},
		{name: "readiness does not matter for memory", current: 2, target: 50, resource: corev1.ResourceMemory,
			pods: []podSpec{{memRequest: "1000", usage: 1000 * 1000}, {memRequest: "1000", notReady: true, readySince: time.Second, usage: 1000 * 1000}},
			want: 4, wantUtilization: 100, wantRaw: 1000 * 1000},
		{name: "a container without a request", current: 2, target: 50,
			pods: []podSpec{running("1", 1000), running("", 1000)}, wantErr: "missing request for cpu in container app of Pod pod-1"},
		{name: "no pods", current: 2, target: 50, wantErr: "no pods returned by selector"},
		{name: "every pod unready", current: 2, target: 50,
			pods: []podSpec{{cpuRequest: "1", phase: corev1.PodPending, usage: -1}}, wantErr: "did not receive metrics for targeted pods"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pods, metrics := makePods(c.pods...)
			res := c.resource
			if res == "" {
				res = corev1.ResourceCPU
			}
			tol := defaultTol
			if c.tol != nil {
				tol = *c.tol
			}
			before := len(metrics)
			got, util, raw, err := testCalc.resourceReplicas(testNow, c.current, c.target, res, "", tol, metrics, pods)
			if len(metrics) != before {
				t.Errorf("the caller's metrics were modified")
			}
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want || util != c.wantUtilization || raw != c.wantRaw {
				t.Errorf("replicas %d, utilization %d%%, average %d; want %d, %d%%, %d", got, util, raw, c.want, c.wantUtilization, c.wantRaw)
			}
		})
	}
}

// TestResourceRequests: a container metric counts only that container's request; restartable
// init containers (sidecars) count in the pod's.
func TestResourceRequests(t *testing.T) {
	pods, _ := makePods(running("500m", 0))
	pods[0].Spec.Containers = append(pods[0].Spec.Containers, corev1.Container{Name: "log",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("100m")}}})
	pods[0].Spec.InitContainers = []corev1.Container{
		{Name: "setup"}, // runs to completion: no request needed
		{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("50m")}}},
	}
	all, err := calculatePodRequests(pods, "", corev1.ResourceCPU)
	if err != nil || all["pod-0"] != 650 {
		t.Errorf("pod request %v, %v; want 650m", all, err)
	}
	app, err := calculatePodRequests(pods, "app", corev1.ResourceCPU)
	if err != nil || app["pod-0"] != 500 {
		t.Errorf("container app request %v, %v; want 500m", app, err)
	}
}

func TestRawResourceReplicas(t *testing.T) {
	cases := []struct {
		name      string
		pods      []podSpec
		current   int32
		target    int64
		want      int32
		wantUsage int64
		wantErr   string
	}{
		{name: "twice the target doubles", current: 2, target: 500,
			pods: []podSpec{running("", 1000), running("", 1000)}, want: 4, wantUsage: 1000},
		{name: "within tolerance", current: 2, target: 500,
			pods: []podSpec{running("", 540), running("", 500)}, want: 2, wantUsage: 520},
		{name: "scale down", current: 4, target: 500,
			pods: []podSpec{running("", 100), running("", 100), running("", 100), running("", 100)}, want: 1, wantUsage: 100},
		{name: "missing metrics count as the target on scale down", current: 4, target: 500,
			pods: []podSpec{running("", 100), running("", 100), running("", 100), running("", -1)}, want: 2, wantUsage: 100},
		{name: "missing metrics count as 0 on scale up", current: 3, target: 500,
			pods: []podSpec{running("", 1500), running("", 1500), running("", -1)}, want: 6, wantUsage: 1500},
		{name: "unready pods count as 0 on scale up", current: 3, target: 500,
			pods: []podSpec{running("", 1500), running("", 1500), {phase: corev1.PodPending, usage: -1}}, want: 6, wantUsage: 1500},
		{name: "no metrics", current: 1, target: 500,
			pods: []podSpec{running("", -1)}, want: 1, wantErr: "did not receive metrics"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pods, metrics := makePods(c.pods...)
			got, usage, err := testCalc.rawResourceReplicas(testNow, c.current, c.target, corev1.ResourceCPU, defaultTol, metrics, pods)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want || usage != c.wantUsage {
				t.Errorf("replicas %d, usage %d; want %d, %d", got, usage, c.want, c.wantUsage)
			}
		})
	}
}
