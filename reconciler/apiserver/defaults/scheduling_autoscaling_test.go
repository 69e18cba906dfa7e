package defaults

import (
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestSchedulingNodeAutoscalingDefaults(t *testing.T) {
	cases := []struct {
		name    string
		in, out runtime.Object
	}{
		{
			name: "priorityclass: preemptionPolicy",
			in:   fromYAML(t, `{metadata: {name: high}, value: 1000}`, &schedulingv1.PriorityClass{}),
			out:  fromYAML(t, `{metadata: {name: high}, value: 1000, preemptionPolicy: PreemptLowerPriority}`, &schedulingv1.PriorityClass{}),
		},
		{
			name: "priorityclass: Never kept",
			in:   fromYAML(t, `{metadata: {name: low}, value: 1, preemptionPolicy: Never}`, &schedulingv1.PriorityClass{}),
			out:  fromYAML(t, `{metadata: {name: low}, value: 1, preemptionPolicy: Never}`, &schedulingv1.PriorityClass{}),
		},
		{
			name: "runtimeclass: nothing",
			in:   fromYAML(t, `{metadata: {name: kata}, handler: kata}`, &nodev1.RuntimeClass{}),
			out:  fromYAML(t, `{metadata: {name: kata}, handler: kata}`, &nodev1.RuntimeClass{}),
		},
		{
			name: "hpa v1: minReplicas only (the CPU target is the conversion's)",
			in:   fromYAML(t, `{spec: {scaleTargetRef: {kind: Deployment, name: web}, maxReplicas: 3}}`, &autoscalingv1.HorizontalPodAutoscaler{}),
			out:  fromYAML(t, `{spec: {scaleTargetRef: {kind: Deployment, name: web}, maxReplicas: 3, minReplicas: 1}}`, &autoscalingv1.HorizontalPodAutoscaler{}),
		},
		{
			name: "hpa v2: minReplicas and the 80% CPU target; no behavior added",
			in:   fromYAML(t, `{spec: {scaleTargetRef: {kind: Deployment, name: web}, maxReplicas: 3}}`, &autoscalingv2.HorizontalPodAutoscaler{}),
			out: fromYAML(t, `
spec:
  scaleTargetRef: {kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 3
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]
`, &autoscalingv2.HorizontalPodAutoscaler{}),
		},
		{
			name: "hpa v2: given metrics and minReplicas kept; an empty behavior gets both rule sets",
			in: fromYAML(t, `
spec:
  scaleTargetRef: {kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 3
  metrics: [{type: Resource, resource: {name: memory, target: {type: AverageValue, averageValue: 1Gi}}}]
  behavior: {}
`, &autoscalingv2.HorizontalPodAutoscaler{}),
			out: fromYAML(t, `
spec:
  scaleTargetRef: {kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 3
  metrics: [{type: Resource, resource: {name: memory, target: {type: AverageValue, averageValue: 1Gi}}}]
  behavior:
    scaleUp:
      stabilizationWindowSeconds: 0
      selectPolicy: Max
      policies: [{type: Pods, value: 4, periodSeconds: 15}, {type: Percent, value: 100, periodSeconds: 15}]
    scaleDown:
      selectPolicy: Max
      policies: [{type: Percent, value: 100, periodSeconds: 15}]
`, &autoscalingv2.HorizontalPodAutoscaler{}),
		},
		{
			name: "hpa v2: a partial scaling rule is completed, what it sets kept",
			in: fromYAML(t, `
spec:
  scaleTargetRef: {kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 3
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}}]
  behavior: {scaleDown: {stabilizationWindowSeconds: 60, tolerance: 50m}}
`, &autoscalingv2.HorizontalPodAutoscaler{}),
			out: fromYAML(t, `
spec:
  scaleTargetRef: {kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 3
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}}]
  behavior:
    scaleUp:
      stabilizationWindowSeconds: 0
      selectPolicy: Max
      policies: [{type: Pods, value: 4, periodSeconds: 15}, {type: Percent, value: 100, periodSeconds: 15}]
    scaleDown:
      stabilizationWindowSeconds: 60
      tolerance: 50m
      selectPolicy: Max
      policies: [{type: Percent, value: 100, periodSeconds: 15}]
`, &autoscalingv2.HorizontalPodAutoscaler{}),
		},
		{
			name: "hpa v2 list: every item",
			in:   &autoscalingv2.HorizontalPodAutoscalerList{Items: []autoscalingv2.HorizontalPodAutoscaler{{}}},
			out: fromYAML(t, `
items:
- spec:
    scaleTargetRef: {kind: "", name: ""}
    minReplicas: 1
    maxReplicas: 0
    metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]
`, &autoscalingv2.HorizontalPodAutoscalerList{}),
		},
	}
	s := newScheme(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.DeepCopyObject()
			s.Default(got)
			if !apiequality.Semantic.DeepEqual(got, tc.out) {
				t.Errorf("got:\n%s\nwant:\n%s", toYAML(t, got), toYAML(t, tc.out))
			}
			// Defaulting runs on every decode: twice is once.
			again := got.DeepCopyObject()
			s.Default(again)
			if !apiequality.Semantic.DeepEqual(again, got) {
				t.Errorf("not idempotent:\n%s", toYAML(t, again))
			}
		})
	}
}
