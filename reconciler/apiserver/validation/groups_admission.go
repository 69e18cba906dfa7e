package validation

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// These checks are syntactic only: compiling the CEL expressions (and their cost budget) belongs
// to the policies package.
const (
	// maxExpressionLength bounds one CEL expression so that a policy stays far below the
	// object size limit; compilation applies the real cost budget.
	maxExpressionLength = 10 * 1024
	maxMatchConditions  = 64
)

var (
	celIdentifier = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)
	operations    = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll, admissionregistrationv1.Create,
		admissionregistrationv1.Update, admissionregistrationv1.Delete, admissionregistrationv1.Connect}
	// mutatingOperations are those a MutatingAdmissionPolicy may match: a DELETE has no object
	// to mutate.
	mutatingOperations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll, admissionregistrationv1.Create,
		admissionregistrationv1.Update, admissionregistrationv1.Connect}
	validationReasons = []metav1.StatusReason{metav1.StatusReasonUnauthorized, metav1.StatusReasonForbidden,
		metav1.StatusReasonInvalid, metav1.StatusReasonRequestEntityTooLarge}
)

// ValidateValidatingAdmissionPolicy validates a ValidatingAdmissionPolicy on create.
func ValidateValidatingAdmissionPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
	errs := validateMeta(&p.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateVAPSpec(p.Name, &p.Spec, specPath)...)
}

// ValidateValidatingAdmissionPolicyUpdate validates a ValidatingAdmissionPolicy update.
func ValidateValidatingAdmissionPolicyUpdate(p, old *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
	errs := validateMetaUpdate(&p.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateVAPSpec(p.Name, &p.Spec, specPath)...)
}

// validatePolicyMatch checks what Validating and MutatingAdmissionPolicies share:
// failurePolicy, paramKind and matchConstraints (required, with resource rules whose
// operations are among ops; verb says what the policy does to what they name).
func validatePolicyMatch(failure *admissionregistrationv1.FailurePolicyType, paramKind *admissionregistrationv1.ParamKind, match *admissionregistrationv1.MatchResources, ops []admissionregistrationv1.OperationType, verb string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if failure != nil {
		errs = append(errs, validateFailurePolicy(*failure, p.Child("failurePolicy"))...)
	}
	if paramKind != nil {
		errs = append(errs, validateParamKind(paramKind, p.Child("paramKind"))...)
	}
	mp := p.Child("matchConstraints")
	if match == nil {
		return append(errs, field.Required(mp, "set resourceRules naming the resources the policy "+verb))
	}
	errs = append(errs, validateMatchResources(match, ops, mp)...)
	if len(match.ResourceRules) == 0 {
		errs = append(errs, field.Required(mp.Child("resourceRules"), "at least one rule naming the resources the policy "+verb))
	}
	return errs
}

func validateVAPSpec(name string, s *admissionregistrationv1.ValidatingAdmissionPolicySpec, p *field.Path) field.ErrorList {
	errs := validatePolicyMatch(s.FailurePolicy, s.ParamKind, s.MatchConstraints, operations, "applies to", p)
	if len(s.Validations) == 0 && len(s.AuditAnnotations) == 0 {
		errs = append(errs, field.Required(p.Child("validations"), "validations or auditAnnotations must contain at least one item"))
	}
	for i, v := range s.Validations {
		vp := p.Child("validations").Index(i)
		errs = append(errs, validateExpression(v.Expression, vp.Child("expression"))...)
		if v.Message != "" {
			switch {
			case strings.TrimSpace(v.Message) == "":
				errs = append(errs, field.Invalid(vp.Child("message"), v.Message, "message must be non-empty if specified"))
			case strings.ContainsAny(v.Message, "\r\n"):
				errs = append(errs, field.Invalid(vp.Child("message"), v.Message, "message must not contain line breaks"))
			}
		}
		if v.MessageExpression != "" {
			errs = append(errs, validateExpression(v.MessageExpression, vp.Child("messageExpression"))...)
		}
		if v.Reason != nil {
			ok := false
			for _, r := range validationReasons {
				ok = ok || *v.Reason == r
			}
			if !ok {
				errs = append(errs, field.NotSupported(vp.Child("reason"), *v.Reason, validationReasons))
			}
		}
	}
	keys := map[string]bool{}
	for i, a := range s.AuditAnnotations {
		ap := p.Child("auditAnnotations").Index(i)
		kp := ap.Child("key")
		switch {
		case a.Key == "":
			errs = append(errs, field.Required(kp, "a key for the audit annotation"))
		case keys[a.Key]:
			errs = append(errs, field.Duplicate(kp, a.Key))
		default:
			// The audit annotation is published as "<policy name>/<key>".
			errs = append(errs, nameErrs(kp, a.Key, utilvalidation.IsQualifiedName(name+"/"+a.Key))...)
		}
		keys[a.Key] = true
		errs = append(errs, validateExpression(a.ValueExpression, ap.Child("valueExpression"))...)
	}
	errs = append(errs, validateMatchConditions(s.MatchConditions, p.Child("matchConditions"))...)
	return append(errs, validateVariables(s.Variables, p.Child("variables"))...)
}

