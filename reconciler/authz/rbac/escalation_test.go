package rbac

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

func escalationPolicy() []any {
	return []any{
		clusterRole("pod-reader", coreRule(readVerbs, "pods")),
		clusterRole("pod-admin", coreRule([]string{"*"}, "pods")),
		clusterRole("view", coreRule(readVerbs, "configmaps")),
		clusterRole("edit", coreRule([]string{"*"}, "configmaps")),
		clusterRole("role-escalator", groups(resources(newRule("escalate"), "roles"), rbacv1.GroupName)),
		clusterRole("clusterrole-escalator", groups(resources(newRule("escalate"), "clusterroles"), rbacv1.GroupName)),
		clusterRole("special-escalator", names(groups(resources(newRule("escalate"), "roles"), rbacv1.GroupName), "special")),
		clusterRole("view-binder", names(groups(resources(newRule("bind"), "clusterroles"), rbacv1.GroupName), "view")),
		clusterRole("role-binder", groups(resources(newRule("bind"), "roles"), rbacv1.GroupName)),
		role("ns1", "local", coreRule(get, "secrets")),

		roleBinding("ns1", "alice", clusterRoleRef("pod-reader"), userSubject("alice")),
		roleBinding("ns1", "esc", clusterRoleRef("role-escalator"), userSubject("esther")),
		clusterRoleBinding("cesc", clusterRoleRef("clusterrole-escalator"), userSubject("clara")),
		roleBinding("ns1", "special", clusterRoleRef("special-escalator"), userSubject("sam")),
		roleBinding("ns1", "binder", clusterRoleRef("view-binder"), groupSubject("binders")),
		roleBinding("ns1", "role-binder", clusterRoleRef("role-binder"), userSubject("rob")),
		clusterRoleBinding("carol", clusterRoleRef("missing"), userSubject("carol")),
		clusterRoleBinding("carol-pods", clusterRoleRef("pod-reader"), userSubject("carol")),
	}
}

func TestConfirmNoEscalation(t *testing.T) {
	a := newAuthorizer(t, escalationPolicy()...)
	ctx := context.Background()
	alice := usr("alice", "team", user.AllAuthenticated)
	readPods := []rbacv1.PolicyRule{coreRule([]string{"get", "list"}, "pods")}
	writePods := []rbacv1.PolicyRule{coreRule([]string{"get", "delete", "create"}, "pods"), coreRule(get, "secrets")}

	for _, tc := range []struct {
		name      string
		u         user.Info
		namespace string
		role      string
		rules     []rbacv1.PolicyRule
		err       string // "" for allowed, else the whole message
	}{
		{"held rules", alice, "ns1", "", readPods, ""},
		{"nothing to grant", alice, "ns1", "", nil, ""},
		{"rules not held", alice, "ns1", "", writePods,
			"user \"alice\" (groups=[\"team\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n" +
				"{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\" \"create\"]}\n" +
				"{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"},
		{"rules held in another namespace only", alice, "ns2", "", readPods,
			"user \"alice\" (groups=[\"team\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n" +
				"{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\" \"list\"]}"},
		{"ClusterRole with rules held in a namespace only", alice, "", "", readPods, "attempting to grant"},
		{"resourceNames narrower than held", alice, "ns1", "", []rbacv1.PolicyRule{names(coreRule(get, "pods"), "p1")}, ""},
		{"subresource not held", alice, "ns1", "", []rbacv1.PolicyRule{coreRule(get, "pods/log")},
			"user \"alice\" (groups=[\"team\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n" +
				"{APIGroups:[\"\"], Resources:[\"pods/log\"], Verbs:[\"get\"]}"},
		{"non-resource URL not held", alice, "", "", []rbacv1.PolicyRule{nonResource(newRule("get"), "/metrics")},
			"{NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}"},
		{"escalate on roles in the namespace", usr("esther"), "ns1", "", writePods, ""},
		{"escalate on roles elsewhere", usr("esther"), "ns2", "", writePods, "attempting to grant"},
		{"escalate on roles is not on clusterroles", usr("esther"), "", "", writePods, "attempting to grant"},
		{"escalate on clusterroles", usr("clara"), "", "", writePods, ""},
		{"escalate on clusterroles is not on roles", usr("clara"), "ns1", "", writePods, "attempting to grant"},
		{"escalate limited to a name, for that role", usr("sam"), "ns1", "special", writePods, ""},
		{"escalate limited to a name, for another role", usr("sam"), "ns1", "other", writePods, "attempting to grant"},
		{"escalate limited to a name, role unnamed", usr("sam"), "ns1", "", writePods, "attempting to grant"},
		{"system:masters", usr("root", user.SystemPrivilegedGroup), "ns1", "", writePods, ""},
		{"resolution errors are reported", usr("carol"), "ns1", "", writePods,
			"; resolution errors: [clusterrole.rbac.authorization.k8s.io \"missing\" not found]"},
		{"resolution errors do not hide held rules", usr("carol"), "ns1", "", readPods, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.role == "" {
				err = a.ConfirmNoEscalation(ctx, tc.u, tc.namespace, tc.rules)
			} else {
				err = a.ConfirmNoEscalationForRole(ctx, tc.u, tc.namespace, tc.role, tc.rules)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.err != "" && err == nil:
				t.Errorf("no error, want %q", tc.err)
			case tc.err != "" && strings.HasPrefix(tc.err, "user ") && err.Error() != tc.err:
				t.Errorf("error\n%s\nwant\n%s", err, tc.err)
			case tc.err != "" && !strings.Contains(err.Error(), tc.err):
				t.Errorf("error\n%s\ndoes not contain\n%s", err, tc.err)
			}
		})
	}
}

