package validation

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	pathvalidation "k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// HorizontalPodAutoscaler validation, as upstream's pkg/apis/autoscaling/validation (v1.37) with
// the HPAScaleToZero feature off and HPAConfigurableTolerance on (their defaults). Both
// autoscaling/v1 and autoscaling/v2 objects arrive here as the stored autoscaling/v2 type: v1
// requests are converted first, so the rules are written once.

const (
	// hpaMaxPeriodSeconds is the longest scaling policy period.
	hpaMaxPeriodSeconds int32 = 1800
	// hpaMaxStabilizationWindowSeconds is the longest stabilization window.
	hpaMaxStabilizationWindowSeconds int32 = 3600
)

var (
	hpaMetricSourceTypes = []autoscalingv2.MetricSourceType{
		autoscalingv2.ContainerResourceMetricSourceType, autoscalingv2.ExternalMetricSourceType,
		autoscalingv2.ObjectMetricSourceType, autoscalingv2.PodsMetricSourceType, autoscalingv2.ResourceMetricSourceType,
	}
	hpaSelectPolicies = []autoscalingv2.ScalingPolicySelect{
		autoscalingv2.DisabledPolicySelect, autoscalingv2.MaxChangePolicySelect, autoscalingv2.MinChangePolicySelect,
	}
	hpaPolicyTypes = []autoscalingv2.HPAScalingPolicyType{autoscalingv2.PercentScalingPolicy, autoscalingv2.PodsScalingPolicy}
)

// crossVersionRefOptions is upstream's CrossVersionObjectReferenceValidationOptions.
type crossVersionRefOptions struct {
	// allowEmptyAPIGroup accepts an apiVersion without a group ("v1").
	allowEmptyAPIGroup bool
	// allowInvalidAPIVersion skips the apiVersion check (kept objects that predate it).
	allowInvalidAPIVersion bool
}

// hpaOptions is upstream's HorizontalPodAutoscalerSpecValidationOptions.
type hpaOptions struct {
	minReplicasLowerBound int32
	scaleTargetRef        crossVersionRefOptions
	objectMetrics         crossVersionRefOptions
}

// hpaOptionsFor picks the options of a create (old nil) or an update, as upstream's strategy:
// minReplicas 0 stays allowed on an object that already has it, an unchanged scaleTargetRef
// kind/apiVersion is not checked again, ReplicationController (core, no group) is the one
// target without a group, and object metrics already invalid stay accepted.
func hpaOptionsFor(hpa, old *autoscalingv2.HorizontalPodAutoscaler) hpaOptions {
	opts := hpaOptions{minReplicasLowerBound: 1, objectMetrics: crossVersionRefOptions{allowEmptyAPIGroup: true}}
	if old != nil && old.Spec.MinReplicas != nil && *old.Spec.MinReplicas == 0 {
		opts.minReplicasLowerBound = 0
	}
	ref := hpa.Spec.ScaleTargetRef
	switch {
	case old != nil && old.Spec.ScaleTargetRef.APIVersion == ref.APIVersion && old.Spec.ScaleTargetRef.Kind == ref.Kind:
		opts.scaleTargetRef.allowInvalidAPIVersion = true
	case ref.Kind == "ReplicationController":
		opts.scaleTargetRef.allowEmptyAPIGroup = true
	}
	if old != nil {
		for _, m := range old.Spec.Metrics {
			if m.Type == autoscalingv2.ObjectMetricSourceType && m.Object != nil && validateAPIVersion(m.Object.DescribedObject.APIVersion, opts.objectMetrics) != nil {
				opts.objectMetrics.allowInvalidAPIVersion = true
				break
			}
		}
	}
	return opts
}

// ValidateHorizontalPodAutoscaler validates an HPA on create.
func ValidateHorizontalPodAutoscaler(hpa *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
	errs := validateMeta(&hpa.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateHPASpec(&hpa.Spec, specPath, hpaOptionsFor(hpa, nil))...)
}

// ValidateHorizontalPodAutoscalerUpdate validates an HPA update; the whole spec may change.
func ValidateHorizontalPodAutoscalerUpdate(hpa, old *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
	errs := validateMetaUpdate(&hpa.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateHPASpec(&hpa.Spec, specPath, hpaOptionsFor(hpa, old))...)
}

