package apiserver

import (
	"encoding/json"
	"maps"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/defaults"
)

// HorizontalPodAutoscaler is served as autoscaling/v2 and autoscaling/v1, and both versions
// read and write the same objects, as upstream.
//
// Everywhere else the scheme has no internal types: a group's external Go types are
// registered a second time as its internal version, so "converting" to and from internal is a
// copy. That cannot work for a kind served in two versions with different Go types, since
// only one type can be the internal one. For the HPA, NewScheme registers the autoscaling/v2
// types as the internal version (the hub) and skips the autoscaling/v1 ones (hubVersions),
// gives the group the version priority v2, v1 (so v2 is the storage version and the one
// discovery prefers), and registers the v1 <-> v2 conversions below with the scheme. Then:
//
//   - the store of both versions holds the v2 type (resources.go: newObj/newList are v2) and
//     etcd holds autoscaling/v2 JSON;
//   - a v1 request body is decoded as v1, defaulted with the v1 defaults, and converted to v2
//     by the scheme; a v1 response is the stored v2 object converted to v1;
//   - validation, admission, printers and the strategy see only the v2 type.
//
// The conversion is upstream's (pkg/apis/autoscaling/v1/conversion.go): v1's
// targetCPUUtilizationPercentage is a Resource cpu metric with an Utilization target, and
// what v1 cannot express (other metrics, their current values, the behavior, the conditions)
// travels in the autoscaling.alpha.kubernetes.io/* annotations, so a v1 client that reads and
// writes an object back loses nothing. The annotations never reach storage.
//
// The Scale kind of the group (the /scale subresources) exists only in v1 and is its own hub.

// hubVersions names, for the kinds served in several versions with different Go types, the
// version whose Go type is registered as the group's internal version.
var hubVersions = map[schema.GroupKind]string{
	{Group: autoscalingv1.GroupName, Kind: "HorizontalPodAutoscaler"}:     autoscalingv2.SchemeGroupVersion.Version,
	{Group: autoscalingv1.GroupName, Kind: "HorizontalPodAutoscalerList"}: autoscalingv2.SchemeGroupVersion.Version,
}

// isHubVersion reports whether the Go type of kind in gv is registered as the internal version:
// always, except for the kinds of hubVersions in their other versions.
func isHubVersion(gv schema.GroupVersion, kind string) bool {
	v, ok := hubVersions[gv.WithKind(kind).GroupKind()]
	return !ok || v == gv.Version
}

// Annotations that carry what autoscaling/v1 cannot express (upstream pkg/apis/autoscaling).
const (
	hpaMetricSpecsAnnotation    = "autoscaling.alpha.kubernetes.io/metrics"
	hpaMetricStatusesAnnotation = "autoscaling.alpha.kubernetes.io/current-metrics"
	hpaConditionsAnnotation     = "autoscaling.alpha.kubernetes.io/conditions"
	hpaBehaviorSpecsAnnotation  = "autoscaling.alpha.kubernetes.io/behavior"
	// The tolerance annotations are written by upstream's v2beta2 conversion; dropped here
	// too so that they never reach storage.
	hpaToleranceScaleDownAnnotation = "autoscaling.alpha.kubernetes.io/scale-down-tolerance"
	hpaToleranceScaleUpAnnotation   = "autoscaling.alpha.kubernetes.io/scale-up-tolerance"
)

var hpaRoundTripAnnotations = []string{hpaMetricSpecsAnnotation, hpaMetricStatusesAnnotation, hpaConditionsAnnotation,
	hpaBehaviorSpecsAnnotation, hpaToleranceScaleDownAnnotation, hpaToleranceScaleUpAnnotation}