func TestCanBindAndConfirmBinding(t *testing.T) {
	a := newAuthorizer(t, escalationPolicy()...)
	ctx := context.Background()
	binder := usr("bea", "binders")
	alice := usr("alice")

	for _, tc := range []struct {
		name      string
		u         user.Info
		ref       rbacv1.RoleRef
		namespace string
		canBind   bool
		err       string // of ConfirmBinding; "" for allowed
	}{
		{"bind verb on the ClusterRole in the namespace", binder, clusterRoleRef("view"), "ns1", true, ""},
		{"bind verb not in another namespace", binder, clusterRoleRef("view"), "ns2", false, "attempting to grant"},
		{"bind verb not for a ClusterRoleBinding", binder, clusterRoleRef("view"), "", false, "attempting to grant"},
		{"bind verb limited to its resourceNames", binder, clusterRoleRef("edit"), "ns1", false, "attempting to grant"},
		{"bind on clusterroles is not on roles", binder, roleRef("view"), "ns1", false, `role.rbac.authorization.k8s.io "view" not found`},
		{"bind on roles", usr("rob"), roleRef("local"), "ns1", true, ""},
		{"bind on roles is not on clusterroles", usr("rob"), clusterRoleRef("view"), "ns1", false, "attempting to grant"},
		{"no bind verb, rules held", alice, clusterRoleRef("pod-reader"), "ns1", false, ""},
		{"no bind verb, rules held elsewhere only", alice, clusterRoleRef("pod-reader"), "ns2", false,
			"user \"alice\" (groups=[]) is attempting to grant RBAC permissions not currently held:\n" +
				"{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\" \"list\" \"watch\"]}"},
		{"no bind verb, rules not held", alice, clusterRoleRef("pod-admin"), "ns1", false,
			"user \"alice\" (groups=[]) is attempting to grant RBAC permissions not currently held:\n" +
				"{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"*\"]}"},
		{"missing role", alice, clusterRoleRef("nope"), "ns1", false, `clusterrole.rbac.authorization.k8s.io "nope" not found`},
		{"Role in a ClusterRoleBinding", alice, roleRef("local"), "", false, "cannot refer to Role"},
		{"unknown kind", binder, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Other", Name: "view"}, "ns1", false, "unsupported role reference kind"},
		{"system:masters", usr("root", user.SystemPrivilegedGroup), clusterRoleRef("pod-admin"), "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := a.CanBind(ctx, tc.u, tc.ref, tc.namespace); got != tc.canBind {
				t.Errorf("CanBind = %v, want %v", got, tc.canBind)
			}
			err := a.ConfirmBinding(ctx, tc.u, tc.ref, tc.namespace)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.err != "" && err == nil:
				t.Errorf("no error, want %q", tc.err)
			case tc.err != "" && strings.HasPrefix(tc.err, "user ") && err.Error() != tc.err:
				t.Errorf("error\n%s\nwant\n%s", err, tc.err)
			case tc.err != "" && !strings.Contains(err.Error(), tc.err):
				t.Errorf("error\n%s\ndoes not contain\n%s", err, tc.err)
			}
		})
	}
	if a.CanBind(ctx, nil, clusterRoleRef("view"), "ns1") || a.ConfirmBinding(ctx, nil, clusterRoleRef("view"), "ns1") == nil ||
		a.ConfirmNoEscalation(ctx, nil, "ns1", nil) == nil {
		t.Error("no user is allowed")
	}
}

func TestCompactRules(t *testing.T) {
	in := []rbacv1.PolicyRule{
		coreRule(get, "pods"), coreRule([]string{"list"}, "pods"), coreRule(get, "pods"),
		names(coreRule(get, "pods"), "a"), names(coreRule([]string{"update"}, "pods"), "a"),
		coreRule(get, "pods", "secrets"), nonResource(newRule("get"), "/x"),
	}
	got := compactRules(in)
	var lines []string
	for _, r := range got {
		lines = append(lines, compactString(r))
	}
	want := []string{
		`{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}`,
		`{APIGroups:[""], Resources:["pods"], ResourceNames:["a"], Verbs:["get" "update"]}`,
		`{APIGroups:[""], Resources:["pods" "secrets"], Verbs:["get"]}`,
		`{NonResourceURLs:["/x"], Verbs:["get"]}`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if len(in[0].Verbs) != 1 {
		t.Error("input modified")
	}
}