// validateVariables checks a policy's variables: unique CEL identifiers, each with an
// expression.
func validateVariables(vs []admissionregistrationv1.Variable, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	vars := map[string]bool{}
	for i, v := range vs {
		vp := p.Index(i)
		np := vp.Child("name")
		switch {
		case v.Name == "":
			errs = append(errs, field.Required(np, ""))
		case !celIdentifier.MatchString(v.Name):
			errs = append(errs, field.Invalid(np, v.Name, "name is not a valid CEL identifier (letters, digits and '_', not starting with a digit)"))
		case vars[v.Name]:
			errs = append(errs, field.Duplicate(np, v.Name))
		}
		vars[v.Name] = true
		errs = append(errs, validateExpression(v.Expression, vp.Child("expression"))...)
	}
	return errs
}

func validateExpression(e string, p *field.Path) field.ErrorList {
	switch {
	case strings.TrimSpace(e) == "":
		return field.ErrorList{field.Required(p, "a CEL expression is required")}
	case len(e) > maxExpressionLength:
		return field.ErrorList{field.TooLong(p, "", maxExpressionLength)}
	}
	return nil
}

func validateFailurePolicy(f admissionregistrationv1.FailurePolicyType, p *field.Path) field.ErrorList {
	if f != admissionregistrationv1.Fail && f != admissionregistrationv1.Ignore {
		return field.ErrorList{field.NotSupported(p, f, []admissionregistrationv1.FailurePolicyType{admissionregistrationv1.Fail, admissionregistrationv1.Ignore})}
	}
	return nil
}

func validateParamKind(k *admissionregistrationv1.ParamKind, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	vp := p.Child("apiVersion")
	if k.APIVersion == "" {
		errs = append(errs, field.Required(vp, `e.g. "v1" or "example.com/v1"`))
	} else if gv, err := schema.ParseGroupVersion(k.APIVersion); err != nil {
		errs = append(errs, field.Invalid(vp, k.APIVersion, err.Error()))
	} else {
		if gv.Group != "" {
			errs = append(errs, nameErrs(vp, k.APIVersion, utilvalidation.IsDNS1123Subdomain(gv.Group))...)
		}
		errs = append(errs, nameErrs(vp, k.APIVersion, utilvalidation.IsDNS1035Label(gv.Version))...)
	}
	kp := p.Child("kind")
	if k.Kind == "" {
		errs = append(errs, field.Required(kp, `e.g. "ConfigMap"`))
	} else if msgs := utilvalidation.IsDNS1035Label(strings.ToLower(k.Kind)); len(msgs) > 0 {
		errs = append(errs, field.Invalid(kp, k.Kind, "may have mixed case, but should otherwise match: "+strings.Join(msgs, ",")))
	}
	return errs
}

func validateMatchConditions(cs []admissionregistrationv1.MatchCondition, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(cs) > maxMatchConditions {
		errs = append(errs, field.TooMany(p, len(cs), maxMatchConditions))
	}
	seen := map[string]bool{}
	for i, c := range cs {
		cp := p.Index(i)
		np := cp.Child("name")
		switch {
		case c.Name == "":
			errs = append(errs, field.Required(np, ""))
		case seen[c.Name]:
			errs = append(errs, field.Duplicate(np, c.Name))
		default:
			errs = append(errs, nameErrs(np, c.Name, utilvalidation.IsQualifiedName(c.Name))...)
		}
		seen[c.Name] = true
		errs = append(errs, validateExpression(c.Expression, cp.Child("expression"))...)
	}
	return errs
}

