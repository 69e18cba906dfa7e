package podautoscaler

import (
	"math"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Without spec.behavior an HPA scales up to at most max(2 x current, 4) replicas at a time
// and scales down to the highest recommendation of the downscale stabilization window, as
// upstream. With it, its stabilization windows and policies apply (with the API defaults for
// what it leaves out).
const (
	scaleUpLimitFactor  = 2.0
	scaleUpLimitMinimum = 4.0
)

// defaultScaleUpRules and defaultScaleDownRules are the API defaults of behavior.scaleUp and
// behavior.scaleDown: up by 4 pods or 100 % (whichever is more) every 15 s without
// stabilization; down by up to 100 % every 15 s after the downscale stabilization window.
func defaultScaleUpRules() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptr.To[int32](0),
		SelectPolicy:               ptr.To(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	}
}

func defaultScaleDownRules(stabilization time.Duration) *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptr.To(int32(stabilization / time.Second)),
		SelectPolicy:               ptr.To(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	}
}

// withDefaults returns rules with what they leave out taken from def.
func withDefaults(rules, def *autoscalingv2.HPAScalingRules) *autoscalingv2.HPAScalingRules {
	if rules == nil {
		return def
	}
	out := rules.DeepCopy()
	if out.StabilizationWindowSeconds == nil {
		out.StabilizationWindowSeconds = def.StabilizationWindowSeconds
	}
	if out.SelectPolicy == nil {
		out.SelectPolicy = def.SelectPolicy
	}
	if out.Policies == nil {
		out.Policies = def.Policies
	}
	return out
}

type timestampedRecommendation struct {
	recommendation int32
	timestamp      time.Time
}

type timestampedScaleEvent struct {
	replicaChange int32 // always positive
	timestamp     time.Time
	outdated      bool
}

// normalizer holds what the controller remembers of each HPA between syncs: its recent
// recommendations (for stabilization) and scale events (for the rate policies). It is lost
// when leadership moves, as upstream's.
type normalizer struct {
	downscaleStabilization time.Duration

	mu              sync.Mutex
	recommendations map[string][]timestampedRecommendation
	scaleUpEvents   map[string][]timestampedScaleEvent
	scaleDownEvents map[string][]timestampedScaleEvent
}

func newNormalizer(downscaleStabilization time.Duration) *normalizer {
	return &normalizer{
		downscaleStabilization: downscaleStabilization,
		recommendations:        map[string][]timestampedRecommendation{},
		scaleUpEvents:          map[string][]timestampedScaleEvent{},
		scaleDownEvents:        map[string][]timestampedScaleEvent{},
	}
}

// forget drops what is remembered of a deleted HPA.
func (n *normalizer) forget(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.recommendations, key)
	delete(n.scaleUpEvents, key)
	delete(n.scaleDownEvents, key)
}

// recordInitialRecommendation starts an HPA's recommendations with its current replicas.
func (n *normalizer) recordInitialRecommendation(key string, currentReplicas int32, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.recommendations[key] == nil {
		n.recommendations[key] = []timestampedRecommendation{{currentReplicas, now}}
	}
}

// limitOutcome is how normalization changed a recommendation, for the HPA's conditions.
type limitOutcome struct {
	// stabilized is set when the stabilization window changed the recommendation, with
	// the AbleToScale reason and message.
	stabilized                          bool
	stabilizedReason, stabilizedMessage string
	// limited is set when the limits changed the (stabilized) recommendation: ScalingLimited
	// is true, with the reason and message; otherwise they explain it is within range.
	limited                   bool
	limitReason, limitMessage string
}

// normalize turns the metrics' recommendation into the replicas to scale to: stabilized,
// then limited by min and max replicas and the scaling rate.
func (n *normalizer) normalize(key string, behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, currentReplicas, desired, minReplicas, maxReplicas int32, now time.Time) (int32, limitOutcome) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if behavior == nil {
		return n.normalizeWithoutBehavior(key, currentReplicas, desired, minReplicas, maxReplicas, now)
	}
	up := withDefaults(behavior.ScaleUp, defaultScaleUpRules())
	down := withDefaults(behavior.ScaleDown, defaultScaleDownRules(n.downscaleStabilization))
	var out limitOutcome
	stabilized, reason, message := n.stabilizeWithBehaviors(key, currentReplicas, desired, up, down, now)
	if stabilized != desired {
		out.stabilized, out.stabilizedReason, out.stabilizedMessage = true, reason, message
	}
	replicas, reason, message := n.limitByRate(key, currentReplicas, stabilized, minReplicas, maxReplicas, up, down, now)
	out.limited, out.limitReason, out.limitMessage = replicas != stabilized, reason, message
	return replicas, out
}

