package validation

import (
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateLease validates a coordination.k8s.io Lease (node heartbeats, leader election).
func ValidateLease(l *coordinationv1.Lease) field.ErrorList {
	errs := validateMeta(&l.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateLeaseSpec(&l.Spec, specPath)...)
}

// ValidateLeaseUpdate validates a Lease update; every spec field may change.
func ValidateLeaseUpdate(l, old *coordinationv1.Lease) field.ErrorList {
	errs := validateMetaUpdate(&l.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateLeaseSpec(&l.Spec, specPath)...)
}

func validateLeaseSpec(s *coordinationv1.LeaseSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.LeaseDurationSeconds != nil && *s.LeaseDurationSeconds <= 0 {
		errs = append(errs, field.Invalid(p.Child("leaseDurationSeconds"), *s.LeaseDurationSeconds, "must be greater than 0"))
	}
	if s.LeaseTransitions != nil && *s.LeaseTransitions < 0 {
		errs = append(errs, field.Invalid(p.Child("leaseTransitions"), *s.LeaseTransitions, "must be greater than or equal to 0"))
	}
	if s.Strategy != nil {
		sp := p.Child("strategy")
		st := string(*s.Strategy)
		switch {
		case st == "":
			errs = append(errs, field.Required(sp, "set a strategy or leave it unset"))
		case !strings.Contains(st, "/"):
			if *s.Strategy != coordinationv1.OldestEmulationVersion {
				errs = append(errs, field.NotSupported(sp, *s.Strategy, []coordinationv1.CoordinatedLeaseStrategy{coordinationv1.OldestEmulationVersion}))
			}
		default:
			errs = append(errs, nameErrs(sp, st, utilvalidation.IsQualifiedName(st))...)
		}
	}
	if s.PreferredHolder != nil && *s.PreferredHolder != "" && (s.Strategy == nil || *s.Strategy == "") {
		errs = append(errs, field.Forbidden(p.Child("preferredHolder"), "may only be specified if `strategy` is defined"))
	}
	return errs
}

// ValidatePodDisruptionBudget validates a PodDisruptionBudget on create.
func ValidatePodDisruptionBudget(pdb *policyv1.PodDisruptionBudget) field.ErrorList {
	errs := validateMeta(&pdb.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validatePDBSpec(&pdb.Spec, specPath)...)
}

// ValidatePodDisruptionBudgetUpdate validates a PodDisruptionBudget update; the spec is mutable.
func ValidatePodDisruptionBudgetUpdate(pdb, old *policyv1.PodDisruptionBudget) field.ErrorList {
	errs := validateMetaUpdate(&pdb.ObjectMeta, &old.ObjectMeta)
	return append(errs, validatePDBSpec(&pdb.Spec, specPath)...)
}

// ValidatePodDisruptionBudgetStatusUpdate validates a write to poddisruptionbudgets/status.
func ValidatePodDisruptionBudgetStatusUpdate(pdb, old *policyv1.PodDisruptionBudget) field.ErrorList {
	errs := validateMetaUpdate(&pdb.ObjectMeta, &old.ObjectMeta)
	s := &pdb.Status
	errs = append(errs, nonNegative(s.ObservedGeneration, statusPath.Child("observedGeneration"))...)
	errs = append(errs, nonNegative(int64(s.DisruptionsAllowed), statusPath.Child("disruptionsAllowed"))...)
	errs = append(errs, nonNegative(int64(s.CurrentHealthy), statusPath.Child("currentHealthy"))...)
	errs = append(errs, nonNegative(int64(s.DesiredHealthy), statusPath.Child("desiredHealthy"))...)
	errs = append(errs, nonNegative(int64(s.ExpectedPods), statusPath.Child("expectedPods"))...)
	return append(errs, metav1validation.ValidateConditions(s.Conditions, statusPath.Child("conditions"))...)
}

func validatePDBSpec(s *policyv1.PodDisruptionBudgetSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case s.MinAvailable != nil && s.MaxUnavailable != nil:
		errs = append(errs, field.Invalid(p, "", "minAvailable and maxUnavailable cannot be both set; keep one"))
	case s.MinAvailable == nil && s.MaxUnavailable == nil:
		errs = append(errs, field.Required(p.Child("minAvailable"), "set one of minAvailable or maxUnavailable"))
	}
	for _, v := range []struct {
		name string
		val  *intstr.IntOrString
	}{{"minAvailable", s.MinAvailable}, {"maxUnavailable", s.MaxUnavailable}} {
		if v.val != nil {
			errs = append(errs, validateIntOrPercent(*v.val, p.Child(v.name))...)
			errs = append(errs, notMoreThan100Percent(*v.val, p.Child(v.name))...)
		}
	}
	if s.Selector != nil {
		errs = append(errs, validateSelector(s.Selector, p.Child("selector"))...)
	}
	if pol := s.UnhealthyPodEvictionPolicy; pol != nil {
		switch *pol {
		case policyv1.IfHealthyBudget, policyv1.AlwaysAllow:
		default:
			errs = append(errs, field.NotSupported(p.Child("unhealthyPodEvictionPolicy"), *pol,
				[]policyv1.UnhealthyPodEvictionPolicyType{policyv1.IfHealthyBudget, policyv1.AlwaysAllow}))
		}
	}
	return errs
}

