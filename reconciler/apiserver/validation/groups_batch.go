package validation

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	// Hosts at the edge often have no zoneinfo; spec.timeZone must still resolve.
	_ "time/tzdata"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	// maxIndexedCompletions bounds completions and parallelism of Indexed Jobs, whose completed
	// indexes are tracked in status.
	maxIndexedCompletions    = 100000
	maxPodFailurePolicyRules = 20
	maxSuccessPolicyRules    = 20
	maxManagedByLength       = 63
	// maxCronJobNameLength leaves room for the 11 characters the controller appends to name a
	// Job ("-" and the scheduled time in minutes).
	maxCronJobNameLength = 52
)

// jobSpecOptions distinguishes a Job from the jobTemplate of a CronJob, whose selector is
// generated when each Job is created.
type jobSpecOptions struct {
	inCronJob bool
}

// ValidateJob validates a Job on create. The selector has been generated unless manualSelector.
func ValidateJob(j *batchv1.Job) field.ErrorList {
	errs := validateMeta(&j.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateJobSpec(&j.Spec, specPath, jobSpecOptions{})...)
}

// ValidateJobUpdate validates a Job update: selector, completion mode, failure and success
// policies are immutable, and so is the template except while a suspended Job has never run.
// suspend, parallelism, activeDeadlineSeconds, backoffLimit and ttlSecondsAfterFinished may
// change.
func ValidateJobUpdate(j, old *batchv1.Job) field.ErrorList {
	errs := validateMetaUpdate(&j.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateJobSpec(&j.Spec, specPath, jobSpecOptions{})...)
	return append(errs, validateJobSpecUpdate(&j.Spec, &old.Spec, old.Status.StartTime == nil, specPath)...)
}

// ValidateJobStatusUpdate validates a write to jobs/status.
func ValidateJobStatusUpdate(j, old *batchv1.Job) field.ErrorList {
	errs := validateMetaUpdate(&j.ObjectMeta, &old.ObjectMeta)
	s := &j.Status
	errs = append(errs, nonNegative(int64(s.Active), statusPath.Child("active"))...)
	errs = append(errs, nonNegative(int64(s.Succeeded), statusPath.Child("succeeded"))...)
	errs = append(errs, nonNegative(int64(s.Failed), statusPath.Child("failed"))...)
	errs = append(errs, nonNegative32(s.Ready, statusPath.Child("ready"))...)
	errs = append(errs, nonNegative32(s.Terminating, statusPath.Child("terminating"))...)
	if s.StartTime != nil && s.CompletionTime != nil && s.CompletionTime.Before(s.StartTime) {
		errs = append(errs, field.Invalid(statusPath.Child("completionTime"), s.CompletionTime, "must be equal to or after `startTime`"))
	}
	for i, c := range s.Conditions {
		switch c.Status {
		case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
		default:
			errs = append(errs, field.NotSupported(statusPath.Child("conditions").Index(i).Child("status"), c.Status,
				[]corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}))
		}
	}
	return errs
}