// validateMatchResources checks match constraints whose resourceRules may name ops (their
// excludeResourceRules may name any operation).
func validateMatchResources(m *admissionregistrationv1.MatchResources, ops []admissionregistrationv1.OperationType, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.MatchPolicy != nil && *m.MatchPolicy != admissionregistrationv1.Exact && *m.MatchPolicy != admissionregistrationv1.Equivalent {
		errs = append(errs, field.NotSupported(p.Child("matchPolicy"), *m.MatchPolicy,
			[]admissionregistrationv1.MatchPolicyType{admissionregistrationv1.Exact, admissionregistrationv1.Equivalent}))
	}
	if m.NamespaceSelector != nil {
		errs = append(errs, validateSelector(m.NamespaceSelector, p.Child("namespaceSelector"))...)
	}
	if m.ObjectSelector != nil {
		errs = append(errs, validateSelector(m.ObjectSelector, p.Child("objectSelector"))...)
	}
	for i := range m.ResourceRules {
		errs = append(errs, validateNamedRule(&m.ResourceRules[i], ops, p.Child("resourceRules").Index(i))...)
	}
	for i := range m.ExcludeResourceRules {
		errs = append(errs, validateNamedRule(&m.ExcludeResourceRules[i], operations, p.Child("excludeResourceRules").Index(i))...)
	}
	return errs
}

func validateNamedRule(r *admissionregistrationv1.NamedRuleWithOperations, ops []admissionregistrationv1.OperationType, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	op := p.Child("operations")
	if len(r.Operations) == 0 {
		var quoted []string
		for _, o := range ops {
			if o != admissionregistrationv1.OperationAll {
				quoted = append(quoted, strconv.Quote(string(o)))
			}
		}
		errs = append(errs, field.Required(op, "at least one of "+strings.Join(quoted, ", ")+` or "*"`))
	}
	for i, o := range r.Operations {
		ok := false
		for _, s := range ops {
			ok = ok || o == s
		}
		if !ok {
			errs = append(errs, field.NotSupported(op.Index(i), o, ops))
		}
		if o == admissionregistrationv1.OperationAll && len(r.Operations) > 1 {
			errs = append(errs, field.Invalid(op, r.Operations, "if '*' is present, must not specify other operations"))
		}
	}
	errs = append(errs, validateRuleList(r.APIGroups, p.Child("apiGroups"), "apiGroups", `"" for the core group`)...)
	errs = append(errs, validateRuleList(r.APIVersions, p.Child("apiVersions"), "apiVersions", `e.g. "v1"`)...)
	errs = append(errs, validateRuleList(r.Resources, p.Child("resources"), "resources", `e.g. "deployments" or "pods/status"`)...)
	for i, res := range r.Resources {
		parts := strings.Split(res, "/")
		if res == "" || len(parts) > 2 || (len(parts) == 2 && (parts[0] == "" || parts[1] == "")) {
			errs = append(errs, field.Invalid(p.Child("resources").Index(i), res, `must be "resource", "resource/subresource", "*" or "*/*"`))
		}
	}
	if r.Scope != nil {
		switch *r.Scope {
		case admissionregistrationv1.ClusterScope, admissionregistrationv1.NamespacedScope, admissionregistrationv1.AllScopes:
		default:
			errs = append(errs, field.NotSupported(p.Child("scope"), *r.Scope, []admissionregistrationv1.ScopeType{
				admissionregistrationv1.ClusterScope, admissionregistrationv1.NamespacedScope, admissionregistrationv1.AllScopes}))
		}
	}
	for i, n := range r.ResourceNames {
		if n == "" {
			errs = append(errs, field.Required(p.Child("resourceNames").Index(i), ""))
		}
	}
	return errs
}

func validateRuleList(vs []string, p *field.Path, name, hint string) field.ErrorList {
	if len(vs) == 0 {
		return field.ErrorList{field.Required(p, fmt.Sprintf("list the %s the rule matches (%s), or \"*\"", name, hint))}
	}
	for _, v := range vs {
		if v == "*" && len(vs) > 1 {
			return field.ErrorList{field.Invalid(p, vs, "if '*' is present, must not specify other "+name)}
		}
	}
	return nil
}

