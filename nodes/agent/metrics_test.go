package agent

import (
	"context"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics/testutil"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

func podStarts(t *testing.T) (uint64, float64) {
	t.Helper()
	n, err := testutil.GetHistogramMetricCount(podStartDuration.ObserverMetric)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := testutil.GetHistogramMetricValue(podStartDuration.ObserverMetric)
	if err != nil {
		t.Fatal(err)
	}
	return n, sum
}

// TestPodStartLatency: the start is observed once, when every app container runs, from the
// worker's creation to the latest container start; a pod already running before the worker
// existed is not observed.
func TestPodStartLatency(t *testing.T) {
	pod := testPod()
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "sidecar", Image: "y"})
	seen := time.Now().Add(-time.Minute)
	running := func(started time.Time) []rt.ContainerStatus {
		return []rt.ContainerStatus{{State: rt.StateRunning, StartedAt: started}}
	}
	n0, sum0 := podStarts(t)

	s := &startLatency{seen: seen}
	s.observeStart(pod, map[string][]rt.ContainerStatus{"app": running(seen.Add(time.Second))}, time.Now())
	if n, _ := podStarts(t); n != n0 {
		t.Fatalf("observed with the sidecar not running yet")
	}
	byName := map[string][]rt.ContainerStatus{"app": running(seen.Add(time.Second)), "sidecar": running(seen.Add(3 * time.Second))}
	s.observeStart(pod, byName, time.Now())
	s.observeStart(pod, byName, time.Now())
	n, sum := podStarts(t)
	if n != n0+1 {
		t.Fatalf("pod_start_duration_seconds count grew by %d, want 1", n-n0)
	}
	if d := sum - sum0; d < 2.999 || d > 3.001 {
		t.Errorf("observed %vs, want 3s (worker created to the sidecar's start)", d)
	}

	restarted := &startLatency{seen: seen}
	restarted.observeStart(pod, map[string][]rt.ContainerStatus{"app": running(seen.Add(-time.Hour)), "sidecar": running(seen.Add(time.Second))}, time.Now())
	if n, _ := podStarts(t); n != n0+1 {
		t.Errorf("a pod running before its worker existed was observed")
	}
}

// failingExec fails every exec probe.
type failingExec struct{}

func (failingExec) Exec(context.Context, string, []string, io.Reader, io.Writer, io.Writer, bool) (int, error) {
	return 1, nil
}

// TestProbeFailureMetric runs a failing readiness probe and a failing liveness probe and
// counts their failed runs by probe.
func TestProbeFailureMetric(t *testing.T) {
	exec := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"false"}}}, PeriodSeconds: 1, FailureThreshold: 1}
	c := &corev1.Container{Name: "app", ReadinessProbe: exec, LivenessProbe: exec}
	value := func(probe string) float64 {
		v, err := testutil.GetCounterMetricValue(probeFailures.WithLabelValues(probe))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	liveness0, readiness0, startup0 := value("liveness"), value("readiness"), value("startup")

	ctx, cancel := context.WithCancel(context.Background())
	livenessFailed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runProbes(ctx, handlerTarget{rt: failingExec{}, containerID: "c1", container: c}, &probeResults{}, func(kind probeKind, ok bool, _ string) {
			if kind == probeLiveness && !ok {
				select {
				case livenessFailed <- struct{}{}:
				default:
				}
			}
		})
	}()
	select {
	case <-livenessFailed:
	case <-time.After(10 * time.Second):
		t.Fatal("liveness probe never failed")
	}
	deadline := time.Now().Add(5 * time.Second)
	for value("readiness") == readiness0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if d := value("liveness") - liveness0; d < 1 {
		t.Errorf("probe_failures_total{probe=liveness} grew by %v, want at least 1", d)
	}
	if d := value("readiness") - readiness0; d < 1 {
		t.Errorf("probe_failures_total{probe=readiness} grew by %v, want at least 1", d)
	}
	if d := value("startup") - startup0; d != 0 {
		t.Errorf("probe_failures_total{probe=startup} grew by %v without a startup probe", d)
	}
}