// addAutoscalingConversions registers the HorizontalPodAutoscaler conversions between
// autoscaling/v1 and the v2 hub.
func addAutoscalingConversions(s *runtime.Scheme) error {
	funcs := []struct {
		a, b any
		fn   conversion.ConversionFunc
	}{
		{(*autoscalingv1.HorizontalPodAutoscaler)(nil), (*autoscalingv2.HorizontalPodAutoscaler)(nil), func(a, b any, _ conversion.Scope) error {
			return convertHPAv1ToV2(a.(*autoscalingv1.HorizontalPodAutoscaler), b.(*autoscalingv2.HorizontalPodAutoscaler))
		}},
		{(*autoscalingv2.HorizontalPodAutoscaler)(nil), (*autoscalingv1.HorizontalPodAutoscaler)(nil), func(a, b any, _ conversion.Scope) error {
			return convertHPAv2ToV1(a.(*autoscalingv2.HorizontalPodAutoscaler), b.(*autoscalingv1.HorizontalPodAutoscaler))
		}},
		{(*autoscalingv1.HorizontalPodAutoscalerList)(nil), (*autoscalingv2.HorizontalPodAutoscalerList)(nil), func(a, b any, _ conversion.Scope) error {
			in, out := a.(*autoscalingv1.HorizontalPodAutoscalerList), b.(*autoscalingv2.HorizontalPodAutoscalerList)
			out.ListMeta = *in.ListMeta.DeepCopy()
			var err error
			out.Items, err = convertHPAItems(in.Items, convertHPAv1ToV2)
			return err
		}},
		{(*autoscalingv2.HorizontalPodAutoscalerList)(nil), (*autoscalingv1.HorizontalPodAutoscalerList)(nil), func(a, b any, _ conversion.Scope) error {
			in, out := a.(*autoscalingv2.HorizontalPodAutoscalerList), b.(*autoscalingv1.HorizontalPodAutoscalerList)
			out.ListMeta = *in.ListMeta.DeepCopy()
			var err error
			out.Items, err = convertHPAItems(in.Items, convertHPAv2ToV1)
			return err
		}},
	}
	for _, f := range funcs {
		if err := s.AddConversionFunc(f.a, f.b, f.fn); err != nil {
			return err
		}
	}
	return nil
}

// convertHPAItems converts the items of an HPA list one by one with convert (nil stays nil),
// stopping at the first error.
func convertHPAItems[A, B any](in []A, convert func(*A, *B) error) ([]B, error) {
	if in == nil {
		return nil, nil
	}
	out := make([]B, len(in))
	for i := range in {
		if err := convert(&in[i], &out[i]); err != nil {
			return out, err
		}
	}
	return out, nil
}