// ValidateHorizontalPodAutoscalerStatusUpdate validates a write to horizontalpodautoscalers/status.
func ValidateHorizontalPodAutoscalerStatusUpdate(hpa, old *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
	errs := validateMetaUpdate(&hpa.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, nonNegative(int64(hpa.Status.CurrentReplicas), statusPath.Child("currentReplicas"))...)
	return append(errs, nonNegative(int64(hpa.Status.DesiredReplicas), statusPath.Child("desiredReplicas"))...)
}

func validateHPASpec(s *autoscalingv2.HorizontalPodAutoscalerSpec, p *field.Path, opts hpaOptions) field.ErrorList {
	var errs field.ErrorList
	if s.MinReplicas != nil && *s.MinReplicas < opts.minReplicasLowerBound {
		errs = append(errs, field.Invalid(p.Child("minReplicas"), *s.MinReplicas,
			fmt.Sprintf("must be greater than or equal to %d", opts.minReplicasLowerBound)))
	}
	if s.MaxReplicas < 1 {
		errs = append(errs, field.Invalid(p.Child("maxReplicas"), s.MaxReplicas, "must be greater than 0"))
	}
	if s.MinReplicas != nil && s.MaxReplicas < *s.MinReplicas {
		errs = append(errs, field.Invalid(p.Child("maxReplicas"), s.MaxReplicas, "must be greater than or equal to `minReplicas`"))
	}
	errs = append(errs, validateCrossVersionRef(s.ScaleTargetRef, p.Child("scaleTargetRef"), opts.scaleTargetRef)...)
	errs = append(errs, validateHPAMetrics(s.Metrics, p.Child("metrics"), s.MinReplicas, opts.objectMetrics)...)
	if b := s.Behavior; b != nil {
		bp := p.Child("behavior")
		errs = append(errs, validateHPAScalingRules(b.ScaleUp, bp.Child("scaleUp"))...)
		errs = append(errs, validateHPAScalingRules(b.ScaleDown, bp.Child("scaleDown"))...)
	}
	return errs
}

// validateAPIVersion is upstream's ValidateAPIVersion.
func validateAPIVersion(apiVersion string, opts crossVersionRefOptions) error {
	if opts.allowInvalidAPIVersion {
		return nil
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return err
	}
	if !opts.allowEmptyAPIGroup && gv.Group == "" {
		return errors.New("apiVersion must specify API group")
	}
	return nil
}

func validateCrossVersionRef(ref autoscalingv2.CrossVersionObjectReference, p *field.Path, opts crossVersionRefOptions) field.ErrorList {
	var errs field.ErrorList
	if ref.Kind == "" {
		errs = append(errs, field.Required(p.Child("kind"), "the kind of the object to scale, e.g. Deployment"))
	} else {
		errs = append(errs, nameErrs(p.Child("kind"), ref.Kind, pathvalidation.IsValidPathSegmentName(ref.Kind))...)
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), "the name of the object to scale"))
	} else {
		errs = append(errs, nameErrs(p.Child("name"), ref.Name, pathvalidation.IsValidPathSegmentName(ref.Name))...)
	}
	if err := validateAPIVersion(ref.APIVersion, opts); err != nil {
		errs = append(errs, field.Invalid(p.Child("apiVersion"), ref.APIVersion, err.Error()))
	}
	return errs
}

func validateHPAMetrics(metrics []autoscalingv2.MetricSpec, p *field.Path, minReplicas *int32, opts crossVersionRefOptions) field.ErrorList {
	var errs field.ErrorList
	objectOrExternal := false
	for i := range metrics {
		errs = append(errs, validateHPAMetricSpec(&metrics[i], p.Index(i), opts)...)
		if t := metrics[i].Type; t == autoscalingv2.ObjectMetricSourceType || t == autoscalingv2.ExternalMetricSourceType {
			objectOrExternal = true
		}
	}
	if minReplicas != nil && *minReplicas == 0 && !objectOrExternal {
		errs = append(errs, field.Forbidden(p, "must specify at least one Object or External metric to support scaling to zero replicas"))
	}
	return errs
}

