package defaults

import (
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DefaultCPUUtilization is the CPU utilization an HPA without metrics targets, as upstream
// (autoscaling.DefaultCPUUtilization); the autoscaling/v1 -> v2 conversion applies it too.
const DefaultCPUUtilization = 80

// setPriorityClass: preemptionPolicy PreemptLowerPriority, as upstream's v1 defaults.
func setPriorityClass(pc *schedulingv1.PriorityClass) {
	if pc.PreemptionPolicy == nil {
		pc.PreemptionPolicy = new(corev1.PreemptLowerPriority)
	}
}

// setHorizontalPodAutoscalerV1 is upstream's autoscaling/v1 defaulting: minReplicas 1. The
// implicit CPU target of v1 is applied by the conversion to v2, which sees the metrics kept in
// annotations.
func setHorizontalPodAutoscalerV1(hpa *autoscalingv1.HorizontalPodAutoscaler) {
	if hpa.Spec.MinReplicas == nil {
		hpa.Spec.MinReplicas = new(int32(1))
	}
}

// setHorizontalPodAutoscaler is upstream's autoscaling/v2 defaulting: minReplicas 1, an 80% CPU
// utilization target when no metric is given, and, when a behavior is given, its unset scaling
// rules filled with the controller's built-in ones (GenerateHPAScaleUpRules/ScaleDownRules).
func setHorizontalPodAutoscaler(hpa *autoscalingv2.HorizontalPodAutoscaler) {
	if hpa.Spec.MinReplicas == nil {
		hpa.Spec.MinReplicas = new(int32(1))
	}
	if len(hpa.Spec.Metrics) == 0 {
		hpa.Spec.Metrics = []autoscalingv2.MetricSpec{{
			Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU,
				Target: autoscalingv2.MetricTarget{
					Type:               autoscalingv2.UtilizationMetricType,
					AverageUtilization: new(int32(DefaultCPUUtilization)),
				},
			},
		}}
	}
	if b := hpa.Spec.Behavior; b != nil {
		b.ScaleUp = withScalingDefaults(b.ScaleUp, HPAScaleUpRules())
		b.ScaleDown = withScalingDefaults(b.ScaleDown, HPAScaleDownRules())
	}
}

// HPAScaleUpRules returns upstream's default scale-up rules: no stabilization window, and per
// 15 s at most 4 pods or 100% more, whichever is more.
func HPAScaleUpRules() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: new(int32(0)),
		SelectPolicy:               new(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	}
}

// HPAScaleDownRules returns upstream's default scale-down rules: up to 100% per 15 s. The
// stabilization window stays unset: the controller's --horizontal-pod-autoscaler-downscale-
// stabilization (5 minutes) applies.
func HPAScaleDownRules() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		SelectPolicy: new(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	}
}

// withScalingDefaults fills the unset fields of rules from defaults (upstream's
// copyHPAScalingRules); nil rules get the defaults.
func withScalingDefaults(rules, defaults *autoscalingv2.HPAScalingRules) *autoscalingv2.HPAScalingRules {
	if rules == nil {
		return defaults
	}
	if rules.SelectPolicy != nil {
		defaults.SelectPolicy = rules.SelectPolicy
	}
	if rules.StabilizationWindowSeconds != nil {
		defaults.StabilizationWindowSeconds = rules.StabilizationWindowSeconds
	}
	if rules.Policies != nil {
		defaults.Policies = rules.Policies
	}
	if rules.Tolerance != nil {
		defaults.Tolerance = rules.Tolerance
	}
	return defaults
}

// registerSchedulingNodeAutoscaling adds the defaulting of scheduling.k8s.io/v1 PriorityClass,
// node.k8s.io/v1 RuntimeClass (none upstream) and autoscaling/v1 and v2 HorizontalPodAutoscaler.
func registerSchedulingNodeAutoscaling(scheme *runtime.Scheme) {
	kind(scheme, &schedulingv1.PriorityClass{}, &schedulingv1.PriorityClassList{}, func(l *schedulingv1.PriorityClassList) []schedulingv1.PriorityClass { return l.Items }, setPriorityClass)
	kind(scheme, &nodev1.RuntimeClass{}, &nodev1.RuntimeClassList{}, func(l *nodev1.RuntimeClassList) []nodev1.RuntimeClass { return l.Items }, noop[nodev1.RuntimeClass])
	kind(scheme, &autoscalingv1.HorizontalPodAutoscaler{}, &autoscalingv1.HorizontalPodAutoscalerList{},
		func(l *autoscalingv1.HorizontalPodAutoscalerList) []autoscalingv1.HorizontalPodAutoscaler {
			return l.Items
		}, setHorizontalPodAutoscalerV1)
	kind(scheme, &autoscalingv2.HorizontalPodAutoscaler{}, &autoscalingv2.HorizontalPodAutoscalerList{},
		func(l *autoscalingv2.HorizontalPodAutoscalerList) []autoscalingv2.HorizontalPodAutoscaler {
			return l.Items
		}, setHorizontalPodAutoscaler)
}