// dropHPARoundTripAnnotations returns a copy of annotations without the round-trip ones (nil
// when none is left).
func dropHPARoundTripAnnotations(annotations map[string]string) map[string]string {
	if annotations == nil {
		return nil
	}
	out := maps.Clone(annotations)
	for _, k := range hpaRoundTripAnnotations {
		delete(out, k)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func isCPUUtilization(m *autoscalingv2.MetricSpec) bool {
	return m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
		m.Resource.Target.AverageUtilization != nil
}

// convertHPAv2ToV1 is upstream's Convert_autoscaling_HorizontalPodAutoscaler_To_v1_...: the
// CPU utilization target becomes targetCPUUtilizationPercentage, everything else goes to
// annotations. in is not modified.
func convertHPAv2ToV1(in *autoscalingv2.HorizontalPodAutoscaler, out *autoscalingv1.HorizontalPodAutoscaler) error {
	in = in.DeepCopy()
	out.ObjectMeta = in.ObjectMeta
	// Only the annotations produced here may be set: drop stale ones.
	out.Annotations = dropHPARoundTripAnnotations(out.Annotations)

	out.Spec = autoscalingv1.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv1.CrossVersionObjectReference(in.Spec.ScaleTargetRef),
		MinReplicas:    in.Spec.MinReplicas,
		MaxReplicas:    in.Spec.MaxReplicas,
	}
	for i := range in.Spec.Metrics {
		m := &in.Spec.Metrics[i]
		if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU {
			if u := m.Resource.Target.AverageUtilization; u != nil {
				out.Spec.TargetCPUUtilizationPercentage = new(*u)
			}
			break
		}
	}

	out.Status = autoscalingv1.HorizontalPodAutoscalerStatus{
		ObservedGeneration: in.Status.ObservedGeneration,
		LastScaleTime:      in.Status.LastScaleTime,
		CurrentReplicas:    in.Status.CurrentReplicas,
		DesiredReplicas:    in.Status.DesiredReplicas,
	}
	// No break, as upstream: the last CPU utilization wins.
	for _, m := range in.Status.CurrentMetrics {
		if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
			m.Resource.Current.AverageUtilization != nil {
			out.Status.CurrentCPUUtilizationPercentage = new(*m.Resource.Current.AverageUtilization)
		}
	}

	var other []autoscalingv1.MetricSpec
	for i := range in.Spec.Metrics {
		if !isCPUUtilization(&in.Spec.Metrics[i]) {
			other = append(other, metricSpecToV1(&in.Spec.Metrics[i]))
		}
	}
	set := func(key string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[key] = string(b)
		return nil
	}
	if len(other) > 0 {
		if err := set(hpaMetricSpecsAnnotation, other); err != nil {
			return err
		}
	}
	// The statuses are kept even when one maps to currentCPUUtilizationPercentage, for the
	// raw values.
	if len(in.Status.CurrentMetrics) > 0 {
		current := make([]autoscalingv1.MetricStatus, len(in.Status.CurrentMetrics))
		for i := range in.Status.CurrentMetrics {
			current[i] = metricStatusToV1(&in.Status.CurrentMetrics[i])
		}
		if err := set(hpaMetricStatusesAnnotation, current); err != nil {
			return err
		}
	}
	if in.Spec.Behavior != nil {
		if err := set(hpaBehaviorSpecsAnnotation, behaviorToAnnotation(in.Spec.Behavior)); err != nil {
			return err
		}
	}
	if len(in.Status.Conditions) > 0 {
		conds := make([]autoscalingv1.HorizontalPodAutoscalerCondition, len(in.Status.Conditions))
		for i, c := range in.Status.Conditions {
			conds[i] = autoscalingv1.HorizontalPodAutoscalerCondition{
				Type: autoscalingv1.HorizontalPodAutoscalerConditionType(c.Type), Status: c.Status,
				LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message, ObservedGeneration: c.ObservedGeneration,
			}
		}
		if err := set(hpaConditionsAnnotation, conds); err != nil {
			return err
		}
	}
	return nil
}

// convertHPAv1ToV2 is upstream's Convert_v1_HorizontalPodAutoscaler_To_autoscaling_...: the
// annotations written by convertHPAv2ToV1 are read back (and dropped), and an HPA without any
// metric gets the 80% CPU target v1 always implied. Annotations that do not decode are
// ignored, as upstream. in is not modified.
func convertHPAv1ToV2(in *autoscalingv1.HorizontalPodAutoscaler, out *autoscalingv2.HorizontalPodAutoscaler) error {
	in = in.DeepCopy()
	out.ObjectMeta = in.ObjectMeta
	ann := in.Annotations

	out.Spec = autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference(in.Spec.ScaleTargetRef),
		MinReplicas:    in.Spec.MinReplicas,
		MaxReplicas:    in.Spec.MaxReplicas,
	}
	if p := in.Spec.TargetCPUUtilizationPercentage; p != nil {
		out.Spec.Metrics = []autoscalingv2.MetricSpec{cpuUtilization(*p)}
	}
	out.Status = autoscalingv2.HorizontalPodAutoscalerStatus{
		ObservedGeneration: in.Status.ObservedGeneration,
		LastScaleTime:      in.Status.LastScaleTime,
		CurrentReplicas:    in.Status.CurrentReplicas,
		DesiredReplicas:    in.Status.DesiredReplicas,
	}
	if p := in.Status.CurrentCPUUtilizationPercentage; p != nil {
		out.Status.CurrentMetrics = []autoscalingv2.MetricStatus{{
			Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU,
				Current: autoscalingv2.MetricValueStatus{AverageUtilization: new(*p)}},
		}}
	}

	if enc, ok := ann[hpaMetricSpecsAnnotation]; ok {
		var other []autoscalingv1.MetricSpec
		if err := json.Unmarshal([]byte(enc), &other); err == nil {
			// The CPU target from the spec, if any, comes after the others.
			metrics := make([]autoscalingv2.MetricSpec, 0, len(other)+len(out.Spec.Metrics))
			for i := range other {
				metrics = append(metrics, metricSpecToV2(&other[i]))
			}
			out.Spec.Metrics = append(metrics, out.Spec.Metrics...)
		}
	}
	if enc, ok := ann[hpaBehaviorSpecsAnnotation]; ok {
		var b hpaBehaviorAnnotation
		if err := json.Unmarshal([]byte(enc), &b); err == nil && (b.ScaleUp != nil || b.ScaleDown != nil) {
			out.Spec.Behavior = b.toV2()
		}
	}
	if enc, ok := ann[hpaMetricStatusesAnnotation]; ok {
		var current []autoscalingv1.MetricStatus
		if err := json.Unmarshal([]byte(enc), &current); err == nil {
			// These have more information than currentCPUUtilizationPercentage.
			out.Status.CurrentMetrics = make([]autoscalingv2.MetricStatus, len(current))
			for i := range current {
				out.Status.CurrentMetrics[i] = metricStatusToV2(&current[i])
			}
		}
	}
	// autoscaling/v1 always implied a CPU target; v2 states it.
	if len(out.Spec.Metrics) == 0 {
		out.Spec.Metrics = []autoscalingv2.MetricSpec{cpuUtilization(defaults.DefaultCPUUtilization)}
	}
	if enc, ok := ann[hpaConditionsAnnotation]; ok {
		var conds []autoscalingv1.HorizontalPodAutoscalerCondition
		if err := json.Unmarshal([]byte(enc), &conds); err == nil {
			out.Status.Conditions = make([]autoscalingv2.HorizontalPodAutoscalerCondition, len(conds))
			for i, c := range conds {
				out.Status.Conditions[i] = autoscalingv2.HorizontalPodAutoscalerCondition{
					Type: autoscalingv2.HorizontalPodAutoscalerConditionType(c.Type), Status: c.Status,
					LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message, ObservedGeneration: c.ObservedGeneration,
				}
			}
		}
	}
	out.Annotations = dropHPARoundTripAnnotations(ann)
	return nil
}

