package membership

import (
	"sync/atomic"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	membersDesc = metrics.NewDesc(metrics.BuildFQName("flotilla", "membership", "members"),
		"Hosts in this host's gossip membership table (itself included), by state: alive, suspect, dead, left.",
		[]string{"state"}, nil, metrics.ALPHA, "")
	healthDesc = metrics.NewDesc(metrics.BuildFQName("flotilla", "membership", "health_score"),
		"This host's gossip health score (memberlist's awareness, a probe timeout multiplier): 0 is healthy, "+
			"higher means this host recently missed probe answers or acks and is itself slow or partitioned.",
		nil, nil, metrics.ALPHA, "")
	reconnectAttempts = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "flotilla", Subsystem: "membership", Name: "reconnect_attempts_total",
		Help:           "Attempts to join again a member gossip saw die or leave, by result: joined or failed.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
)

// running is the gossip member this process runs (one per agent), read at scrape time
// because the health score changes without any event.
var running atomic.Pointer[Membership]

func init() {
	legacyregistry.CustomMustRegister(&gossipCollector{})
	legacyregistry.MustRegister(reconnectAttempts)
}

// gossipCollector reports the running member's table and health; nothing while no gossip
// runs, rather than numbers that would look like an empty or healthy site.
type gossipCollector struct {
	metrics.BaseStableCollector
}

func (*gossipCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- membersDesc
	ch <- healthDesc
}

func (*gossipCollector) CollectWithStability(ch chan<- metrics.Metric) {
	m := running.Load()
	if m == nil {
		return
	}
	counts := map[State]int{}
	m.mu.Lock()
	for _, mem := range m.members {
		counts[mem.State]++
	}
	m.mu.Unlock()
	for _, s := range []State{Alive, Suspect, Dead, Left} {
		ch <- metrics.NewLazyConstMetric(membersDesc, metrics.GaugeValue, float64(counts[s]), string(s))
	}
	ch <- metrics.NewLazyConstMetric(healthDesc, metrics.GaugeValue, float64(m.ml.GetHealthScore()))
}

func countReconnect(joined bool) {
	result := "failed"
	if joined {
		result = "joined"
	}
	reconnectAttempts.WithLabelValues(result).Inc()
}
