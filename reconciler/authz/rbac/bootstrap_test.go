package rbac

import (
	"context"
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/flotilla-dev/flotilla/reconciler/authz"
)

func TestBootstrapPolicy(t *testing.T) {
	roles := BootstrapClusterRoles()
	byName := map[string]rbacv1.ClusterRole{}
	for _, r := range roles {
		if _, dup := byName[r.Name]; dup {
			t.Errorf("duplicate ClusterRole %s", r.Name)
		}
		byName[r.Name] = r
		if r.Labels[BootstrappingLabel] != "rbac-defaults" || r.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" {
			t.Errorf("%s: metadata %v %v", r.Name, r.Labels, r.Annotations)
		}
		if (r.AggregationRule == nil) == (len(r.Rules) == 0) {
			t.Errorf("%s: a role has either rules or an aggregationRule", r.Name)
		}
	}
	for _, name := range []string{"cluster-admin", "admin", "edit", "view", "system:aggregate-to-admin", "system:aggregate-to-edit",
		"system:aggregate-to-view", "system:discovery", "system:basic-user", "system:public-info-viewer"} {
		if _, ok := byName[name]; !ok {
			t.Errorf("no ClusterRole %s", name)
		}
	}
	for name, label := range map[string]string{"admin": AggregateToAdmin, "edit": AggregateToEdit, "view": AggregateToView} {
		want := &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{label: "true"}}}}
		if !reflect.DeepEqual(byName[name].AggregationRule, want) {
			t.Errorf("%s aggregates %+v", name, byName[name].AggregationRule)
		}
		if byName["system:aggregate-to-"+name].Labels[label] != "true" {
			t.Errorf("system:aggregate-to-%s is not labeled %s", name, label)
		}
	}
	if byName["edit"].Labels[AggregateToAdmin] != "true" || byName["view"].Labels[AggregateToEdit] != "true" {
		t.Error("edit is not aggregated to admin, or view to edit")
	}

	wantSubjects := map[string][]string{
		"cluster-admin":             {user.SystemPrivilegedGroup},
		"system:discovery":          {user.AllAuthenticated},
		"system:basic-user":         {user.AllAuthenticated},
		"system:public-info-viewer": {user.AllAuthenticated, user.AllUnauthenticated},
		PlannerRole:                 {authz.PlannersGroup},
	}
	bindings := BootstrapClusterRoleBindings()
	if len(bindings) != len(wantSubjects) {
		t.Errorf("%d bindings", len(bindings))
	}
	for _, b := range bindings {
		if _, ok := byName[b.RoleRef.Name]; !ok || b.RoleRef.Kind != "ClusterRole" || b.RoleRef.APIGroup != rbacv1.GroupName {
			t.Errorf("%s refers to %+v", b.Name, b.RoleRef)
		}
		if b.Labels[BootstrappingLabel] != "rbac-defaults" || b.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" {
			t.Errorf("%s: metadata %v %v", b.Name, b.Labels, b.Annotations)
		}
		var got []string
		for _, s := range b.Subjects {
			if s.Kind != rbacv1.GroupKind || s.APIGroup != rbacv1.GroupName {
				t.Errorf("%s: subject %+v", b.Name, s)
			}
			got = append(got, s.Name)
		}
		if !reflect.DeepEqual(got, wantSubjects[b.Name]) {
			t.Errorf("%s binds %v, want %v", b.Name, got, wantSubjects[b.Name])
		}
	}

	// Every call returns new objects.
	BootstrapClusterRoles()[0].Rules[0].Verbs[0] = "changed"
	BootstrapClusterRoleBindings()[0].Subjects[0].Name = "changed"
	if BootstrapClusterRoles()[0].Rules[0].Verbs[0] == "changed" || BootstrapClusterRoleBindings()[0].Subjects[0].Name == "changed" {
		t.Error("bootstrap objects are shared")
	}
}

// bootstrapAuthorizer serves the aggregated bootstrap policy and, in ns1, binds admin to
// adam, edit to ed and view to vic.
func bootstrapAuthorizer(t *testing.T) (*Authorizer, map[string]*rbacv1.ClusterRole) {
	roles := aggregateAll(t, BootstrapClusterRoles())
	s := newStore()
	for _, r := range roles {
		s.add(t, r)
	}
	for _, b := range BootstrapClusterRoleBindings() {
		s.add(t, b.DeepCopy())
	}
	s.add(t,
		roleBinding("ns1", "admins", clusterRoleRef("admin"), userSubject("adam")),
		roleBinding("ns1", "editors", clusterRoleRef("edit"), userSubject("ed")),
		roleBinding("ns1", "viewers", clusterRoleRef("view"), userSubject("vic")),
	)
	return s.authorizer(), roles
}

