package scheduler

import (
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Results of a scheduling attempt (the result label of scheduleAttempts).
const (
	resultScheduled     = "scheduled"
	resultUnschedulable = "unschedulable"
	resultError         = "error"
)

var (
	scheduleAttempts = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "flotilla", Subsystem: "scheduler", Name: "schedule_attempts_total",
		Help: "Scheduling attempts by outcome: scheduled (binding committed), unschedulable (no node fits), " +
			"error (volume preparation or the binding failed, or another scheduler bound the pod first).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	schedulingDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "flotilla", Subsystem: "scheduler", Name: "scheduling_duration_seconds",
		Help: "Time from taking a pod off the queue to its binding committed (filter, score, volume " +
			"preparation, waiting for a binding slot and pods/binding), in seconds; scheduled pods only.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 15),
		StabilityLevel: metrics.ALPHA,
	})
	pendingPods = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "flotilla", Subsystem: "scheduler", Name: "pending_pods",
		Help: "Pods waiting in the scheduling queue of the running scheduler, by queue: active (ready to be tried), " +
			"backoff (failed recently) and unschedulable (waiting for a cluster change).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"queue"})
)

func init() {
	legacyregistry.MustRegister(scheduleAttempts, schedulingDuration, pendingPods)
}

// recordAttempt counts one attempt that reached an outcome; began is when the pod left the
// queue, measured for scheduled pods only.
func recordAttempt(result string, began time.Time) {
	scheduleAttempts.WithLabelValues(result).Inc()
	if result == resultScheduled {
		schedulingDuration.Observe(time.Since(began).Seconds())
	}
}

// updatePending publishes the queue's sizes.
func (s *Scheduler) updatePending() {
	active, backoff, unschedulable := s.queue.Stats()
	pendingPods.WithLabelValues("active").Set(float64(active))
	pendingPods.WithLabelValues("backoff").Set(float64(backoff))
	pendingPods.WithLabelValues("unschedulable").Set(float64(unschedulable))
}

// clearPending removes the queue sizes when the scheduler stops: a host that no longer
// schedules has no queue to report.
func clearPending() { pendingPods.Reset() }