func cpuUtilization(percent int32) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{
		Type: autoscalingv2.ResourceMetricSourceType,
		Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceCPU,
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: new(percent)}},
	}
}

// derefQuantity returns *q, or zero for nil (the v1 fields are not pointers).
func derefQuantity(q *apiresource.Quantity) apiresource.Quantity {
	if q == nil {
		return apiresource.Quantity{}
	}
	return *q
}

func metricSpecToV1(m *autoscalingv2.MetricSpec) autoscalingv1.MetricSpec {
	out := autoscalingv1.MetricSpec{Type: autoscalingv1.MetricSourceType(m.Type)}
	if s := m.Object; s != nil {
		out.Object = &autoscalingv1.ObjectMetricSource{
			Target:       autoscalingv1.CrossVersionObjectReference(s.DescribedObject),
			MetricName:   s.Metric.Name,
			TargetValue:  derefQuantity(s.Target.Value),
			Selector:     s.Metric.Selector,
			AverageValue: s.Target.AverageValue,
		}
	}
	if s := m.Pods; s != nil {
		out.Pods = &autoscalingv1.PodsMetricSource{MetricName: s.Metric.Name, TargetAverageValue: derefQuantity(s.Target.AverageValue), Selector: s.Metric.Selector}
	}
	if s := m.Resource; s != nil {
		out.Resource = &autoscalingv1.ResourceMetricSource{Name: s.Name,
			TargetAverageUtilization: s.Target.AverageUtilization, TargetAverageValue: s.Target.AverageValue}
	}
	if s := m.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricSource{Name: s.Name, Container: s.Container,
			TargetAverageUtilization: s.Target.AverageUtilization, TargetAverageValue: s.Target.AverageValue}
	}
	if s := m.External; s != nil {
		out.External = &autoscalingv1.ExternalMetricSource{MetricName: s.Metric.Name, MetricSelector: s.Metric.Selector,
			TargetValue: s.Target.Value, TargetAverageValue: s.Target.AverageValue}
	}
	return out
}