func TestBootstrapPolicyDecisions(t *testing.T) {
	a, _ := bootstrapAuthorizer(t)
	authn := func(name string) user.Info { return usr(name, user.AllAuthenticated) }
	anonymous := usr(user.Anonymous, user.AllUnauthenticated)
	adam, ed, vic := authn("adam"), authn("ed"), authn("vic")

	for _, tc := range []struct {
		name  string
		attrs authorizer.AttributesRecord
		allow bool
	}{
		{"anonymous health", pathAttrs(anonymous, "get", "/readyz"), true},
		{"anonymous version", pathAttrs(anonymous, "get", "/version"), true},
		{"anonymous discovery", pathAttrs(anonymous, "get", "/apis"), false},
		{"authenticated discovery", pathAttrs(authn("x"), "get", "/apis/apps/v1"), true},
		{"authenticated openapi", pathAttrs(authn("x"), "get", "/openapi/v3"), true},
		{"authenticated metrics", pathAttrs(authn("x"), "get", "/metrics"), false},
		{"self access review", resourceAttrs(authn("x"), "create", "authorization.k8s.io", "selfsubjectaccessreviews", "", ""), true},
		{"self rules review", resourceAttrs(authn("x"), "create", "authorization.k8s.io", "selfsubjectrulesreviews", "", ""), true},
		{"self review", resourceAttrs(authn("x"), "create", "authentication.k8s.io", "selfsubjectreviews", "", ""), true},
		{"authenticated pods", resourceAttrs(authn("x"), "list", "", "pods", "ns1", ""), false},
		{"anonymous self review", resourceAttrs(anonymous, "create", "authentication.k8s.io", "selfsubjectreviews", "", ""), false},
		{"system:masters", resourceAttrs(usr("root", user.SystemPrivilegedGroup), "delete", "", "nodes", "", "n"), true},

		{"view pods", resourceAttrs(vic, "list", "", "pods", "ns1", ""), true},
		{"view logs", resourceAttrs(vic, "get", "", "pods/log", "ns1", "p"), true},
		{"view deployment scale", resourceAttrs(vic, "get", "apps", "deployments/scale", "ns1", "d"), true},
		{"view own namespace", resourceAttrs(vic, "get", "", "namespaces", "ns1", "ns1"), true},
		{"view secrets", resourceAttrs(vic, "get", "", "secrets", "ns1", "s"), false},
		{"view writes", resourceAttrs(vic, "update", "", "configmaps", "ns1", "c"), false},
		{"view other namespace", resourceAttrs(vic, "list", "", "pods", "ns2", ""), false},

		{"edit deployments", resourceAttrs(ed, "create", "apps", "deployments", "ns1", ""), true},
		{"edit scale", resourceAttrs(ed, "update", "apps", "statefulsets/scale", "ns1", "s"), true},
		{"edit secrets", resourceAttrs(ed, "get", "", "secrets", "ns1", "s"), true},
		{"edit exec", resourceAttrs(ed, "create", "", "pods/exec", "ns1", "p"), true},
		{"edit evict", resourceAttrs(ed, "create", "", "pods/eviction", "ns1", "p"), true},
		{"edit leases", resourceAttrs(ed, "update", "coordination.k8s.io", "leases", "ns1", "l"), true},
		{"edit reads as view", resourceAttrs(ed, "watch", "batch", "jobs", "ns1", ""), true},
		{"edit impersonates service accounts", resourceAttrs(ed, "impersonate", "", "serviceaccounts", "ns1", "sa"), true},
		{"edit roles", resourceAttrs(ed, "create", rbacv1.GroupName, "roles", "ns1", ""), false},
		{"edit status", resourceAttrs(ed, "update", "apps", "deployments/status", "ns1", "d"), false},
		{"edit quota", resourceAttrs(ed, "update", "", "resourcequotas", "ns1", "q"), false},
		{"edit endpoints", resourceAttrs(ed, "update", "", "endpoints", "ns1", "e"), false},

		{"admin rolebindings", resourceAttrs(adam, "create", rbacv1.GroupName, "rolebindings", "ns1", ""), true},
		{"admin local access review", resourceAttrs(adam, "create", "authorization.k8s.io", "localsubjectaccessreviews", "ns1", ""), true},
		{"admin edits", resourceAttrs(adam, "delete", "networking.k8s.io", "networkpolicies", "ns1", "n"), true},
		{"admin views", resourceAttrs(adam, "get", "policy", "poddisruptionbudgets/status", "ns1", "p"), true},
		{"admin clusterroles", resourceAttrs(adam, "create", rbacv1.GroupName, "clusterroles", "", ""), false},
		{"admin nodes", resourceAttrs(adam, "get", "", "nodes", "", "n"), false},
		{"admin other namespace", resourceAttrs(adam, "create", rbacv1.GroupName, "rolebindings", "ns2", ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, reason, _ := a.Authorize(context.Background(), tc.attrs)
			if (d == authorizer.DecisionAllow) != tc.allow {
				t.Errorf("decision %v (%s), want allow=%v", d, reason, tc.allow)
			}
		})
	}
}

