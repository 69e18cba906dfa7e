package rbac

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func TestRuleAllows(t *testing.T) {
	u := usr("u")
	for _, tc := range []struct {
		name  string
		rule  rbacv1.PolicyRule
		attrs authorizer.AttributesRecord
		allow bool
	}{
		{"subresource rule does not cover the resource", coreRule(get, "pods/status"), resourceAttrs(u, "get", "", "pods", "ns", "p"), false},
		{"subresource rule", coreRule(get, "pods/status"), resourceAttrs(u, "get", "", "pods/status", "ns", "p"), true},
		{"*/sub needs the same subresource", coreRule(get, "*/status"), resourceAttrs(u, "get", "", "pods/xstatus", "ns", "p"), false},
		{"*/sub with a longer rule", coreRule(get, "*/statusx"), resourceAttrs(u, "get", "", "pods/status", "ns", "p"), false},
		{"resource name on a cluster-scoped request", names(coreRule(get, "nodes"), "n1"), resourceAttrs(u, "get", "", "nodes", "", "n1"), true},
		{"empty verbs", coreRule(nil, "pods"), resourceAttrs(u, "get", "", "pods", "ns", "p"), false},
		{"no groups", resources(newRule("get"), "pods"), resourceAttrs(u, "get", "", "pods", "ns", "p"), false},
		{"resource rule for a path", coreRule(get, "*"), pathAttrs(u, "get", "/api"), false},
		{"path rule for a resource", nonResource(newRule("get"), "*"), resourceAttrs(u, "get", "", "pods", "ns", "p"), false},
		{"/api/* is not /apis", nonResource(newRule("get"), "/api/*"), pathAttrs(u, "get", "/apis/apps"), false},
		{"/api* is a prefix", nonResource(newRule("get"), "/api*"), pathAttrs(u, "get", "/apis/apps"), true},
		{"/api/* covers below", nonResource(newRule("get"), "/api/*"), pathAttrs(u, "get", "/api/v1"), true},
		{"/api/* does not cover /api", nonResource(newRule("get"), "/api/*"), pathAttrs(u, "get", "/api"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RuleAllows(tc.attrs, &tc.rule); got != tc.allow {
				t.Errorf("RuleAllows = %v, want %v", got, tc.allow)
			}
			if got := RulesAllow(tc.attrs, coreRule(nil, "unrelated"), tc.rule); got != tc.allow {
				t.Errorf("RulesAllow = %v, want %v", got, tc.allow)
			}
			req := newRequest(tc.attrs)
			if got := req.allowedBy(&tc.rule); got != tc.allow {
				t.Errorf("request.allowedBy = %v, want %v", got, tc.allow)
			}
		})
	}
}
