package rbac

import (
	"sort"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// AggregatedRules returns the rules an aggregated ClusterRole should hold: the rules of
// every ClusterRole in all (other than cr itself) whose labels match one of
// cr.aggregationRule's selectors. They come selector by selector, and for each selector
// from the matching roles in name order, each rule once (the first time it appears); a
// role's own rules are not kept, as they are replaced by what it aggregates. It returns nil
// when cr has no aggregationRule or nothing matches. An invalid selector (which validation
// rejects) matches nothing. The result shares no memory with the arguments.
func AggregatedRules(cr *rbacv1.ClusterRole, all []*rbacv1.ClusterRole) []rbacv1.PolicyRule {
	if cr == nil || cr.AggregationRule == nil {
		return nil
	}
	sorted := make([]*rbacv1.ClusterRole, 0, len(all))
	for _, r := range all {
		if r != nil && r.Name != cr.Name {
			sorted = append(sorted, r)
		}
	}
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	var rules []rbacv1.PolicyRule
	for i := range cr.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&cr.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			continue
		}
		for _, r := range sorted {
			if !sel.Matches(labels.Set(r.Labels)) {
				continue
			}
			for j := range r.Rules {
				if !ruleIn(rules, &r.Rules[j]) {
					rules = append(rules, *r.Rules[j].DeepCopy())
				}
			}
		}
	}
	return rules
}

// ruleIn reports whether rules holds a rule equal to r, nil and empty lists being equal.
func ruleIn(rules []rbacv1.PolicyRule, r *rbacv1.PolicyRule) bool {
	for i := range rules {
		if equality.Semantic.DeepEqual(rules[i], *r) {
			return true
		}
	}
	return false
}
