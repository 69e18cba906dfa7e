package podautoscaler

import (
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// step is one evaluation of an HPA: at seconds after the start, with the target at current
// replicas and the metrics recommending desired, normalization gives want (and the reasons of
// AbleToScale, when stabilized, and of ScalingLimited).
type step struct {
	at            float64
	current       int32
	desired       int32
	want          int32
	wantStabilize string // "" when not stabilized
	wantLimit     string
}

func rules(stabilization *int32, sel autoscalingv2.ScalingPolicySelect, policies ...autoscalingv2.HPAScalingPolicy) *autoscalingv2.HPAScalingRules {
	r := &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: stabilization, Policies: policies}
	if sel != "" {
		r.SelectPolicy = &sel
	}
	return r
}

func pods(n, period int32) autoscalingv2.HPAScalingPolicy {
	return autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PodsScalingPolicy, Value: n, PeriodSeconds: period}
}

func percent(n, period int32) autoscalingv2.HPAScalingPolicy {
	return autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PercentScalingPolicy, Value: n, PeriodSeconds: period}
}

// TestNormalize runs sequences of evaluations through the stabilization and the limits, the
// way reconcile does: the initial recommendation first, a scale event after each rescale.
func TestNormalize(t *testing.T) {
	cases := []struct {
		name     string
		behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
		min, max int32
		steps    []step
	}{
		{name: "no behavior: scale down waits for the 5 min stabilization window", min: 1, max: 10, steps: []step{
			{at: 0, current: 5, desired: 5, want: 5, wantLimit: "DesiredWithinRange"},
			{at: 60, current: 5, desired: 2, want: 5, wantStabilize: "ScaleDownStabilized", wantLimit: "DesiredWithinRange"},
			{at: 200, current: 5, desired: 3, want: 5, wantStabilize: "ScaleDownStabilized", wantLimit: "DesiredWithinRange"},
			// The recommendations of 0 s have left the window; 60 s's and 200 s's remain.
			{at: 301, current: 5, desired: 2, want: 3, wantStabilize: "ScaleDownStabilized", wantLimit: "DesiredWithinRange"},
			{at: 501, current: 3, desired: 2, want: 2, wantLimit: "DesiredWithinRange"},
		}},
		{name: "no behavior: scale up at once to max(2 x current, 4)", min: 1, max: 20, steps: []step{
			{at: 0, current: 1, desired: 10, want: 4, wantLimit: "ScaleUpLimit"},
			{at: 15, current: 4, desired: 10, want: 8, wantLimit: "ScaleUpLimit"},
			{at: 30, current: 8, desired: 10, want: 10, wantLimit: "DesiredWithinRange"},
		}},
		{name: "no behavior: min and max", min: 2, max: 10, steps: []step{
			{at: 0, current: 8, desired: 30, want: 10, wantLimit: "TooManyReplicas"},
			{at: 400, current: 10, desired: 1, want: 2, wantLimit: "TooFewReplicas"},
		}},
		{name: "default behavior: up by 4 pods or 100% per 15 s, whichever is more", min: 1, max: 50,
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{}, steps: []step{
				{at: 0, current: 2, desired: 20, want: 6, wantLimit: "ScaleUpLimit"},
				// Within 15 s of the last scale up the period started at 2: no more.
				{at: 10, current: 6, desired: 20, want: 6, wantLimit: "ScaleUpLimit"},
				{at: 16, current: 6, desired: 20, want: 12, wantLimit: "ScaleUpLimit"},
				{at: 32, current: 12, desired: 20, want: 20, wantLimit: "DesiredWithinRange"},
			}},
		{name: "default behavior: scale down stabilized for 5 min", min: 1, max: 10,
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{}, steps: []step{
				{at: 0, current: 5, desired: 2, want: 5, wantStabilize: "ScaleDownStabilized", wantLimit: "DesiredWithinRange"},
				{at: 299, current: 5, desired: 2, want: 5, wantStabilize: "ScaleDownStabilized", wantLimit: "DesiredWithinRange"},
				{at: 301, current: 5, desired: 2, want: 2, wantLimit: "DesiredWithinRange"},
			}},
		{name: "min change picks the smaller scale up", min: 1, max: 50,
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: rules(nil, autoscalingv2.MinChangePolicySelect, pods(4, 15), percent(100, 15))}, steps: []step{
				{at: 0, current: 2, desired: 20, want: 4, wantLimit: "ScaleUpLimit"},
			}},
		{name: "scale down one pod a minute without stabilization", min: 1, max: 10,
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: rules(ptr.To[int32](0), "", pods(1, 60))}, steps: []step{
				{at: 0, current: 5, desired: 1, want: 4, wantLimit: "ScaleDownLimit"},
				{at: 30, current: 4, desired: 1, want: 4, wantLimit: "ScaleDownLimit"},
				{at: 61, current: 4, desired: 1, want: 3, wantLimit: "ScaleDownLimit"},
			}},
		{name: "percent scale down rounds down", min: 1, max: 10,
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: rules(ptr.To[int32](0), "", percent(50, 60))}, steps: []step{
				{at: 0, current: 5, desired: 1, want: 2, wantLimit: "ScaleDownLimit"},
			}},
		{name: "scale down disabled", min: 1, max: 10,
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: rules(ptr.To[int32](0), autoscalingv2.DisabledPolicySelect, percent(100, 15))}, steps: []step{
				{at: 0, current: 5, desired: 1, want: 5, wantLimit: "ScaleDownLimit"},
			}},
		{name: "scale up disabled", min: 1, max: 10,
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: rules(nil, autoscalingv2.DisabledPolicySelect)}, steps: []step{
				{at: 0, current: 2, desired: 8, want: 2, wantLimit: "ScaleUpLimit"},
			}},
		{name: "scale-up stabilization window", min: 1, max: 10,
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: rules(ptr.To[int32](60), "")}, steps: []step{
				{at: 0, current: 2, desired: 2, want: 2, wantLimit: "DesiredWithinRange"},
				{at: 10, current: 2, desired: 6, want: 2, wantStabilize: "ScaleUpStabilized", wantLimit: "DesiredWithinRange"},
				{at: 40, current: 2, desired: 8, want: 2, wantStabilize: "ScaleUpStabilized", wantLimit: "DesiredWithinRange"},
				// 0 s's recommendations have left the window: the lowest since is 6.
				{at: 61, current: 2, desired: 8, want: 6, wantStabilize: "ScaleUpStabilized", wantLimit: "DesiredWithinRange"},
			}},
		{name: "behavior limits stop at max", min: 1, max: 5,
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{}, steps: []step{
				{at: 0, current: 2, desired: 20, want: 5, wantLimit: "TooManyReplicas"},
			}},
		{name: "behavior limits stop at min", min: 3, max: 10,
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: rules(ptr.To[int32](0), "")}, steps: []step{
				{at: 0, current: 5, desired: 1, want: 3, wantLimit: "TooFewReplicas"},
			}},
	}
	t0 := testNow
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNormalizer(5 * time.Minute)
			const key = "shop/web"
			for i, s := range c.steps {
				now := t0.Add(time.Duration(s.at * float64(time.Second)))
				if i == 0 {
					n.recordInitialRecommendation(key, s.current, now)
				}
				got, out := n.normalize(key, c.behavior, s.current, s.desired, c.min, c.max, now)
				stabilized := ""
				if out.stabilized {
					stabilized = out.stabilizedReason
				}
				if got != s.want || stabilized != s.wantStabilize || out.limitReason != s.wantLimit || out.limited != (s.wantLimit != "DesiredWithinRange") {
					t.Errorf("at %vs (current %d, desired %d): %d stabilized %q limited %v %q; want %d, %q, %q",
						s.at, s.current, s.desired, got, stabilized, out.limited, out.limitReason, s.want, s.wantStabilize, s.wantLimit)
				}
				n.storeScaleEvent(key, c.behavior, s.current, got, now)
			}
		})
	}
}