func metricSpecToV2(m *autoscalingv1.MetricSpec) autoscalingv2.MetricSpec {
	out := autoscalingv2.MetricSpec{Type: autoscalingv2.MetricSourceType(m.Type)}
	if s := m.Object; s != nil {
		t := autoscalingv2.ValueMetricType
		if s.AverageValue != nil {
			t = autoscalingv2.AverageValueMetricType
		}
		out.Object = &autoscalingv2.ObjectMetricSource{
			DescribedObject: autoscalingv2.CrossVersionObjectReference(s.Target),
			Metric:          autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector},
			Target:          autoscalingv2.MetricTarget{Type: t, Value: new(s.TargetValue), AverageValue: s.AverageValue},
		}
	}
	if s := m.Pods; s != nil {
		out.Pods = &autoscalingv2.PodsMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: new(s.TargetAverageValue)},
		}
	}
	if s := m.Resource; s != nil {
		out.Resource = &autoscalingv2.ResourceMetricSource{Name: s.Name, Target: resourceTargetToV2(s.TargetAverageUtilization, s.TargetAverageValue)}
	}
	if s := m.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricSource{Name: s.Name, Container: s.Container,
			Target: resourceTargetToV2(s.TargetAverageUtilization, s.TargetAverageValue)}
	}
	if s := m.External; s != nil {
		t := autoscalingv2.ValueMetricType
		if s.TargetValue == nil {
			t = autoscalingv2.AverageValueMetricType
		}
		out.External = &autoscalingv2.ExternalMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.MetricSelector},
			Target: autoscalingv2.MetricTarget{Type: t, Value: s.TargetValue, AverageValue: s.TargetAverageValue},
		}
	}
	return out
}

func resourceTargetToV2(utilization *int32, averageValue *apiresource.Quantity) autoscalingv2.MetricTarget {
	t := autoscalingv2.AverageValueMetricType
	if utilization != nil {
		t = autoscalingv2.UtilizationMetricType
	}
	return autoscalingv2.MetricTarget{Type: t, AverageUtilization: utilization, AverageValue: averageValue}
}

func metricStatusToV1(m *autoscalingv2.MetricStatus) autoscalingv1.MetricStatus {
	out := autoscalingv1.MetricStatus{Type: autoscalingv1.MetricSourceType(m.Type)}
	if s := m.Object; s != nil {
		out.Object = &autoscalingv1.ObjectMetricStatus{
			Target:       autoscalingv1.CrossVersionObjectReference(s.DescribedObject),
			MetricName:   s.Metric.Name,
			CurrentValue: derefQuantity(s.Current.Value),
			Selector:     s.Metric.Selector,
			AverageValue: s.Current.AverageValue,
		}
	}
	if s := m.Pods; s != nil {
		out.Pods = &autoscalingv1.PodsMetricStatus{MetricName: s.Metric.Name, CurrentAverageValue: derefQuantity(s.Current.AverageValue), Selector: s.Metric.Selector}
	}
	if s := m.Resource; s != nil {
		out.Resource = &autoscalingv1.ResourceMetricStatus{Name: s.Name,
			CurrentAverageUtilization: s.Current.AverageUtilization, CurrentAverageValue: derefQuantity(s.Current.AverageValue)}
	}
	if s := m.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricStatus{Name: s.Name, Container: s.Container,
			CurrentAverageUtilization: s.Current.AverageUtilization, CurrentAverageValue: derefQuantity(s.Current.AverageValue)}
	}
	if s := m.External; s != nil {
		out.External = &autoscalingv1.ExternalMetricStatus{MetricName: s.Metric.Name, MetricSelector: s.Metric.Selector,
			CurrentValue: derefQuantity(s.Current.Value), CurrentAverageValue: s.Current.AverageValue}
	}
	return out
}