// ValidateValidatingAdmissionPolicyBinding validates a ValidatingAdmissionPolicyBinding on create.
func ValidateValidatingAdmissionPolicyBinding(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) field.ErrorList {
	errs := validateMeta(&b.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateVAPBindingSpec(&b.Spec, specPath)...)
}

// ValidateValidatingAdmissionPolicyBindingUpdate validates a ValidatingAdmissionPolicyBinding update.
func ValidateValidatingAdmissionPolicyBindingUpdate(b, old *admissionregistrationv1.ValidatingAdmissionPolicyBinding) field.ErrorList {
	errs := validateMetaUpdate(&b.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateVAPBindingSpec(&b.Spec, specPath)...)
}

// validatePolicyBinding checks what the bindings of Validating and MutatingAdmissionPolicies
// share: policyName (of a policy of kind policyKind), paramRef and matchResources (whose
// operations are among ops).
func validatePolicyBinding(policyKind, policyName string, paramRef *admissionregistrationv1.ParamRef, match *admissionregistrationv1.MatchResources, ops []admissionregistrationv1.OperationType, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	pp := p.Child("policyName")
	if policyName == "" {
		errs = append(errs, field.Required(pp, "name the "+policyKind+" to bind"))
	} else {
		errs = append(errs, isDNSSubdomain(pp, policyName)...)
	}
	if paramRef != nil {
		errs = append(errs, validateParamRef(paramRef, p.Child("paramRef"))...)
	}
	if match != nil {
		errs = append(errs, validateMatchResources(match, ops, p.Child("matchResources"))...)
	}
	return errs
}

func validateVAPBindingSpec(s *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec, p *field.Path) field.ErrorList {
	errs := validatePolicyBinding("ValidatingAdmissionPolicy", s.PolicyName, s.ParamRef, s.MatchResources, operations, p)
	ap := p.Child("validationActions")
	if len(s.ValidationActions) == 0 {
		errs = append(errs, field.Required(ap, `at least one of "Deny", "Warn" or "Audit"`))
	}
	seen := map[admissionregistrationv1.ValidationAction]bool{}
	for i, a := range s.ValidationActions {
		switch {
		case a != admissionregistrationv1.Deny && a != admissionregistrationv1.Warn && a != admissionregistrationv1.Audit:
			errs = append(errs, field.NotSupported(ap.Index(i), a, []admissionregistrationv1.ValidationAction{
				admissionregistrationv1.Deny, admissionregistrationv1.Warn, admissionregistrationv1.Audit}))
		case seen[a]:
			errs = append(errs, field.Duplicate(ap.Index(i), a))
		}
		seen[a] = true
	}
	if seen[admissionregistrationv1.Deny] && seen[admissionregistrationv1.Warn] {
		errs = append(errs, field.Invalid(ap, s.ValidationActions,
			"must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	return errs
}

func validateParamRef(r *admissionregistrationv1.ParamRef, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case r.Name != "" && r.Selector != nil:
		errs = append(errs, field.Forbidden(p.Child("name"), "name and selector are mutually exclusive; keep one"))
	case r.Name == "" && r.Selector == nil:
		errs = append(errs, field.Required(p, "one of name or selector must be specified"))
	case r.Name != "":
		errs = append(errs, isDNSSubdomain(p.Child("name"), r.Name)...)
	default:
		errs = append(errs, validateSelector(r.Selector, p.Child("selector"))...)
	}
	if r.Namespace != "" {
		errs = append(errs, isDNSLabel(p.Child("namespace"), r.Namespace)...)
	}
	np := p.Child("parameterNotFoundAction")
	if r.ParameterNotFoundAction == nil {
		errs = append(errs, field.Required(np, `set "Allow" or "Deny"`))
	} else if a := *r.ParameterNotFoundAction; a != admissionregistrationv1.AllowAction && a != admissionregistrationv1.DenyAction {
		errs = append(errs, field.NotSupported(np, a, []admissionregistrationv1.ParameterNotFoundActionType{admissionregistrationv1.AllowAction, admissionregistrationv1.DenyAction}))
	}
	return errs
}
