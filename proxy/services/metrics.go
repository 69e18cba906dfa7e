package services

import (
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	syncDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "flotilla", Subsystem: "proxy", Name: "sync_duration_seconds",
		Help: "Time to program the Service dataplane from the desired state, in seconds, by proxy mode " +
			"(nftables, ipvs) and kind (apply: changes only; resync: the kernel state read back and repaired); failed syncs included.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 15),
		StabilityLevel: metrics.ALPHA,
	}, []string{"mode", "kind"})
	syncFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "flotilla", Subsystem: "proxy", Name: "sync_failures_total",
		Help:           "Dataplane syncs that failed (retried with back-off), by proxy mode.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"mode"})
	// Vectors by mode although a host runs one mode: a host without the proxy then reports
	// no series rather than a zero that would claim an empty dataplane.
	programmedServicePorts = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "flotilla", Subsystem: "proxy", Name: "programmed_service_ports",
		Help:           "Service ports (one per Service and port) in the dataplane after the last successful sync, by proxy mode.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"mode"})
	programmedEndpoints = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "flotilla", Subsystem: "proxy", Name: "programmed_endpoints",
		Help:           "Endpoints receiving cluster-wide traffic, summed over the programmed Service ports, after the last successful sync, by proxy mode.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"mode"})
)

func init() {
	legacyregistry.MustRegister(syncDuration, syncFailures, programmedServicePorts, programmedEndpoints)
}

// moder names the proxy mode of a backend for the mode label.
type moder interface{ proxyMode() string }

func (*Nftables) proxyMode() string { return ModeNftables }
func (*IPVS) proxyMode() string     { return ModeIPVS }

func modeOf(b Backend) string {
	if m, ok := b.(moder); ok {
		return m.proxyMode()
	}
	return "unknown"
}

// recordSync records one sync of ds by backend that took took and ended with err.
func recordSync(b Backend, full bool, ds DesiredState, took time.Duration, err error) {
	mode, kind := modeOf(b), "apply"
	if full {
		kind = "resync"
	}
	syncDuration.WithLabelValues(mode, kind).Observe(took.Seconds())
	if err != nil {
		syncFailures.WithLabelValues(mode).Inc()
		return
	}
	endpoints := 0
	for _, sp := range ds.Services {
		endpoints += len(sp.ClusterEndpoints)
	}
	programmedServicePorts.WithLabelValues(mode).Set(float64(len(ds.Services)))
	programmedEndpoints.WithLabelValues(mode).Set(float64(endpoints))
}