func validateJobSpec(s *batchv1.JobSpec, p *field.Path, opts jobSpecOptions) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, nonNegative32(s.Parallelism, p.Child("parallelism"))...)
	errs = append(errs, nonNegative32(s.Completions, p.Child("completions"))...)
	if s.ActiveDeadlineSeconds != nil && *s.ActiveDeadlineSeconds <= 0 {
		errs = append(errs, field.Invalid(p.Child("activeDeadlineSeconds"), *s.ActiveDeadlineSeconds, "must be greater than 0 (seconds the Job may run before it is failed)"))
	}
	errs = append(errs, nonNegative32(s.BackoffLimit, p.Child("backoffLimit"))...)
	errs = append(errs, nonNegative32(s.TTLSecondsAfterFinished, p.Child("ttlSecondsAfterFinished"))...)

	indexed := s.CompletionMode != nil && *s.CompletionMode == batchv1.IndexedCompletion
	if s.CompletionMode != nil {
		switch *s.CompletionMode {
		case batchv1.NonIndexedCompletion:
		case batchv1.IndexedCompletion:
			if s.Completions == nil {
				errs = append(errs, field.Required(p.Child("completions"), "when completion mode is Indexed; set the number of indexes"))
			} else if *s.Completions > maxIndexedCompletions {
				errs = append(errs, field.Invalid(p.Child("completions"), *s.Completions, fmt.Sprintf("must be less than or equal to %d when completion mode is Indexed", maxIndexedCompletions)))
			}
			if s.Parallelism != nil && *s.Parallelism > maxIndexedCompletions {
				errs = append(errs, field.Invalid(p.Child("parallelism"), *s.Parallelism, fmt.Sprintf("must be less than or equal to %d when completion mode is Indexed", maxIndexedCompletions)))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("completionMode"), *s.CompletionMode,
				[]batchv1.CompletionMode{batchv1.NonIndexedCompletion, batchv1.IndexedCompletion}))
		}
	}
	if s.BackoffLimitPerIndex != nil {
		errs = append(errs, nonNegative32(s.BackoffLimitPerIndex, p.Child("backoffLimitPerIndex"))...)
		if !indexed {
			errs = append(errs, field.Forbidden(p.Child("backoffLimitPerIndex"), "requires completionMode Indexed"))
		}
	}
	if s.MaxFailedIndexes != nil {
		errs = append(errs, nonNegative32(s.MaxFailedIndexes, p.Child("maxFailedIndexes"))...)
		if s.BackoffLimitPerIndex == nil {
			errs = append(errs, field.Required(p.Child("backoffLimitPerIndex"), "when maxFailedIndexes is specified"))
		}
		if s.Completions != nil && *s.MaxFailedIndexes > *s.Completions {
			errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *s.MaxFailedIndexes, "must be less than or equal to completions"))
		}
	}
	if s.SuccessPolicy != nil {
		errs = append(errs, validateSuccessPolicy(s.SuccessPolicy, s.Completions, indexed, p.Child("successPolicy"))...)
	}
	if s.PodReplacementPolicy != nil {
		switch *s.PodReplacementPolicy {
		case batchv1.TerminatingOrFailed:
			if s.PodFailurePolicy != nil {
				errs = append(errs, field.NotSupported(p.Child("podReplacementPolicy"), *s.PodReplacementPolicy,
					[]batchv1.PodReplacementPolicy{batchv1.Failed}))
			}
		case batchv1.Failed:
		default:
			errs = append(errs, field.NotSupported(p.Child("podReplacementPolicy"), *s.PodReplacementPolicy,
				[]batchv1.PodReplacementPolicy{batchv1.TerminatingOrFailed, batchv1.Failed}))
		}
	}
	if s.ManagedBy != nil {
		mp := p.Child("managedBy")
		if len(*s.ManagedBy) > maxManagedByLength {
			errs = append(errs, field.TooLong(mp, *s.ManagedBy, maxManagedByLength))
		}
		errs = append(errs, utilvalidation.IsDomainPrefixedPath(mp, *s.ManagedBy)...)
	}

	if opts.inCronJob {
		if s.Selector != nil {
			errs = append(errs, field.Invalid(p.Child("selector"), s.Selector, "`selector` will be auto-generated; remove it"))
		}
		if s.ManualSelector != nil && *s.ManualSelector {
			errs = append(errs, field.NotSupported(p.Child("manualSelector"), *s.ManualSelector, []string{"nil", "false"}))
		}
	} else if s.Selector == nil {
		errs = append(errs, field.Required(p.Child("selector"), "set a selector matching the template labels, or leave manualSelector unset so one is generated"))
	} else {
		errs = append(errs, validateSelector(s.Selector, p.Child("selector"))...)
		errs = append(errs, validateSelectorMatchesTemplate(s.Selector, &s.Template, p.Child("template"))...)
	}

	tp := p.Child("template")
	errs = append(errs, ValidatePodTemplateSpec(&s.Template, tp)...)
	rp := tp.Child("spec", "restartPolicy")
	switch rp_ := s.Template.Spec.RestartPolicy; rp_ {
	case corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	case "":
		errs = append(errs, field.Required(rp, `valid values: "OnFailure", "Never"`))
	default:
		errs = append(errs, field.NotSupported(rp, rp_, []corev1.RestartPolicy{corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}))
	}
	if s.PodFailurePolicy != nil {
		errs = append(errs, validatePodFailurePolicy(s, p.Child("podFailurePolicy"), rp)...)
	}
	return errs
}