func metricStatusToV2(m *autoscalingv1.MetricStatus) autoscalingv2.MetricStatus {
	out := autoscalingv2.MetricStatus{Type: autoscalingv2.MetricSourceType(m.Type)}
	if s := m.Object; s != nil {
		out.Object = &autoscalingv2.ObjectMetricStatus{
			DescribedObject: autoscalingv2.CrossVersionObjectReference(s.Target),
			Metric:          autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector},
			Current:         autoscalingv2.MetricValueStatus{Value: new(s.CurrentValue), AverageValue: s.AverageValue},
		}
	}
	if s := m.Pods; s != nil {
		out.Pods = &autoscalingv2.PodsMetricStatus{
			Metric:  autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector},
			Current: autoscalingv2.MetricValueStatus{AverageValue: new(s.CurrentAverageValue)},
		}
	}
	if s := m.Resource; s != nil {
		out.Resource = &autoscalingv2.ResourceMetricStatus{Name: s.Name,
			Current: autoscalingv2.MetricValueStatus{AverageValue: new(s.CurrentAverageValue), AverageUtilization: s.CurrentAverageUtilization}}
	}
	if s := m.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricStatus{Name: s.Name, Container: s.Container,
			Current: autoscalingv2.MetricValueStatus{AverageValue: new(s.CurrentAverageValue), AverageUtilization: s.CurrentAverageUtilization}}
	}
	if s := m.External; s != nil {
		out.External = &autoscalingv2.ExternalMetricStatus{
			Metric:  autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.MetricSelector},
			Current: autoscalingv2.MetricValueStatus{Value: new(s.CurrentValue), AverageValue: s.CurrentAverageValue},
		}
	}
	return out
}

// hpaBehaviorAnnotation is the behavior annotation's format: upstream marshals its internal
// autoscaling.HorizontalPodAutoscalerBehavior, whose fields have no json tags, so the keys are
// the Go field names ({"ScaleUp":{"StabilizationWindowSeconds":0,"SelectPolicy":"Max",...}}).
type hpaBehaviorAnnotation struct {
	ScaleUp   *hpaScalingRulesAnnotation
	ScaleDown *hpaScalingRulesAnnotation
}

type hpaScalingRulesAnnotation struct {
	StabilizationWindowSeconds *int32
	SelectPolicy               *autoscalingv2.ScalingPolicySelect
	Policies                   []hpaScalingPolicyAnnotation
	Tolerance                  *apiresource.Quantity
}

type hpaScalingPolicyAnnotation struct {
	Type          autoscalingv2.HPAScalingPolicyType
	Value         int32
	PeriodSeconds int32
}

func behaviorToAnnotation(b *autoscalingv2.HorizontalPodAutoscalerBehavior) hpaBehaviorAnnotation {
	rules := func(r *autoscalingv2.HPAScalingRules) *hpaScalingRulesAnnotation {
		if r == nil {
			return nil
		}
		out := &hpaScalingRulesAnnotation{StabilizationWindowSeconds: r.StabilizationWindowSeconds, SelectPolicy: r.SelectPolicy, Tolerance: r.Tolerance}
		if r.Policies != nil {
			out.Policies = make([]hpaScalingPolicyAnnotation, len(r.Policies))
			for i, p := range r.Policies {
				out.Policies[i] = hpaScalingPolicyAnnotation(p)
			}
		}
		return out
	}
	return hpaBehaviorAnnotation{ScaleUp: rules(b.ScaleUp), ScaleDown: rules(b.ScaleDown)}
}

func (b hpaBehaviorAnnotation) toV2() *autoscalingv2.HorizontalPodAutoscalerBehavior {
	rules := func(r *hpaScalingRulesAnnotation) *autoscalingv2.HPAScalingRules {
		if r == nil {
			return nil
		}
		out := &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: r.StabilizationWindowSeconds, SelectPolicy: r.SelectPolicy, Tolerance: r.Tolerance}
		if r.Policies != nil {
			out.Policies = make([]autoscalingv2.HPAScalingPolicy, len(r.Policies))
			for i, p := range r.Policies {
				out.Policies[i] = autoscalingv2.HPAScalingPolicy(p)
			}
		}
		return out
	}
	return &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: rules(b.ScaleUp), ScaleDown: rules(b.ScaleDown)}
}
