package scheduler

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
)

func attemptsOf(t *testing.T, result string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(scheduleAttempts.WithLabelValues(result))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// pendingSeries returns the pending_pods series by queue label.
func pendingSeries(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "flotilla_scheduler_pending_pods" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// TestSchedulerMetrics runs the scheduler on a fake API with a pod that binds, one whose
// binding is lost to another scheduler and one that fits nowhere, and reads back the
// attempts by result, the latency of the scheduled one and the pending queue sizes, which
// disappear when the scheduler stops.
func TestSchedulerMetrics(t *testing.T) {
	client := fake.NewClientset(node("n1", 1000, 1024, 110), pod("fits", 300, 0), pod("lost", 300, 0), pod("huge", 5000, 0))
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		if name := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding).Name; name == "lost" {
			return true, nil, apierrors.NewConflict(corev1.Resource("pods"), name, nil)
		}
		return true, &corev1.Binding{}, nil
	})
	rec := record.NewFakeRecorder(100)
	cctx := &controllers.Context{Client: client, Informers: informers.NewSharedInformerFactory(client, 0),
		Recorder: func(string) record.EventRecorder { return rec }}
	s, err := New(cctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	scheduled, unschedulable, errored := attemptsOf(t, resultScheduled), attemptsOf(t, resultUnschedulable), attemptsOf(t, resultError)
	latencies, err := testutil.GetHistogramMetricCount(schedulingDuration.ObserverMetric)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cctx.Informers.Start(ctx.Done())
	done := make(chan error)
	go func() { done <- s.Run(ctx, 1) }()
	deadline := time.Now().Add(10 * time.Second)
	for st := s.Stats(); st.Bound+st.Lost < 2 || st.Unschedulable < 1 || pendingSeries(t)["unschedulable"] != 1; st = s.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, pending %v", st, pendingSeries(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := pendingSeries(t); got["active"] != 0 || got["backoff"] != 0 {
		t.Errorf("pending_pods %v, want only the unschedulable pod", got)
	}
	if d := attemptsOf(t, resultScheduled) - scheduled; d != 1 {
		t.Errorf("schedule_attempts_total{result=scheduled} grew by %v, want 1", d)
	}
	if d := attemptsOf(t, resultError) - errored; d != 1 {
		t.Errorf("schedule_attempts_total{result=error} grew by %v, want 1 (the lost binding)", d)
	}
	if d := attemptsOf(t, resultUnschedulable) - unschedulable; d < 1 {
		t.Errorf("schedule_attempts_total{result=unschedulable} grew by %v, want at least 1", d)
	}
	if n, err := testutil.GetHistogramMetricCount(schedulingDuration.ObserverMetric); err != nil || n-latencies != 1 {
		t.Errorf("scheduling_duration_seconds count grew by %d (%v), want 1", n-latencies, err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); len(pendingSeries(t)) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pending_pods %v still published after the scheduler stopped", pendingSeries(t))
		}
	}
}
