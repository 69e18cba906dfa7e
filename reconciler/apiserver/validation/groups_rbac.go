package validation

import (
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RBAC validation follows upstream's pkg/apis/rbac/validation, rules and messages. The objects
// are stored and validated only: nothing enforces them yet, and no controller aggregates
// ClusterRoles.

// validateRBACName is upstream's ValidateRBACName: any name that is safe as a URL path segment
// ("." and "..", and names with "/" or "%", are not). Like upstream, a generateName prefix is
// held to the same rule.
func validateRBACName(name string, _ bool) []string {
	return content.IsPathSegmentName(name)
}

// ValidateRole validates a Role on create.
func ValidateRole(r *rbacv1.Role) field.ErrorList {
	errs := validateMeta(&r.ObjectMeta, true, validateRBACName)
	for i := range r.Rules {
		errs = append(errs, validatePolicyRule(&r.Rules[i], true, field.NewPath("rules").Index(i))...)
	}
	return errs
}

// ValidateRoleUpdate validates a Role update.
func ValidateRoleUpdate(r, old *rbacv1.Role) field.ErrorList {
	errs := ValidateRole(r)
	return append(errs, validateMetaUpdate(&r.ObjectMeta, &old.ObjectMeta)...)
}

// ValidateClusterRole validates a ClusterRole on create.
func ValidateClusterRole(r *rbacv1.ClusterRole) field.ErrorList {
	return validateClusterRole(r, metav1validation.LabelSelectorValidationOptions{})
}

// ValidateClusterRoleUpdate validates a ClusterRole update. Like upstream, selectors with label
// values that are invalid stay accepted when the stored role already has them.
func ValidateClusterRoleUpdate(r, old *rbacv1.ClusterRole) field.ErrorList {
	opts := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: hasInvalidSelectorLabelValue(old)}
	errs := validateClusterRole(r, opts)
	return append(errs, validateMetaUpdate(&r.ObjectMeta, &old.ObjectMeta)...)
}

func validateClusterRole(r *rbacv1.ClusterRole, opts metav1validation.LabelSelectorValidationOptions) field.ErrorList {
	errs := validateMeta(&r.ObjectMeta, false, validateRBACName)
	for i := range r.Rules {
		errs = append(errs, validatePolicyRule(&r.Rules[i], false, field.NewPath("rules").Index(i))...)
	}
	if r.AggregationRule != nil {
		sp := field.NewPath("aggregationRule", "clusterRoleSelectors")
		if len(r.AggregationRule.ClusterRoleSelectors) == 0 {
			errs = append(errs, field.Required(sp, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
		}
		for i := range r.AggregationRule.ClusterRoleSelectors {
			sel := &r.AggregationRule.ClusterRoleSelectors[i]
			errs = append(errs, metav1validation.ValidateLabelSelector(sel, opts, sp.Index(i))...)
			if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
				errs = append(errs, field.Invalid(sp.Index(i), sel, "invalid label selector."))
			}
		}
	}
	return errs
}

func hasInvalidSelectorLabelValue(r *rbacv1.ClusterRole) bool {
	if r.AggregationRule == nil {
		return false
	}
	for i := range r.AggregationRule.ClusterRoleSelectors {
		if metav1validation.LabelSelectorHasInvalidLabelValue(&r.AggregationRule.ClusterRoleSelectors[i]) {
			return true
		}
	}
	return false
}

// validatePolicyRule checks one rule: verbs, and either resources with their API groups or
// non-resource URLs (which only cluster-wide roles may grant).
func validatePolicyRule(rule *rbacv1.PolicyRule, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(rule.Verbs) == 0 {
		errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
	}
	if len(rule.NonResourceURLs) > 0 {
		if namespaced {
			errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
		}
		if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
			errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
		}
		return errs
	}
	if len(rule.APIGroups) == 0 {
		errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
	}
	if len(rule.Resources) == 0 {
		errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
	}
	return errs
}

// ValidateRoleBinding validates a RoleBinding on create: it may refer to a Role of its
// namespace or to a ClusterRole.
func ValidateRoleBinding(b *rbacv1.RoleBinding) field.ErrorList {
	return validateBinding(&b.ObjectMeta, true, &b.RoleRef, []string{"Role", "ClusterRole"}, b.Subjects)
}

// ValidateRoleBindingUpdate validates a RoleBinding update: roleRef cannot change.
func ValidateRoleBindingUpdate(b, old *rbacv1.RoleBinding) field.ErrorList {
	errs := ValidateRoleBinding(b)
	errs = append(errs, validateMetaUpdate(&b.ObjectMeta, &old.ObjectMeta)...)
	return append(errs, validateRoleRefUnchanged(b.RoleRef, old.RoleRef)...)
}

// ValidateClusterRoleBinding validates a ClusterRoleBinding on create: it refers to a
// ClusterRole, and its ServiceAccount subjects name their namespace.
func ValidateClusterRoleBinding(b *rbacv1.ClusterRoleBinding) field.ErrorList {
	return validateBinding(&b.ObjectMeta, false, &b.RoleRef, []string{"ClusterRole"}, b.Subjects)
}

// ValidateClusterRoleBindingUpdate validates a ClusterRoleBinding update: roleRef cannot change.
func ValidateClusterRoleBindingUpdate(b, old *rbacv1.ClusterRoleBinding) field.ErrorList {
	errs := ValidateClusterRoleBinding(b)
	errs = append(errs, validateMetaUpdate(&b.ObjectMeta, &old.ObjectMeta)...)
	return append(errs, validateRoleRefUnchanged(b.RoleRef, old.RoleRef)...)
}

// validateBinding validates a RoleBinding (namespaced) or ClusterRoleBinding on create: its
// roleRef refers to one of kinds.
func validateBinding(m *metav1.ObjectMeta, namespaced bool, ref *rbacv1.RoleRef, kinds []string, subjects []rbacv1.Subject) field.ErrorList {
	errs := validateMeta(m, namespaced, validateRBACName)
	errs = append(errs, validateRoleRef(ref, kinds)...)
	for i := range subjects {
		errs = append(errs, validateSubject(&subjects[i], namespaced, field.NewPath("subjects").Index(i))...)
	}
	return errs
}

func validateRoleRef(ref *rbacv1.RoleRef, kinds []string) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(p.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kindOK := false
	for _, k := range kinds {
		kindOK = kindOK || ref.Kind == k
	}
	if !kindOK {
		errs = append(errs, field.NotSupported(p.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else {
		errs = append(errs, nameErrs(p.Child("name"), ref.Name, validateRBACName(ref.Name, false))...)
	}
	return errs
}

func validateRoleRefUnchanged(ref, old rbacv1.RoleRef) field.ErrorList {
	if ref != old {
		return field.ErrorList{field.Invalid(field.NewPath("roleRef"), ref, "cannot change roleRef")}
	}
	return nil
}

// validateSubject checks one subject of a binding. A ServiceAccount subject of a
// ClusterRoleBinding must name its namespace; in a RoleBinding it defaults to the binding's.
func validateSubject(s *rbacv1.Subject, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if s.Name != "" {
			errs = append(errs, nameErrs(p.Child("name"), s.Name, apimachineryvalidation.NameIsDNSSubdomain(s.Name, false))...)
		}
		if s.APIGroup != "" {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
		}
		if !namespaced && s.Namespace == "" {
			errs = append(errs, field.Required(p.Child("namespace"), ""))
		}
	case rbacv1.UserKind, rbacv1.GroupKind:
		if s.APIGroup != rbacv1.GroupName {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
	}
	return errs
}