// validateHPAMetricSpec checks that exactly the source named by type is set, and validates it.
// Like upstream, only the first source present is validated.
func validateHPAMetricSpec(m *autoscalingv2.MetricSpec, p *field.Path, opts crossVersionRefOptions) field.ErrorList {
	var errs field.ErrorList
	if m.Type == "" {
		errs = append(errs, field.Required(p.Child("type"), "must specify a metric source type"))
	}
	if !slices.Contains(hpaMetricSourceTypes, m.Type) {
		errs = append(errs, field.NotSupported(p.Child("type"), m.Type, hpaMetricSourceTypes))
	}
	var present []string
	first := func(name string) bool {
		present = append(present, name)
		return len(present) == 1
	}
	if m.Object != nil && first("object") {
		errs = append(errs, validateHPAObjectSource(m.Object, p.Child("object"), opts)...)
	}
	if m.External != nil && first("external") {
		errs = append(errs, validateHPAExternalSource(m.External, p.Child("external"))...)
	}
	if m.Pods != nil && first("pods") {
		errs = append(errs, validateHPAPodsSource(m.Pods, p.Child("pods"))...)
	}
	if m.Resource != nil && first("resource") {
		errs = append(errs, validateHPAResourceSource(m.Resource.Name, m.Resource.Target, p.Child("resource"))...)
	}
	if m.ContainerResource != nil && first("containerResource") {
		errs = append(errs, validateHPAContainerResourceSource(m.ContainerResource, p.Child("containerResource"))...)
	}

	expected, set := "", false
	switch m.Type {
	case autoscalingv2.ObjectMetricSourceType:
		expected, set = "object", m.Object != nil
	case autoscalingv2.PodsMetricSourceType:
		expected, set = "pods", m.Pods != nil
	case autoscalingv2.ResourceMetricSourceType:
		expected, set = "resource", m.Resource != nil
	case autoscalingv2.ExternalMetricSourceType:
		expected, set = "external", m.External != nil
	case autoscalingv2.ContainerResourceMetricSourceType:
		expected, set = "containerResource", m.ContainerResource != nil
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), m.Type, hpaMetricSourceTypes))
	}
	if expected != "" && !set {
		errs = append(errs, field.Required(p.Child(expected), "must populate information for the given metric source"))
	}
	if len(present) != 1 {
		for _, name := range present {
			if name != expected {
				errs = append(errs, field.Forbidden(p.Child(name), "must populate the given metric source only"))
			}
		}
	}
	return errs
}

func validateHPAObjectSource(src *autoscalingv2.ObjectMetricSource, p *field.Path, opts crossVersionRefOptions) field.ErrorList {
	errs := validateCrossVersionRef(src.DescribedObject, p.Child("describedObject"), opts)
	errs = append(errs, validateHPAMetricIdentifier(src.Metric, p.Child("metric"))...)
	errs = append(errs, validateHPAMetricTarget(src.Target, p.Child("target"))...)
	if src.Target.Value == nil && src.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must set either a target value or averageValue"))
	}
	return errs
}

func validateHPAExternalSource(src *autoscalingv2.ExternalMetricSource, p *field.Path) field.ErrorList {
	errs := validateHPAMetricIdentifier(src.Metric, p.Child("metric"))
	errs = append(errs, validateHPAMetricTarget(src.Target, p.Child("target"))...)
	if src.Target.Value == nil && src.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must set either a target value for metric or a per-pod target"))
	}
	if src.Target.Value != nil && src.Target.AverageValue != nil {
		errs = append(errs, field.Forbidden(p.Child("target", "value"), "may not set both a target value for metric and a per-pod target"))
	}
	return errs
}

func validateHPAPodsSource(src *autoscalingv2.PodsMetricSource, p *field.Path) field.ErrorList {
	errs := validateHPAMetricIdentifier(src.Metric, p.Child("metric"))
	errs = append(errs, validateHPAMetricTarget(src.Target, p.Child("target"))...)
	if src.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must specify a positive target averageValue"))
	}
	return errs
}

func validateHPAResourceSource(name corev1.ResourceName, target autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if name == "" {
		errs = append(errs, field.Required(p.Child("name"), "must specify a resource name"))
	}
	return append(errs, validateHPAResourceTarget(target, p.Child("target"))...)
}

func validateHPAContainerResourceSource(src *autoscalingv2.ContainerResourceMetricSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if src.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), "must specify a resource name"))
	} else {
		errs = append(errs, validateContainerResourceName(src.Name, p.Child("name"))...)
	}
	if src.Container == "" {
		errs = append(errs, field.Required(p.Child("container"), "must specify a container"))
	} else {
		errs = append(errs, isDNSLabel(p.Child("container"), src.Container)...)
	}
	return append(errs, validateHPAResourceTarget(src.Target, p.Child("target"))...)
}