func TestBootstrapEscalation(t *testing.T) {
	a, roles := bootstrapAuthorizer(t)
	ctx := context.Background()
	adam, ed := usr("adam", user.AllAuthenticated), usr("ed", user.AllAuthenticated)

	// A namespace admin holds what edit and view grant, so may grant them there.
	for _, name := range []string{"admin", "edit", "view"} {
		if err := a.ConfirmNoEscalation(ctx, adam, "ns1", roles[name].Rules); err != nil {
			t.Errorf("admin writing a Role with %s's rules: %v", name, err)
		}
		if err := a.ConfirmBinding(ctx, adam, clusterRoleRef(name), "ns1"); err != nil {
			t.Errorf("admin binding %s: %v", name, err)
		}
	}
	// An editor does not hold admin's rules, nor anything outside its namespace.
	if err := a.ConfirmBinding(ctx, ed, clusterRoleRef("admin"), "ns1"); err == nil {
		t.Error("editor may bind admin")
	}
	if err := a.ConfirmBinding(ctx, ed, clusterRoleRef("edit"), "ns2"); err == nil {
		t.Error("editor may bind edit in another namespace")
	}
	if err := a.ConfirmNoEscalation(ctx, adam, "", roles["view"].Rules); err == nil {
		t.Error("namespace admin may write a ClusterRole")
	}
}

func TestReconcileClusterRole(t *testing.T) {
	desired := clusterRole("r", coreRule(get, "pods"), coreRule(get, "secrets"))
	addBootstrapMetadata(&desired.ObjectMeta)

	withRules := func(cr *rbacv1.ClusterRole, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		cr = cr.DeepCopy()
		cr.Rules = rules
		return cr
	}
	withMeta := func(cr *rbacv1.ClusterRole, labels, annotations map[string]string) *rbacv1.ClusterRole {
		cr = cr.DeepCopy()
		cr.Labels, cr.Annotations = labels, annotations
		return cr
	}
	protected := withMeta(withRules(desired, coreRule(get, "pods")), nil, map[string]string{rbacv1.AutoUpdateAnnotationKey: "false"})
	aggregated := aggregating("agg", matchLabels("x", "true"))
	addBootstrapMetadata(&aggregated.ObjectMeta)

	for _, tc := range []struct {
		name              string
		existing, desired *rbacv1.ClusterRole
		op                Operation
		want              *rbacv1.ClusterRole
		missing           []rbacv1.PolicyRule
		protected         bool
	}{
		{"create", nil, desired, OperationCreate, desired, desired.Rules, false},
		{"up to date", desired, desired, OperationNone, desired, nil, false},
		{"rules covered by broader ones", withRules(desired, coreRule([]string{"*"}, "*")), desired, OperationNone,
			withRules(desired, coreRule([]string{"*"}, "*")), nil, false},
		{"missing rule added, user's rule kept",
			withRules(desired, coreRule(get, "pods"), coreRule(get, "configmaps")), desired, OperationUpdate,
			withRules(desired, coreRule(get, "pods"), coreRule(get, "configmaps"), coreRule(get, "secrets")),
			[]rbacv1.PolicyRule{coreRule(get, "secrets")}, false},
		{"missing metadata added, user's kept",
			withMeta(desired, map[string]string{"mine": "1", BootstrappingLabel: "custom"}, map[string]string{"note": "x"}), desired, OperationUpdate,
			withMeta(desired, map[string]string{"mine": "1", BootstrappingLabel: "custom"},
				map[string]string{"note": "x", rbacv1.AutoUpdateAnnotationKey: "true"}), nil, false},
		{"protected", protected, desired, OperationNone, protected, []rbacv1.PolicyRule{coreRule(get, "secrets")}, true},
		{"aggregated rules kept", withRules(aggregated, coreRule(get, "pods")), aggregated, OperationNone,
			withRules(aggregated, coreRule(get, "pods")), nil, false},
		{"missing aggregation selector added", withRules(aggregating("agg", matchLabels("y", "true")), coreRule(get, "pods")), aggregated,
			OperationUpdate, func() *rbacv1.ClusterRole {
				cr := withRules(aggregated, coreRule(get, "pods"))
				cr.AggregationRule.ClusterRoleSelectors = []metav1.LabelSelector{matchLabels("y", "true"), matchLabels("x", "true")}
				return cr
			}(), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var existingCopy *rbacv1.ClusterRole
			if tc.existing != nil {
				existingCopy = tc.existing.DeepCopy()
			}
			desiredCopy := tc.desired.DeepCopy()
			r, err := Reconcile(tc.existing, tc.desired)
			if err != nil {
				t.Fatal(err)
			}
			if r.Operation != tc.op || r.Protected != tc.protected {
				t.Errorf("operation %s, protected %v; want %s, %v", r.Operation, r.Protected, tc.op, tc.protected)
			}
			if !equality.Semantic.DeepEqual(r.Object, tc.want) {
				t.Errorf("object\n%+v\nwant\n%+v", r.Object, tc.want)
			}
			if !equality.Semantic.DeepEqual(r.MissingRules, tc.missing) {
				t.Errorf("missing %+v, want %+v", r.MissingRules, tc.missing)
			}
			if !reflect.DeepEqual(tc.existing, existingCopy) || !reflect.DeepEqual(tc.desired, desiredCopy) {
				t.Error("arguments modified")
			}
		})
	}
}

