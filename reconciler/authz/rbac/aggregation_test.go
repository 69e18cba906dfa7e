package rbac

import (
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func labeled(cr *rbacv1.ClusterRole, labels map[string]string) *rbacv1.ClusterRole {
	cr.Labels = labels
	return cr
}

func aggregating(name string, selectors ...metav1.LabelSelector) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: selectors}}
}

func matchLabels(k, v string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
}

func TestAggregatedRules(t *testing.T) {
	pods := coreRule(readVerbs, "pods")
	secrets := coreRule(get, "secrets")
	deploys := groups(resources(newRule("get"), "deployments"), "apps")
	nodes := coreRule(get, "nodes")
	// Equal to pods but with empty, not nil, lists: a duplicate all the same.
	podsAgain := rbacv1.PolicyRule{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}, ResourceNames: []string{}}

	all := []*rbacv1.ClusterRole{
		labeled(clusterRole("z-pods", pods), map[string]string{"agg": "yes"}),
		labeled(clusterRole("a-secrets", secrets, pods), map[string]string{"agg": "yes", "tier": "gold"}),
		labeled(clusterRole("m-deploys", deploys, podsAgain), map[string]string{"other": "yes"}),
		labeled(clusterRole("nodes", nodes), map[string]string{"tier": "silver"}),
		clusterRole("unlabeled", coreRule(get, "everything")),
		nil,
	}

	for _, tc := range []struct {
		name string
		cr   *rbacv1.ClusterRole
		want []rbacv1.PolicyRule
	}{
		{"roles in name order, rules once", aggregating("agg", matchLabels("agg", "yes")), []rbacv1.PolicyRule{secrets, pods}},
		{"selector by selector", aggregating("agg", matchLabels("other", "yes"), matchLabels("agg", "yes")),
			[]rbacv1.PolicyRule{deploys, podsAgain, secrets}},
		{"match expressions", aggregating("agg", metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"gold", "silver"}}}}),
			[]rbacv1.PolicyRule{secrets, pods, nodes}},
		{"no match", aggregating("agg", matchLabels("agg", "no")), nil},
		{"invalid selector matches nothing", aggregating("agg", metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: "Bogus"}}}), nil},
		{"no selectors", aggregating("agg"), nil},
		{"not aggregated", clusterRole("plain", pods), nil},
		{"not itself", labeled(aggregating("z-pods", matchLabels("agg", "yes")), map[string]string{"agg": "yes"}),
			[]rbacv1.PolicyRule{secrets, pods}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := AggregatedRules(tc.cr, all)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}

	got := AggregatedRules(aggregating("agg", matchLabels("agg", "yes")), all)
	got[0].Verbs[0] = "changed"
	if secrets.Verbs[0] != "get" || all[1].Rules[0].Verbs[0] != "get" {
		t.Error("result shares memory with the input")
	}
	if AggregatedRules(nil, all) != nil {
		t.Error("rules for nil")
	}
}

// aggregateAll runs aggregation over the roles until nothing changes, as the aggregation
// controller would, and returns the roles by name.
func aggregateAll(t *testing.T, roles []rbacv1.ClusterRole) map[string]*rbacv1.ClusterRole {
	t.Helper()
	var ptrs []*rbacv1.ClusterRole
	byName := map[string]*rbacv1.ClusterRole{}
	for i := range roles {
		ptrs = append(ptrs, &roles[i])
		byName[roles[i].Name] = &roles[i]
	}
	for round := 0; ; round++ {
		if round > 10 {
			t.Fatal("aggregation does not settle")
		}
		changed := false
		for _, cr := range ptrs {
			if cr.AggregationRule == nil {
				continue
			}
			if rules := AggregatedRules(cr, ptrs); !reflect.DeepEqual(rules, cr.Rules) {
				cr.Rules, changed = rules, true
			}
		}
		if !changed {
			return byName
		}
	}
}
