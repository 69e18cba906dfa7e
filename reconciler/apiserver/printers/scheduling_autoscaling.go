package printers

import (
	"fmt"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var priorityClassPrinter = named([]metav1.TableColumnDefinition{
	col("Value", "integer", "value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec."),
	col("Global-Default", "boolean", "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class."),
	ageColumn,
	col("PreemptionPolicy", "string", "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority."),
}, func(pc *schedulingv1.PriorityClass, c clock) []any {
	policy := ""
	if pc.PreemptionPolicy != nil {
		policy = string(*pc.PreemptionPolicy)
	}
	return []any{int64(pc.Value), pc.GlobalDefault, c.age(pc.CreationTimestamp), policy}
})

var runtimeClassPrinter = named([]metav1.TableColumnDefinition{
	col("Handler", "string", "Handler is the name of the underlying runtime and configuration"),
	ageColumn,
}, func(rc *nodev1.RuntimeClass, c clock) []any {
	return []any{rc.Handler, c.age(rc.CreationTimestamp)}
})

// hpaPrinter prints the stored autoscaling/v2 object, which both API versions read.
var hpaPrinter = named([]metav1.TableColumnDefinition{
	col("Reference", "string", "scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count."),
	col("Targets", "string", "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used)."),
	col("MinPods", "string", "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down."),
	col("MaxPods", "string", "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up."),
	col("Replicas", "string", "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler."),
	ageColumn,
}, func(hpa *autoscalingv2.HorizontalPodAutoscaler, c clock) []any {
	ref := hpa.Spec.ScaleTargetRef.Kind + "/" + hpa.Spec.ScaleTargetRef.Name
	minPods := "<unset>"
	if hpa.Spec.MinReplicas != nil {
		minPods = fmt.Sprintf("%d", *hpa.Spec.MinReplicas)
	}
	return []any{ref, hpaTargets(hpa.Spec.Metrics, hpa.Status.CurrentMetrics), minPods,
		int64(hpa.Spec.MaxReplicas), int64(hpa.Status.CurrentReplicas), c.age(hpa.CreationTimestamp)}
})

// hpaTargets is the TARGETS cell: "current/target" per metric ("cpu: 40%/80%"), the first two
// and "+ N more...", as upstream's formatHPAMetrics. The status of metric i is read from
// currentMetrics[i].
func hpaTargets(specs []autoscalingv2.MetricSpec, statuses []autoscalingv2.MetricStatus) string {
	if len(specs) == 0 {
		return none
	}
	const maximum = 2
	var list []string
	status := func(i int) *autoscalingv2.MetricStatus {
		if i < len(statuses) {
			return &statuses[i]
		}
		return nil
	}
	for i, spec := range specs {
		cur := currentValue(status(i), spec.Type)
		switch {
		case spec.Type == autoscalingv2.ExternalMetricSourceType && spec.External != nil:
			list = append(list, valueTarget(spec.External.Target, cur))
		case spec.Type == autoscalingv2.PodsMetricSourceType && spec.Pods != nil:
			current := "<unknown>"
			if cur != nil && cur.AverageValue != nil {
				current = cur.AverageValue.String()
			}
			list = append(list, fmt.Sprintf("%s/%s", current, spec.Pods.Target.AverageValue.String()))
		case spec.Type == autoscalingv2.ObjectMetricSourceType && spec.Object != nil:
			list = append(list, valueTarget(spec.Object.Target, cur))
		case spec.Type == autoscalingv2.ResourceMetricSourceType && spec.Resource != nil:
			list = append(list, resourceTarget(string(spec.Resource.Name), spec.Resource.Target, cur))
		case spec.Type == autoscalingv2.ContainerResourceMetricSourceType && spec.ContainerResource != nil:
			list = append(list, resourceTarget(string(spec.ContainerResource.Name), spec.ContainerResource.Target, cur))
		default:
			list = append(list, "<unknown type>")
		}
	}
	if len(list) > maximum {
		return fmt.Sprintf("%s + %d more...", strings.Join(list[:maximum], ", "), len(list)-maximum)
	}
	return strings.Join(list, ", ")
}

// currentValue is the current value in st (nil: none) of a metric of type t; nil when st
// has none for that type.
func currentValue(st *autoscalingv2.MetricStatus, t autoscalingv2.MetricSourceType) *autoscalingv2.MetricValueStatus {
	if st == nil {
		return nil
	}
	switch {
	case t == autoscalingv2.ExternalMetricSourceType && st.External != nil:
		return &st.External.Current
	case t == autoscalingv2.PodsMetricSourceType && st.Pods != nil:
		return &st.Pods.Current
	case t == autoscalingv2.ObjectMetricSourceType && st.Object != nil:
		return &st.Object.Current
	case t == autoscalingv2.ResourceMetricSourceType && st.Resource != nil:
		return &st.Resource.Current
	case t == autoscalingv2.ContainerResourceMetricSourceType && st.ContainerResource != nil:
		return &st.ContainerResource.Current
	}
	return nil
}

// valueTarget is "current/target" of an Object or External metric: an average value ("(avg)"),
// or a value.
func valueTarget(t autoscalingv2.MetricTarget, cur *autoscalingv2.MetricValueStatus) string {
	current := "<unknown>"
	if t.AverageValue != nil {
		if cur != nil && cur.AverageValue != nil {
			current = cur.AverageValue.String()
		}
		return fmt.Sprintf("%s/%s (avg)", current, t.AverageValue.String())
	}
	if cur != nil && cur.Value != nil {
		current = cur.Value.String()
	}
	return fmt.Sprintf("%s/%s", current, t.Value.String())
}

// resourceTarget is "name: current/target" of a Resource or ContainerResource metric: an
// average value, or a utilization in percent ("<auto>" when the target has neither).
func resourceTarget(name string, t autoscalingv2.MetricTarget, cur *autoscalingv2.MetricValueStatus) string {
	current := "<unknown>"
	if t.AverageValue != nil {
		if cur != nil && cur.AverageValue != nil {
			current = cur.AverageValue.String()
		}
		return fmt.Sprintf("%s: %s/%s", name, current, t.AverageValue.String())
	}
	if cur != nil && cur.AverageUtilization != nil {
		current = fmt.Sprintf("%d%%", *cur.AverageUtilization)
	}
	target := "<auto>"
	if t.AverageUtilization != nil {
		target = fmt.Sprintf("%d%%", *t.AverageUtilization)
	}
	return fmt.Sprintf("%s: %s/%s", name, current, target)
}
