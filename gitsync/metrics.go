package gitsync

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Failure stages of a reconciliation round (the stage label of failuresTotal).
const (
	stageFetch    = "fetch"
	stageVerify   = "verify"
	stageRender   = "render"
	stageValidate = "validate"
	stageApply    = "apply"
)

// The source label is "<namespace>/<name>": one series per GitSource, which an operator
// creates by hand, so the cardinality stays that of the sources.
var (
	fetchDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "flotilla", Subsystem: "gitsync", Name: "fetch_duration_seconds",
		Help:           "Time to fetch and check out a GitSource's ref, in seconds (every attempt, failed ones included).",
		Buckets:        metrics.ExponentialBuckets(0.05, 2, 12),
		StabilityLevel: metrics.ALPHA,
	}, []string{"source"})
	renderDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "flotilla", Subsystem: "gitsync", Name: "render_duration_seconds",
		Help:           "Time to render a fetched revision with kustomize, in seconds (every attempt, failed ones included).",
		Buckets:        metrics.ExponentialBuckets(0.01, 2, 12),
		StabilityLevel: metrics.ALPHA,
	}, []string{"source"})
	applyDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "flotilla", Subsystem: "gitsync", Name: "apply_duration_seconds",
		Help:           "Time to server-side apply a validated revision's objects and prune those that left git, in seconds (dry-run validation excluded; failed attempts included).",
		Buckets:        metrics.ExponentialBuckets(0.05, 2, 12),
		StabilityLevel: metrics.ALPHA,
	}, []string{"source"})
	failuresTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "flotilla", Subsystem: "gitsync", Name: "failures_total",
		Help:           "Reconciliation rounds of a GitSource that failed, by the stage that failed (fetch, verify, render, validate, apply).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source", "stage"})
	appliedRevision = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "flotilla", Subsystem: "gitsync", Name: "applied_revision_info",
		Help:           "The revision last applied from a GitSource: always 1, the revision is the label (\"<ref>@sha1:<commit>\").",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source", "revision"})
	lastSuccess = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "flotilla", Subsystem: "gitsync", Name: "last_success_timestamp_seconds",
		Help:           "When a GitSource last completed a full round (fetch, apply, prune) without failure, in seconds since the Unix epoch.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source"})
)

func init() {
	legacyregistry.MustRegister(fetchDuration, renderDuration, applyDuration, failuresTotal, appliedRevision, lastSuccess)
}

// revisions remembers the revision label each source's applied_revision_info carries, so
// that a new revision replaces the old series instead of adding one per commit.
var revisions = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// metricsSource is the source label of gs: "<namespace>/<name>".
func metricsSource(namespace, name string) string { return namespace + "/" + name }

func observeSince(h *metrics.HistogramVec, source string, start time.Time) {
	h.WithLabelValues(source).Observe(time.Since(start).Seconds())
}

func countFailure(source, stage string) { failuresTotal.WithLabelValues(source, stage).Inc() }

// recordApplied marks revision as the one applied from source, now.
func recordApplied(source, revision string, now time.Time) {
	revisions.Lock()
	defer revisions.Unlock()
	if old, ok := revisions.m[source]; ok && old != revision {
		appliedRevision.DeleteLabelValues(source, old)
	}
	revisions.m[source] = revision
	appliedRevision.WithLabelValues(source, revision).Set(1)
	lastSuccess.WithLabelValues(source).Set(float64(now.UnixNano()) / 1e9)
}

// forgetSource drops every series of a deleted GitSource.
func forgetSource(source string) {
	revisions.Lock()
	defer revisions.Unlock()
	if old, ok := revisions.m[source]; ok {
		appliedRevision.DeleteLabelValues(source, old)
		delete(revisions.m, source)
	}
	lastSuccess.DeleteLabelValues(source)
	for _, h := range []*metrics.HistogramVec{fetchDuration, renderDuration, applyDuration} {
		h.DeleteLabelValues(source)
	}
	for _, stage := range []string{stageFetch, stageVerify, stageRender, stageValidate, stageApply} {
		failuresTotal.DeleteLabelValues(source, stage)
	}
}

// failureStage is the stage label of a failure condition reason ("" for failures that are
// not a stage of the round, such as an impossible spec).
func failureStage(reason string) string {
	switch reason {
	case ReasonFetchFailed:
		return stageFetch
	case ReasonVerificationFailed:
		return stageVerify
	case ReasonBuildFailed:
		return stageRender
	case ReasonValidationFailed, ReasonForbidden, ReasonServiceAccountRequired:
		return stageValidate
	case ReasonApplyFailed:
		return stageApply
	}
	return ""
}

// forgetApplied drops the applied revisions when the controller stops (leadership moved):
// the new leader reports them, and a stale copy here would contradict it.
func forgetApplied() {
	revisions.Lock()
	defer revisions.Unlock()
	for source, old := range revisions.m {
		appliedRevision.DeleteLabelValues(source, old)
		lastSuccess.DeleteLabelValues(source)
	}
	clear(revisions.m)
}