var conditionTypes = []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}

func validatePodFailurePolicy(s *batchv1.JobSpec, p, restartPolicyPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		errs = append(errs, field.Invalid(restartPolicyPath, s.Template.Spec.RestartPolicy,
			"only \"Never\" is supported when podFailurePolicy is specified"))
	}
	rules := s.PodFailurePolicy.Rules
	if len(rules) > maxPodFailurePolicyRules {
		errs = append(errs, field.TooMany(p.Child("rules"), len(rules), maxPodFailurePolicyRules))
	}
	actions := []batchv1.PodFailurePolicyAction{batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyActionFailIndex,
		batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionIgnore}
	for i, r := range rules {
		ip := p.Child("rules").Index(i)
		switch r.Action {
		case batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionIgnore:
		case batchv1.PodFailurePolicyActionFailIndex:
			if s.BackoffLimitPerIndex == nil {
				errs = append(errs, field.Forbidden(ip.Child("action"), "the 'FailIndex' action can only be used when backoffLimitPerIndex is set"))
			}
		default:
			errs = append(errs, field.NotSupported(ip.Child("action"), r.Action, actions))
		}
		switch {
		case r.OnExitCodes != nil && len(r.OnPodConditions) > 0:
			errs = append(errs, field.Invalid(ip, "", "specifying both onExitCodes and onPodConditions is not supported"))
		case r.OnExitCodes == nil && len(r.OnPodConditions) == 0:
			errs = append(errs, field.Invalid(ip, "", "specifying one of onExitCodes and onPodConditions is required"))
		}
		if e := r.OnExitCodes; e != nil {
			ep := ip.Child("onExitCodes")
			if e.Operator != batchv1.PodFailurePolicyOnExitCodesOpIn && e.Operator != batchv1.PodFailurePolicyOnExitCodesOpNotIn {
				errs = append(errs, field.NotSupported(ep.Child("operator"), e.Operator,
					[]batchv1.PodFailurePolicyOnExitCodesOperator{batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyOnExitCodesOpNotIn}))
			}
			if len(e.Values) == 0 {
				errs = append(errs, field.Required(ep.Child("values"), "at least one exit code is required"))
			}
			for j, v := range e.Values {
				vp := ep.Child("values").Index(j)
				if e.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && v == 0 {
					errs = append(errs, field.Invalid(vp, v, "must not be 0 for the In operator"))
				}
				if j > 0 && e.Values[j-1] == v {
					errs = append(errs, field.Duplicate(vp, v))
				} else if j > 0 && e.Values[j-1] > v {
					errs = append(errs, field.Invalid(vp, v, "must be ordered"))
				}
			}
		}
		for j, c := range r.OnPodConditions {
			cp := ip.Child("onPodConditions").Index(j)
			errs = append(errs, nameErrs(cp.Child("type"), string(c.Type), utilvalidation.IsQualifiedName(string(c.Type)))...)
			switch c.Status {
			case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
			default:
				errs = append(errs, field.NotSupported(cp.Child("status"), c.Status, conditionTypes))
			}
		}
	}
	return errs
}