func TestReconcileClusterRoleBinding(t *testing.T) {
	desired := BootstrapClusterRoleBindings()[3].DeepCopy() // system:public-info-viewer, two groups
	withSubjects := func(s ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
		b := desired.DeepCopy()
		b.Subjects = s
		return b
	}
	authn, unauthn := groupSubject(user.AllAuthenticated), groupSubject(user.AllUnauthenticated)
	otherRole := desired.DeepCopy()
	otherRole.RoleRef.Name = "other"
	otherRole.Subjects = append(otherRole.Subjects, userSubject("mine"))
	protected := withSubjects(authn)
	protected.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "false"}

	for _, tc := range []struct {
		name      string
		existing  *rbacv1.ClusterRoleBinding
		op        Operation
		want      *rbacv1.ClusterRoleBinding
		missing   []rbacv1.Subject
		protected bool
	}{
		{"create", nil, OperationCreate, desired, desired.Subjects, false},
		{"up to date", desired, OperationNone, desired, nil, false},
		{"missing subject added, user's kept", withSubjects(userSubject("mine"), authn), OperationUpdate,
			withSubjects(userSubject("mine"), authn, unauthn), []rbacv1.Subject{unauthn}, false},
		{"other roleRef recreated", otherRole, OperationRecreate, desired, nil, false},
		{"protected", protected, OperationNone, protected, []rbacv1.Subject{unauthn}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Reconcile(tc.existing, desired)
			if err != nil {
				t.Fatal(err)
			}
			if r.Operation != tc.op || r.Protected != tc.protected {
				t.Errorf("operation %s, protected %v; want %s, %v", r.Operation, r.Protected, tc.op, tc.protected)
			}
			if !equality.Semantic.DeepEqual(r.Object, tc.want) {
				t.Errorf("object\n%+v\nwant\n%+v", r.Object, tc.want)
			}
			if !equality.Semantic.DeepEqual(r.MissingSubjects, tc.missing) {
				t.Errorf("missing %+v, want %+v", r.MissingSubjects, tc.missing)
			}
		})
	}
	if _, err := Reconcile[*rbacv1.ClusterRoleBinding](desired, nil); err == nil {
		t.Error("no error without desired binding")
	}
}

// TestReconcileRetiredNodeRule: the stored system:node of an earlier version, which listed
// Secrets, ConfigMaps and volumes everywhere, loses that rule; a rule a user added stays.
func TestReconcileRetiredNodeRule(t *testing.T) {
	var desired *rbacv1.ClusterRole
	for _, cr := range ComponentClusterRoles() {
		if cr.Name == nodeRoleName {
			desired = cr.DeepCopy()
		}
	}
	if desired == nil {
		t.Fatal("no system:node role")
	}
	userRule := coreRule([]string{"get"}, "secrets")
	stored := desired.DeepCopy()
	stored.Rules = append(append(stored.Rules, retiredRules[nodeRoleName]...), userRule)
	storedCopy := stored.DeepCopy()
	r, err := Reconcile(stored, desired)
	if err != nil {
		t.Fatal(err)
	}
	if r.Operation != OperationUpdate {
		t.Fatalf("operation %s, want update", r.Operation)
	}
	want := append(desired.DeepCopy().Rules, userRule)
	if !equality.Semantic.DeepEqual(r.Object.Rules, want) {
		t.Errorf("rules\n%+v\nwant\n%+v", r.Object.Rules, want)
	}
	if !reflect.DeepEqual(stored, storedCopy) {
		t.Error("stored role modified")
	}
	// Once trimmed, nothing to do.
	if r, err := Reconcile(r.Object, desired); err != nil || r.Operation != OperationNone {
		t.Errorf("second reconcile: %v %v", r.Operation, err)
	}
	// A protected role keeps the rule.
	stored.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "false"}
	if r, err := Reconcile(stored, desired); err != nil || r.Operation != OperationNone || len(r.Object.Rules) != len(stored.Rules) {
		t.Errorf("protected: %v %d rules %v", r.Operation, len(r.Object.Rules), err)
	}
}