func (n *normalizer) normalizeWithoutBehavior(key string, currentReplicas, desired, minReplicas, maxReplicas int32, now time.Time) (int32, limitOutcome) {
	var out limitOutcome
	stabilized := n.stabilize(key, desired, now)
	if stabilized != desired {
		out.stabilized = true
		out.stabilizedReason = "ScaleDownStabilized"
		out.stabilizedMessage = "recent recommendations were higher than current one, applying the highest recent recommendation"
	}
	replicas, reason, message := limitByRules(currentReplicas, stabilized, minReplicas, maxReplicas)
	out.limited, out.limitReason, out.limitMessage = replicas != stabilized, reason, message
	return replicas, out
}

// stabilize records the recommendation and returns the highest one of the downscale
// stabilization window.
func (n *normalizer) stabilize(key string, desired int32, now time.Time) int32 {
	highest := desired
	oldIndex := -1
	cutoff := now.Add(-n.downscaleStabilization)
	for i, rec := range n.recommendations[key] {
		if rec.timestamp.Before(cutoff) {
			oldIndex = i
		} else if rec.recommendation > highest {
			highest = rec.recommendation
		}
	}
	n.record(key, oldIndex, timestampedRecommendation{desired, now})
	return highest
}

// record stores a recommendation in place of an expired one (oldIndex), or adds it.
func (n *normalizer) record(key string, oldIndex int, rec timestampedRecommendation) {
	if oldIndex >= 0 {
		n.recommendations[key][oldIndex] = rec
	} else {
		n.recommendations[key] = append(n.recommendations[key], rec)
	}
}

// limitByRules clamps a recommendation to [minReplicas, maxReplicas] and, without behavior,
// to max(2 x current, 4).
func limitByRules(currentReplicas, desired, minReplicas, maxReplicas int32) (int32, string, string) {
	scaleUpLimit := int32(math.Max(scaleUpLimitFactor*float64(currentReplicas), scaleUpLimitMinimum))
	maximum, reason, message := maxReplicas, "TooManyReplicas", "the desired replica count is more than the maximum replica count"
	if maxReplicas > scaleUpLimit {
		maximum, reason, message = scaleUpLimit, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
	}
	switch {
	case desired < minReplicas:
		return minReplicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
	case desired > maximum:
		return maximum, reason, message
	}
	return desired, "DesiredWithinRange", "the desired count is within the acceptable range"
}

// stabilizeWithBehaviors records the recommendation and keeps the replicas between the
// lowest recommendation of the scale-up window and the highest of the scale-down window.
func (n *normalizer) stabilizeWithBehaviors(key string, currentReplicas, desired int32, up, down *autoscalingv2.HPAScalingRules, now time.Time) (int32, string, string) {
	upRecommendation, downRecommendation := desired, desired
	upCutoff := now.Add(-time.Duration(*up.StabilizationWindowSeconds) * time.Second)
	downCutoff := now.Add(-time.Duration(*down.StabilizationWindowSeconds) * time.Second)
	oldIndex := -1
	for i, rec := range n.recommendations[key] {
		if rec.timestamp.After(upCutoff) {
			upRecommendation = min(rec.recommendation, upRecommendation)
		}
		if rec.timestamp.After(downCutoff) {
			downRecommendation = max(rec.recommendation, downRecommendation)
		}
		if rec.timestamp.Before(upCutoff) && rec.timestamp.Before(downCutoff) {
			oldIndex = i
		}
	}
	recommendation := currentReplicas
	if recommendation < upRecommendation {
		recommendation = upRecommendation
	}
	if recommendation > downRecommendation {
		recommendation = downRecommendation
	}
	n.record(key, oldIndex, timestampedRecommendation{desired, now})
	if desired >= currentReplicas {
		return recommendation, "ScaleUpStabilized", "recent recommendations were lower than current one, applying the lowest recent recommendation"
	}
	return recommendation, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation"
}

// limitByRate clamps a recommendation to [minReplicas, maxReplicas] and to what the scale-up
// or scale-down policies allow given the scale events of their periods.
func (n *normalizer) limitByRate(key string, currentReplicas, desired, minReplicas, maxReplicas int32, up, down *autoscalingv2.HPAScalingRules, now time.Time) (int32, string, string) {
	switch {
	case desired > currentReplicas:
		limit := max(scaleUpLimit(currentReplicas, n.scaleUpEvents[key], n.scaleDownEvents[key], up, now), currentReplicas)
		maximum, reason, message := maxReplicas, "TooManyReplicas", "the desired replica count is more than the maximum replica count"
		if maximum > limit {
			maximum, reason, message = limit, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
		}
		if desired > maximum {
			return maximum, reason, message
		}
	case desired < currentReplicas:
		limit := min(scaleDownLimit(currentReplicas, n.scaleUpEvents[key], n.scaleDownEvents[key], down, now), currentReplicas)
		minimum, reason, message := minReplicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
		if minimum < limit {
			minimum, reason, message = limit, "ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate"
		}
		if desired < minimum {
			return minimum, reason, message
		}
	}
	return desired, "DesiredWithinRange", "the desired count is within the acceptable range"
}