const (
	maxEventFieldLength = 128
	maxEventNoteLength  = 1024
)

// ValidateEventsV1Event validates an events.k8s.io/v1 Event on create: the reporting fields that
// the v1 API requires and the deprecated core fields unset.
func ValidateEventsV1Event(e *eventsv1.Event) field.ErrorList {
	errs := validateMeta(&e.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateEventBody(e)...)
}

func validateEventBody(e *eventsv1.Event) field.ErrorList {
	errs := validateEventSeries(e.Series)
	if e.EventTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("eventTime"), "the time the event was first observed"))
	}
	if e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		errs = append(errs, field.NotSupported(field.NewPath("type"), e.Type, []string{corev1.EventTypeNormal, corev1.EventTypeWarning}))
	}
	rp := field.NewPath("regarding", "namespace")
	if e.Regarding.Namespace == "" {
		if e.Namespace != metav1.NamespaceDefault && e.Namespace != metav1.NamespaceSystem {
			errs = append(errs, field.Invalid(rp, e.Regarding.Namespace,
				"does not match event.namespace: events about cluster-scoped objects belong in \"default\" or \"kube-system\""))
		}
	} else if e.Regarding.Namespace != e.Namespace {
		errs = append(errs, field.Invalid(rp, e.Regarding.Namespace, fmt.Sprintf("does not match event.namespace (%q)", e.Namespace)))
	}

	cp := field.NewPath("reportingController")
	if e.ReportingController == "" {
		errs = append(errs, field.Required(cp, `the controller that emitted the event, e.g. "flotilla.dev/scheduler"`))
	} else {
		errs = append(errs, nameErrs(cp, e.ReportingController, utilvalidation.IsQualifiedName(e.ReportingController))...)
	}
	errs = append(errs, requiredMax(e.ReportingInstance, field.NewPath("reportingInstance"), maxEventFieldLength)...)
	errs = append(errs, requiredMax(e.Action, field.NewPath("action"), maxEventFieldLength)...)
	errs = append(errs, requiredMax(e.Reason, field.NewPath("reason"), maxEventFieldLength)...)
	if len(e.Note) > maxEventNoteLength {
		errs = append(errs, field.TooLong(field.NewPath("note"), "", maxEventNoteLength))
	}

	if !e.DeprecatedFirstTimestamp.IsZero() {
		errs = append(errs, field.Forbidden(field.NewPath("deprecatedFirstTimestamp"), "needs to be unset; use eventTime"))
	}
	if !e.DeprecatedLastTimestamp.IsZero() {
		errs = append(errs, field.Forbidden(field.NewPath("deprecatedLastTimestamp"), "needs to be unset; use series.lastObservedTime"))
	}
	if e.DeprecatedCount != 0 {
		errs = append(errs, field.Forbidden(field.NewPath("deprecatedCount"), "needs to be unset; use series.count"))
	}
	if e.DeprecatedSource.Component != "" || e.DeprecatedSource.Host != "" {
		errs = append(errs, field.Forbidden(field.NewPath("deprecatedSource"), "needs to be unset; use reportingController and reportingInstance"))
	}
	return errs
}

func requiredMax(v string, p *field.Path, max int) field.ErrorList {
	switch {
	case v == "":
		return field.ErrorList{field.Required(p, "")}
	case len(v) > max:
		return field.ErrorList{field.TooLong(p, "", max)}
	}
	return nil
}

func validateEventSeries(s *eventsv1.EventSeries) field.ErrorList {
	if s == nil {
		return nil
	}
	var errs field.ErrorList
	if s.Count < 2 {
		errs = append(errs, field.Invalid(field.NewPath("series", "count"), s.Count, "should be at least 2 (a single occurrence has no series)"))
	}
	if s.LastObservedTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("series", "lastObservedTime"), ""))
	}
	return errs
}

// ValidateEventsV1EventUpdate validates an Event update: the create rules hold, and only the
// series (and metadata) may change once an event is recorded.
func ValidateEventsV1EventUpdate(e, old *eventsv1.Event) field.ErrorList {
	errs := validateMetaUpdate(&e.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateEventBody(e)...)
	immutable := func(n, o any, name string) {
		errs = append(errs, apimachineryvalidation.ValidateImmutableField(n, o, field.NewPath(name))...)
	}
	immutable(e.EventTime, old.EventTime, "eventTime")
	immutable(e.ReportingController, old.ReportingController, "reportingController")
	immutable(e.ReportingInstance, old.ReportingInstance, "reportingInstance")
	immutable(e.Action, old.Action, "action")
	immutable(e.Reason, old.Reason, "reason")
	immutable(e.Regarding, old.Regarding, "regarding")
	immutable(e.Related, old.Related, "related")
	immutable(e.Note, old.Note, "note")
	immutable(e.Type, old.Type, "type")
	immutable(e.DeprecatedSource, old.DeprecatedSource, "deprecatedSource")
	immutable(e.DeprecatedFirstTimestamp, old.DeprecatedFirstTimestamp, "deprecatedFirstTimestamp")
	immutable(e.DeprecatedLastTimestamp, old.DeprecatedLastTimestamp, "deprecatedLastTimestamp")
	immutable(e.DeprecatedCount, old.DeprecatedCount, "deprecatedCount")
	return errs
}