func validateSuccessPolicy(sp *batchv1.SuccessPolicy, completions *int32, indexed bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !indexed {
		errs = append(errs, field.Invalid(p, "", "requires completionMode Indexed"))
	}
	rp := p.Child("rules")
	switch {
	case len(sp.Rules) == 0:
		errs = append(errs, field.Required(rp, "at least one rule is required"))
	case len(sp.Rules) > maxSuccessPolicyRules:
		errs = append(errs, field.TooMany(rp, len(sp.Rules), maxSuccessPolicyRules))
	}
	for i, r := range sp.Rules {
		ip := rp.Index(i)
		if r.SucceededIndexes == nil && r.SucceededCount == nil {
			errs = append(errs, field.Required(ip, "at least one of succeededIndexes or succeededCount must be specified"))
		}
		if r.SucceededIndexes != nil && !indexRangesPattern.MatchString(*r.SucceededIndexes) {
			errs = append(errs, field.Invalid(ip.Child("succeededIndexes"), *r.SucceededIndexes, `must be a comma-separated list of indexes or ranges, e.g. "1,3-5,7"`))
		}
		if r.SucceededCount != nil {
			errs = append(errs, nonNegative32(r.SucceededCount, ip.Child("succeededCount"))...)
			if completions != nil && *r.SucceededCount > *completions {
				errs = append(errs, field.Invalid(ip.Child("succeededCount"), *r.SucceededCount, "must be less than or equal to completions"))
			}
		}
	}
	return errs
}

var indexRangesPattern = regexp.MustCompile(`^\d+(-\d+)?(,\d+(-\d+)?)*$`)