// scaleUpLimit is the most replicas the scale-up policies allow: each policy from the
// replicas at the start of its period, the most (Max) or least (Min) of them.
func scaleUpLimit(currentReplicas int32, upEvents, downEvents []timestampedScaleEvent, rules *autoscalingv2.HPAScalingRules, now time.Time) int32 {
	return policiesLimit(currentReplicas, upEvents, downEvents, rules, now, true, func(periodStart int32, p autoscalingv2.HPAScalingPolicy) (int32, bool) {
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			return periodStart + p.Value, true
		case autoscalingv2.PercentScalingPolicy:
			// Rounded up, or a small target would never grow.
			return int32(math.Ceil(float64(periodStart) * (1 + float64(p.Value)/100))), true
		}
		return 0, false
	})
}

// scaleDownLimit is the fewest replicas the scale-down policies allow.
func scaleDownLimit(currentReplicas int32, upEvents, downEvents []timestampedScaleEvent, rules *autoscalingv2.HPAScalingRules, now time.Time) int32 {
	return policiesLimit(currentReplicas, upEvents, downEvents, rules, now, false, func(periodStart int32, p autoscalingv2.HPAScalingPolicy) (int32, bool) {
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			return periodStart - p.Value, true
		case autoscalingv2.PercentScalingPolicy:
			return int32(float64(periodStart) * (1 - float64(p.Value)/100)), true
		}
		return 0, false
	})
}

// policiesLimit is the limit the policies of rules set on scaling up (up) or down: each policy
// proposes a replica count from the replicas at the start of its period (false for a policy
// type it does not know); the select policy Max picks the largest proposal when scaling up and
// the smallest when scaling down, Min the reverse, and Disabled keeps currentReplicas.
func policiesLimit(currentReplicas int32, upEvents, downEvents []timestampedScaleEvent, rules *autoscalingv2.HPAScalingRules, now time.Time, up bool,
	propose func(periodStart int32, p autoscalingv2.HPAScalingPolicy) (int32, bool)) int32 {
	largest := up
	switch *rules.SelectPolicy {
	case autoscalingv2.DisabledPolicySelect:
		return currentReplicas
	case autoscalingv2.MinChangePolicySelect:
		largest = !up
	}
	result, pick := int32(math.MaxInt32), func(a, b int32) int32 { return min(a, b) }
	if largest {
		result, pick = math.MinInt32, func(a, b int32) int32 { return max(a, b) }
	}
	for _, p := range rules.Policies {
		periodStart := currentReplicas - replicasChangePerPeriod(p.PeriodSeconds, upEvents, now) + replicasChangePerPeriod(p.PeriodSeconds, downEvents, now)
		if proposed, ok := propose(periodStart, p); ok {
			result = pick(result, proposed)
		}
	}
	return result
}

// replicasChangePerPeriod sums the changes of the events of the last periodSeconds.
func replicasChangePerPeriod(periodSeconds int32, events []timestampedScaleEvent, now time.Time) int32 {
	cutoff := now.Add(-time.Duration(periodSeconds) * time.Second)
	var n int32
	for _, e := range events {
		if e.timestamp.After(cutoff) {
			n += e.replicaChange
		}
	}
	return n
}

// storeScaleEvent records a rescale for the rate policies of an HPA with behavior, reusing
// the slot of an event older than every policy's period.
func (n *normalizer) storeScaleEvent(key string, behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, prev, next int32, now time.Time) {
	if behavior == nil || prev == next {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	events, rules, change := n.scaleUpEvents, withDefaults(behavior.ScaleUp, defaultScaleUpRules()), next-prev
	if next < prev {
		events, rules, change = n.scaleDownEvents, withDefaults(behavior.ScaleDown, defaultScaleDownRules(n.downscaleStabilization)), prev-next
	}
	longest := int32(0)
	for _, p := range rules.Policies {
		longest = max(longest, p.PeriodSeconds)
	}
	cutoff := now.Add(-time.Duration(longest) * time.Second)
	list := events[key]
	oldIndex := -1
	for i := range list {
		if list[i].timestamp.Before(cutoff) {
			list[i].outdated = true
		}
		if list[i].outdated {
			oldIndex = i
		}
	}
	e := timestampedScaleEvent{replicaChange: change, timestamp: now}
	if oldIndex >= 0 {
		list[oldIndex] = e
	} else {
		list = append(list, e)
	}
	events[key] = list
}

// hpaTolerances are the HPA's tolerances: behavior's when set, else the controller's.
func hpaTolerances(behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, def float64) tolerances {
	t := tolerances{scaleDown: def, scaleUp: def}
	if behavior == nil {
		return t
	}
	if behavior.ScaleDown != nil && behavior.ScaleDown.Tolerance != nil {
		t.scaleDown = behavior.ScaleDown.Tolerance.AsApproximateFloat64()
	}
	if behavior.ScaleUp != nil && behavior.ScaleUp.Tolerance != nil {
		t.scaleUp = behavior.ScaleUp.Tolerance.AsApproximateFloat64()
	}
	return t
}

// defaultMetrics is the API default of spec.metrics: 80 % CPU utilization.
func defaultMetrics() []autoscalingv2.MetricSpec {
	return []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)},
	}}}
}