// validateHPAResourceTarget checks the target of a Resource or ContainerResource metric: a
// utilization or an average value, not both.
func validateHPAResourceTarget(target autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	errs := validateHPAMetricTarget(target, p)
	if target.AverageUtilization == nil && target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("averageUtilization"), "must set either a target raw value or a target utilization"))
	}
	if target.AverageUtilization != nil && target.AverageValue != nil {
		errs = append(errs, field.Forbidden(p.Child("averageValue"), "may not set both a target raw value and a target utilization"))
	}
	return errs
}

// validateContainerResourceName is upstream's ValidateContainerResourceName.
func validateContainerResourceName(name corev1.ResourceName, p *field.Path) field.ErrorList {
	s := string(name)
	if errs := coreQualifiedName(s, p); len(errs) > 0 {
		return errs
	}
	if !strings.Contains(s, "/") {
		if !coreIsContainerResource(s) {
			return field.ErrorList{field.Invalid(p, s, "must be a standard resource for containers")}
		}
	} else if !strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) &&
		(strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) || len(utilvalidation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+s)) != 0) {
		return field.ErrorList{field.Invalid(p, s, "doesn't follow extended resource name standard")}
	}
	return nil
}

func validateHPAMetricTarget(t autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Type == "" {
		errs = append(errs, field.Required(p.Child("type"), "must specify a metric target type"))
	}
	if t.Type != autoscalingv2.UtilizationMetricType && t.Type != autoscalingv2.ValueMetricType && t.Type != autoscalingv2.AverageValueMetricType {
		errs = append(errs, field.Invalid(p.Child("type"), t.Type, "must be either Utilization, Value, or AverageValue"))
	}
	if t.Value != nil && t.Value.Sign() != 1 {
		errs = append(errs, field.Invalid(p.Child("value"), t.Value.String(), "must be positive"))
	}
	if t.AverageValue != nil && t.AverageValue.Sign() != 1 {
		errs = append(errs, field.Invalid(p.Child("averageValue"), t.AverageValue.String(), "must be positive"))
	}
	if t.AverageUtilization != nil && *t.AverageUtilization < 1 {
		errs = append(errs, field.Invalid(p.Child("averageUtilization"), *t.AverageUtilization, "must be greater than 0"))
	}
	return errs
}

func validateHPAMetricIdentifier(id autoscalingv2.MetricIdentifier, p *field.Path) field.ErrorList {
	if id.Name == "" {
		return field.ErrorList{field.Required(p.Child("name"), "must specify a metric name")}
	}
	return nameErrs(p.Child("name"), id.Name, pathvalidation.IsValidPathSegmentName(id.Name))
}

func validateHPAScalingRules(r *autoscalingv2.HPAScalingRules, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if w := r.StabilizationWindowSeconds; w != nil {
		if *w < 0 {
			errs = append(errs, field.Invalid(p.Child("stabilizationWindowSeconds"), *w, "must be greater than or equal to zero"))
		}
		if *w > hpaMaxStabilizationWindowSeconds {
			errs = append(errs, field.Invalid(p.Child("stabilizationWindowSeconds"), *w,
				fmt.Sprintf("must be less than or equal to %v", hpaMaxStabilizationWindowSeconds)))
		}
	}
	if r.SelectPolicy != nil && !slices.Contains(hpaSelectPolicies, *r.SelectPolicy) {
		errs = append(errs, field.NotSupported(p.Child("selectPolicy"), *r.SelectPolicy, hpaSelectPolicies))
	}
	pp := p.Child("policies")
	if len(r.Policies) == 0 {
		errs = append(errs, field.Required(pp, "must specify at least one Policy"))
	}
	for i, pol := range r.Policies {
		ip := pp.Index(i)
		if !slices.Contains(hpaPolicyTypes, pol.Type) {
			errs = append(errs, field.NotSupported(ip.Child("type"), pol.Type, hpaPolicyTypes))
		}
		if pol.Value <= 0 {
			errs = append(errs, field.Invalid(ip.Child("value"), pol.Value, "must be greater than zero"))
		}
		if pol.PeriodSeconds <= 0 {
			errs = append(errs, field.Invalid(ip.Child("periodSeconds"), pol.PeriodSeconds, "must be greater than zero"))
		}
		if pol.PeriodSeconds > hpaMaxPeriodSeconds {
			errs = append(errs, field.Invalid(ip.Child("periodSeconds"), pol.PeriodSeconds,
				fmt.Sprintf("must be less than or equal to %v", hpaMaxPeriodSeconds)))
		}
	}
	if r.Tolerance != nil {
		errs = append(errs, coreNonnegQuantity(*r.Tolerance, p.Child("tolerance"))...)
	}
	return errs
}