// validateJobSpecUpdate applies the immutability rules of Jobs. neverStarted is true while the
// old Job has no status.startTime.
func validateJobSpecUpdate(s, old *batchv1.JobSpec, neverStarted bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(s.Selector, old.Selector, p.Child("selector"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(s.CompletionMode, old.CompletionMode, p.Child("completionMode"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(s.PodFailurePolicy, old.PodFailurePolicy, p.Child("podFailurePolicy"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(s.BackoffLimitPerIndex, old.BackoffLimitPerIndex, p.Child("backoffLimitPerIndex"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(s.SuccessPolicy, old.SuccessPolicy, p.Child("successPolicy"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(s.ManagedBy, old.ManagedBy, p.Child("managedBy"))...)

	// Elastic Indexed Jobs may scale completions together with parallelism.
	if !apiequality.Semantic.DeepEqual(s.Completions, old.Completions) {
		elastic := s.CompletionMode != nil && *s.CompletionMode == batchv1.IndexedCompletion &&
			equalPtr(s.Completions, s.Parallelism) && equalPtr(old.Completions, old.Parallelism) && s.Completions != nil
		if !elastic {
			errs = append(errs, field.Invalid(p.Child("completions"), derefOr(s.Completions), "field is immutable (Indexed Jobs may change it only together with parallelism, keeping them equal)"))
		}
	}

	if !apiequality.Semantic.DeepEqual(s.Template, old.Template) {
		suspended := old.Suspend != nil && *old.Suspend && neverStarted
		if !suspended || !onlySchedulingDirectivesChanged(&s.Template, &old.Template) {
			errs = append(errs, field.Invalid(p.Child("template"), "", "field is immutable; only a suspended Job that never started may change its template's labels, annotations, nodeSelector, affinity, tolerations and schedulingGates"))
		}
	}
	return errs
}

// onlySchedulingDirectivesChanged reports whether two templates differ only in what may change
// while a Job is suspended and has never run (upstream's mutable scheduling directives).
func onlySchedulingDirectivesChanged(t, old *corev1.PodTemplateSpec) bool {
	c := t.DeepCopy()
	c.Labels, c.Annotations = old.Labels, old.Annotations
	c.Spec.NodeSelector = old.Spec.NodeSelector
	c.Spec.Affinity = old.Spec.Affinity
	c.Spec.Tolerations = old.Spec.Tolerations
	c.Spec.SchedulingGates = old.Spec.SchedulingGates
	return apiequality.Semantic.DeepEqual(c, old)
}

func equalPtr(a, b *int32) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

func derefOr(v *int32) any {
	if v == nil {
		return nil
	}
	return *v
}

// ValidateCronJob validates a CronJob on create.
func ValidateCronJob(cj *batchv1.CronJob) field.ErrorList {
	errs := validateMeta(&cj.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	if len(cj.Name) > maxCronJobNameLength {
		errs = append(errs, field.Invalid(metaPath.Child("name"), cj.Name,
			fmt.Sprintf("must be no more than %d characters (the controller appends 11 to name each Job)", maxCronJobNameLength)))
	}
	return append(errs, validateCronJobSpec(&cj.Spec, false, specPath)...)
}

// ValidateCronJobUpdate validates a CronJob update. The name limit is not re-checked, so that
// older objects can still be edited, and a TZ= prefix already in the schedule is tolerated.
func ValidateCronJobUpdate(cj, old *batchv1.CronJob) field.ErrorList {
	errs := validateMetaUpdate(&cj.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateCronJobSpec(&cj.Spec, strings.Contains(old.Spec.Schedule, "TZ"), specPath)...)
}

func validateCronJobSpec(s *batchv1.CronJobSpec, allowTZInSchedule bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	sp := p.Child("schedule")
	if s.Schedule == "" {
		errs = append(errs, field.Required(sp, `a cron expression such as "*/5 * * * *" or a macro such as "@hourly"`))
	} else {
		errs = append(errs, validateSchedule(s.Schedule, allowTZInSchedule, s.TimeZone, sp)...)
	}
	if s.TimeZone != nil {
		errs = append(errs, validateTimeZone(*s.TimeZone, p.Child("timeZone"))...)
	}
	switch s.ConcurrencyPolicy {
	case batchv1.AllowConcurrent, batchv1.ForbidConcurrent, batchv1.ReplaceConcurrent:
	case "":
		errs = append(errs, field.Required(p.Child("concurrencyPolicy"), `set "Allow", "Forbid" or "Replace"`))
	default:
		errs = append(errs, field.NotSupported(p.Child("concurrencyPolicy"), s.ConcurrencyPolicy,
			[]batchv1.ConcurrencyPolicy{batchv1.AllowConcurrent, batchv1.ForbidConcurrent, batchv1.ReplaceConcurrent}))
	}
	errs = append(errs, nonNegative64(s.StartingDeadlineSeconds, p.Child("startingDeadlineSeconds"))...)
	errs = append(errs, nonNegative32(s.SuccessfulJobsHistoryLimit, p.Child("successfulJobsHistoryLimit"))...)
	errs = append(errs, nonNegative32(s.FailedJobsHistoryLimit, p.Child("failedJobsHistoryLimit"))...)

	jp := p.Child("jobTemplate")
	errs = append(errs, validateTemplateMeta(&s.JobTemplate.ObjectMeta, jp.Child("metadata"))...)
	return append(errs, validateJobSpec(&s.JobTemplate.Spec, jp.Child("spec"), jobSpecOptions{inCronJob: true})...)
}

func validateSchedule(schedule string, allowTZ bool, timeZone *string, p *field.Path) field.ErrorList {
	if strings.Contains(schedule, "TZ") {
		switch {
		case !allowTZ:
			return field.ErrorList{field.Invalid(p, schedule, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead")}
		case timeZone != nil:
			return field.ErrorList{field.Invalid(p, schedule, "cannot use both timeZone field and TZ or CRON_TZ in schedule")}
		}
		// Kept from an older object: check the expression after the zone prefix.
		if strings.HasPrefix(schedule, "TZ=") || strings.HasPrefix(schedule, "CRON_TZ=") {
			if _, rest, ok := strings.Cut(schedule, " "); ok {
				schedule = rest
			}
		}
	}
	if _, err := ParseCronSchedule(schedule); err != nil {
		return field.ErrorList{field.Invalid(p, schedule, err.Error())}
	}
	return nil
}

var timeZonePattern = regexp.MustCompile(`^[A-Za-z\.\-_0-9+]{1,14}(/[A-Za-z\.\-_0-9+]{1,14})*$`)

func validateTimeZone(tz string, p *field.Path) field.ErrorList {
	switch {
	case tz == "":
		return field.ErrorList{field.Invalid(p, tz, `must be an IANA time zone name such as "Europe/Berlin", or unset for the controller's zone`)}
	case strings.EqualFold(tz, "Local"):
		return field.ErrorList{field.Invalid(p, tz, "must be an explicit time zone as defined in https://www.iana.org/time-zones")}
	case !timeZonePattern.MatchString(tz):
		return field.ErrorList{field.Invalid(p, tz, "unknown time zone "+tz)}
	}
	if _, err := time.LoadLocation(tz); err != nil {
		return field.ErrorList{field.Invalid(p, tz, err.Error())}
	}
	return nil
}
