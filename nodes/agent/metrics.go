package agent

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

var (
	// Measured on this host's clock only: the pod's creationTimestamp comes from the API
	// server's clock and includes scheduling, so it would say little about this agent.
	podStartDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "flotilla", Subsystem: "agent", Name: "pod_start_duration_seconds",
		Help: "Time from this host's agent first seeing a pod (its worker starting) to every app container of the pod " +
			"running (the latest container start), in seconds, image pulls included; pods already running when the agent started are not counted.",
		Buckets:        metrics.ExponentialBuckets(0.05, 2, 14),
		StabilityLevel: metrics.ALPHA,
	})
	probeFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "flotilla", Subsystem: "agent", Name: "probe_failures_total",
		Help:           "Container probe runs that failed (each run, before failureThreshold is applied), by probe: liveness, readiness, startup.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"probe"})
)

func init() {
	legacyregistry.MustRegister(podStartDuration, probeFailures)
}

func countProbeFailure(kind probeKind) {
	probeFailures.WithLabelValues(strings.ToLower(string(kind))).Inc()
}

// startLatency is what a pod worker needs to observe its pod's start once.
type startLatency struct {
	seen time.Time // when the worker was created
	done bool
}

// observeStart records the pod start latency the first time every app container runs.
func (s *startLatency) observeStart(pod *corev1.Pod, byName map[string][]rt.ContainerStatus, now time.Time) {
	if s.done || s.seen.IsZero() || len(pod.Spec.Containers) == 0 {
		return
	}
	var last time.Time
	for _, c := range pod.Spec.Containers {
		list := byName[c.Name]
		if len(list) == 0 || list[0].State != rt.StateRunning {
			return
		}
		started := list[0].StartedAt
		if started.IsZero() {
			started = now
		}
		if started.After(last) {
			last = started
		}
		if started.Before(s.seen) {
			// Running before this worker existed (the agent restarted): not a start we saw.
			s.done = true
			return
		}
	}
	s.done = true
	podStartDuration.Observe(last.Sub(s.seen).Seconds())
}