func TestScaleEventSlotsAreReused(t *testing.T) {
	n := newNormalizer(5 * time.Minute)
	b := &autoscalingv2.HorizontalPodAutoscalerBehavior{}
	for i := 0; i < 10; i++ {
		n.storeScaleEvent("k", b, 1, 2, testNow.Add(time.Duration(i)*time.Minute))
	}
	if got := len(n.scaleUpEvents["k"]); got != 1 {
		t.Errorf("%d scale-up events kept for one every minute with 15 s policies, want 1", got)
	}
	n.storeScaleEvent("k", nil, 1, 2, testNow)
	n.forget("k")
	if len(n.scaleUpEvents)+len(n.scaleDownEvents)+len(n.recommendations) != 0 {
		t.Error("forget left state behind")
	}
}

func TestTolerances(t *testing.T) {
	q := apiresource.MustParse("0.05")
	big := apiresource.MustParse("0.5")
	cases := []struct {
		name     string
		behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
		want     tolerances
	}{
		{"controller default", nil, tolerances{0.1, 0.1}},
		{"behavior without tolerance", &autoscalingv2.HorizontalPodAutoscalerBehavior{}, tolerances{0.1, 0.1}},
		{"own tolerances", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: &autoscalingv2.HPAScalingRules{Tolerance: &q}, ScaleDown: &autoscalingv2.HPAScalingRules{Tolerance: &big}}, tolerances{scaleDown: 0.5, scaleUp: 0.05}},
	}
	for _, c := range cases {
		if got := hpaTolerances(c.behavior, 0.1); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	tol := tolerances{scaleDown: 0.5, scaleUp: 0.05}
	for ratio, within := range map[float64]bool{0.49: false, 0.5: true, 1.05: true, 1.06: false} {
		if tol.isWithin(ratio) != within {
			t.Errorf("isWithin(%v) = %v", ratio, !within)
		}
	}
}
