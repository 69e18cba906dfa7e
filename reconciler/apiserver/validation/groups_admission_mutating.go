package validation

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MutatingAdmissionPolicy and its bindings follow upstream's rules for the v1 types, with the
// checks shared with ValidatingAdmissionPolicy (groups_admission.go). As there, the checks are
// syntactic: an expression that does not compile is reported when the policy is evaluated,
// under its failurePolicy. failurePolicy and reinvocationPolicy may be omitted: they default to
// Fail and Never.

var (
	patchTypes = []admissionregistrationv1.PatchType{admissionregistrationv1.PatchTypeApplyConfiguration,
		admissionregistrationv1.PatchTypeJSONPatch}
	reinvocationPolicies = []admissionregistrationv1.ReinvocationPolicyType{admissionregistrationv1.NeverReinvocationPolicy,
		admissionregistrationv1.IfNeededReinvocationPolicy}
)

// ValidateMutatingAdmissionPolicy validates a MutatingAdmissionPolicy on create.
func ValidateMutatingAdmissionPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) field.ErrorList {
	errs := validateMeta(&p.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateMAPSpec(&p.Spec, specPath)...)
}

// ValidateMutatingAdmissionPolicyUpdate validates a MutatingAdmissionPolicy update.
func ValidateMutatingAdmissionPolicyUpdate(p, old *admissionregistrationv1.MutatingAdmissionPolicy) field.ErrorList {
	errs := validateMetaUpdate(&p.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateMAPSpec(&p.Spec, specPath)...)
}

func validateMAPSpec(s *admissionregistrationv1.MutatingAdmissionPolicySpec, p *field.Path) field.ErrorList {
	errs := validatePolicyMatch(s.FailurePolicy, s.ParamKind, s.MatchConstraints, mutatingOperations, "mutates", p)
	errs = append(errs, validateMatchConditions(s.MatchConditions, p.Child("matchConditions"))...)
	errs = append(errs, validateVariables(s.Variables, p.Child("variables"))...)
	if len(s.Mutations) == 0 {
		errs = append(errs, field.Required(p.Child("mutations"), "mutations must contain at least one item"))
	}
	for i := range s.Mutations {
		errs = append(errs, validateMutation(&s.Mutations[i], p.Child("mutations").Index(i))...)
	}
	if r := s.ReinvocationPolicy; r != "" && r != admissionregistrationv1.NeverReinvocationPolicy && r != admissionregistrationv1.IfNeededReinvocationPolicy {
		errs = append(errs, field.NotSupported(p.Child("reinvocationPolicy"), r, reinvocationPolicies))
	}
	return errs
}

// validateMutation checks that a mutation sets the expression field of its patchType, and
// only that one.
func validateMutation(m *admissionregistrationv1.Mutation, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	ap, jp := p.Child("applyConfiguration"), p.Child("jsonPatch")
	switch m.PatchType {
	case admissionregistrationv1.PatchTypeApplyConfiguration:
		if m.ApplyConfiguration == nil {
			errs = append(errs, field.Required(ap, "must be specified when patchType is ApplyConfiguration"))
		} else {
			errs = append(errs, validateExpression(m.ApplyConfiguration.Expression, ap.Child("expression"))...)
		}
		if m.JSONPatch != nil {
			errs = append(errs, field.Forbidden(jp, "must not be specified when patchType is ApplyConfiguration; remove it or set patchType JSONPatch"))
		}
	case admissionregistrationv1.PatchTypeJSONPatch:
		if m.JSONPatch == nil {
			errs = append(errs, field.Required(jp, "must be specified when patchType is JSONPatch"))
		} else {
			errs = append(errs, validateExpression(m.JSONPatch.Expression, jp.Child("expression"))...)
		}
		if m.ApplyConfiguration != nil {
			errs = append(errs, field.Forbidden(ap, "must not be specified when patchType is JSONPatch; remove it or set patchType ApplyConfiguration"))
		}
	case "":
		errs = append(errs, field.Required(p.Child("patchType"), `set "ApplyConfiguration" or "JSONPatch"`))
	default:
		errs = append(errs, field.NotSupported(p.Child("patchType"), m.PatchType, patchTypes))
	}
	return errs
}

// ValidateMutatingAdmissionPolicyBinding validates a MutatingAdmissionPolicyBinding on create.
func ValidateMutatingAdmissionPolicyBinding(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) field.ErrorList {
	errs := validateMeta(&b.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateMAPBindingSpec(&b.Spec, specPath)...)
}

// ValidateMutatingAdmissionPolicyBindingUpdate validates a MutatingAdmissionPolicyBinding update.
func ValidateMutatingAdmissionPolicyBindingUpdate(b, old *admissionregistrationv1.MutatingAdmissionPolicyBinding) field.ErrorList {
	errs := validateMetaUpdate(&b.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateMAPBindingSpec(&b.Spec, specPath)...)
}

func validateMAPBindingSpec(s *admissionregistrationv1.MutatingAdmissionPolicyBindingSpec, p *field.Path) field.ErrorList {
	return validatePolicyBinding("MutatingAdmissionPolicy", s.PolicyName, s.ParamRef, s.MatchResources, mutatingOperations, p)
}
