package validation

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// From the Kubernetes RBAC documentation, defaulted (subjects' and roleRef's apiGroup).
const (
	roleYAML = `
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  namespace: default
  name: pod-reader
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "watch", "list"]
`
	clusterRoleYAML = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: monitoring
aggregationRule:
  clusterRoleSelectors:
  - matchLabels:
      rbac.example.com/aggregate-to-monitoring: "true"
rules:
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "watch", "list"]
- nonResourceURLs: ["/healthz", "/healthz/*"]
  verbs: ["get", "post"]
`
	roleBindingYAML = `
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: read-pods
  namespace: default
subjects:
- kind: User
  name: jane
  apiGroup: rbac.authorization.k8s.io
- kind: Group
  name: "system:serviceaccounts:qa"
  apiGroup: rbac.authorization.k8s.io
- kind: ServiceAccount
  name: default
roleRef:
  kind: Role
  name: pod-reader
  apiGroup: rbac.authorization.k8s.io
`
	clusterRoleBindingYAML = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: read-secrets-global
subjects:
- kind: Group
  name: manager
  apiGroup: rbac.authorization.k8s.io
- kind: ServiceAccount
  name: prometheus
  namespace: monitoring
roleRef:
  kind: ClusterRole
  name: secret-reader
  apiGroup: rbac.authorization.k8s.io
`
)

func TestRBACAndWebhookAndCSRValidatorsRegistered(t *testing.T) {
	for _, gk := range []schema.GroupKind{
		{Group: "rbac.authorization.k8s.io", Kind: "Role"}, {Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"},
		{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}, {Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"},
		{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"},
		{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"},
		{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"},
	} {
		f, ok := For(gk, DefaultOptions())
		if !ok || f.Create == nil || f.Update == nil {
			t.Errorf("%s: no Create/Update validation", gk)
		}
	}
	f, _ := For(schema.GroupKind{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}, DefaultOptions())
	if f.StatusUpdate == nil {
		t.Errorf("CertificateSigningRequest: no status validation")
	}
}

func TestValidateRole(t *testing.T) {
	checkErrs(t, ValidateRole(fixture[rbacv1.Role](t, roleYAML, true)), none())
	cases := []struct {
		name   string
		mutate func(*rbacv1.Role)
		want   []string
	}{
		{"no rules is fine", func(r *rbacv1.Role) { r.Rules = nil }, none()},
		{"no verbs", func(r *rbacv1.Role) { r.Rules[0].Verbs = nil }, errs(req("rules[0].verbs"))},
		{"no apiGroups", func(r *rbacv1.Role) { r.Rules[0].APIGroups = nil }, errs(req("rules[0].apiGroups"))},
		{"no resources", func(r *rbacv1.Role) { r.Rules[0].Resources = nil }, errs(req("rules[0].resources"))},
		{"nothing but verbs", func(r *rbacv1.Role) { r.Rules[0].APIGroups, r.Rules[0].Resources = nil, nil },
			errs(req("rules[0].apiGroups"), req("rules[0].resources"))},
		{"nonResourceURLs in a namespaced role", func(r *rbacv1.Role) {
			r.Rules = append(r.Rules, rbacv1.PolicyRule{NonResourceURLs: []string{"/healthz"}, Verbs: []string{"get"}})
		}, errs(inv("rules[1].nonResourceURLs"))},
		{"nonResourceURLs and resources", func(r *rbacv1.Role) { r.Rules[0].NonResourceURLs = []string{"/healthz"} },
			errs(inv("rules[0].nonResourceURLs"), inv("rules[0].nonResourceURLs"))},
		{"name with a slash", func(r *rbacv1.Role) { r.Name = "a/b" }, errs(inv("metadata.name"))},
		{"name with upper case and colons is fine", func(r *rbacv1.Role) { r.Name = "system:Controller:x" }, none()},
		{"name ..", func(r *rbacv1.Role) { r.Name = ".." }, errs(inv("metadata.name"))},
		{"no namespace", func(r *rbacv1.Role) { r.Namespace = "" }, errs(req("metadata.namespace"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := fixture[rbacv1.Role](t, roleYAML, true)
			c.mutate(r)
			checkErrs(t, ValidateRole(r), c.want)
		})
	}
	old := fixture[rbacv1.Role](t, roleYAML, true)
	r := old.DeepCopy()
	r.Rules[0].Verbs = []string{"*"}
	checkErrs(t, ValidateRoleUpdate(r, old), none())
	r.Name = "other"
	checkErrs(t, ValidateRoleUpdate(r, old), errs(inv("metadata.name")))
}

func TestValidateClusterRole(t *testing.T) {
	checkErrs(t, ValidateClusterRole(fixture[rbacv1.ClusterRole](t, clusterRoleYAML, false)), none())
	cases := []struct {
		name   string
		mutate func(*rbacv1.ClusterRole)
		want   []string
	}{
		{"nonResourceURLs without verbs", func(r *rbacv1.ClusterRole) { r.Rules[1].Verbs = nil }, errs(req("rules[1].verbs"))},
		{"nonResourceURLs with resourceNames", func(r *rbacv1.ClusterRole) { r.Rules[1].ResourceNames = []string{"x"} },
			errs(inv("rules[1].nonResourceURLs"))},
		{"aggregationRule without selectors", func(r *rbacv1.ClusterRole) { r.AggregationRule.ClusterRoleSelectors = nil },
			errs(req("aggregationRule.clusterRoleSelectors"))},
		{"aggregationRule bad selector", func(r *rbacv1.ClusterRole) {
			r.AggregationRule.ClusterRoleSelectors[0].MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}
		}, errs(inv("aggregationRule.clusterRoleSelectors[0].matchExpressions[0].operator"), inv("aggregationRule.clusterRoleSelectors[0]"))},
		{"namespace set", func(r *rbacv1.ClusterRole) { r.Namespace = "default" }, errs(forb("metadata.namespace"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := fixture[rbacv1.ClusterRole](t, clusterRoleYAML, false)
			c.mutate(r)
			checkErrs(t, ValidateClusterRole(r), c.want)
		})
	}
	t.Run("update tolerates invalid label values the stored role has", func(t *testing.T) {
		old := fixture[rbacv1.ClusterRole](t, clusterRoleYAML, false)
		old.AggregationRule.ClusterRoleSelectors[0].MatchExpressions = []metav1.LabelSelectorRequirement{
			{Key: "a", Operator: metav1.LabelSelectorOpIn, Values: []string{"not valid!"}}}
		r := old.DeepCopy()
		r.Rules = r.Rules[:1]
		// As upstream: the value check is relaxed, the selector conversion still fails.
		checkErrs(t, ValidateClusterRoleUpdate(r, old), errs(inv("aggregationRule.clusterRoleSelectors[0]")))
		checkErrs(t, ValidateClusterRole(r), errs(inv("aggregationRule.clusterRoleSelectors[0].matchExpressions[0].values[0]"),
			inv("aggregationRule.clusterRoleSelectors[0]")))
	})
}

func TestValidateRoleBinding(t *testing.T) {
	checkErrs(t, ValidateRoleBinding(fixture[rbacv1.RoleBinding](t, roleBindingYAML, true)), none())
	cases := []struct {
		name   string
		mutate func(*rbacv1.RoleBinding)
		want   []string
	}{
		{"ClusterRole ref", func(b *rbacv1.RoleBinding) { b.RoleRef.Kind = "ClusterRole" }, none()},
		{"roleRef kind Group", func(b *rbacv1.RoleBinding) { b.RoleRef.Kind = "Group" }, errs(nsup("roleRef.kind"))},
		{"roleRef other apiGroup", func(b *rbacv1.RoleBinding) { b.RoleRef.APIGroup = "example.com" }, errs(nsup("roleRef.apiGroup"))},
		{"roleRef without name", func(b *rbacv1.RoleBinding) { b.RoleRef.Name = "" }, errs(req("roleRef.name"))},
		{"roleRef name with %", func(b *rbacv1.RoleBinding) { b.RoleRef.Name = "a%b" }, errs(inv("roleRef.name"))},
		{"subject without name", func(b *rbacv1.RoleBinding) { b.Subjects[0].Name = "" }, errs(req("subjects[0].name"))},
		{"subject kind Robot", func(b *rbacv1.RoleBinding) { b.Subjects[0].Kind = "Robot" }, errs(nsup("subjects[0].kind"))},
		{"user with core apiGroup", func(b *rbacv1.RoleBinding) { b.Subjects[0].APIGroup = "" }, errs(nsup("subjects[0].apiGroup"))},
		{"service account with rbac apiGroup", func(b *rbacv1.RoleBinding) { b.Subjects[2].APIGroup = rbacv1.GroupName },
			errs(nsup("subjects[2].apiGroup"))},
		{"service account bad name", func(b *rbacv1.RoleBinding) { b.Subjects[2].Name = "Default_SA" }, errs(inv("subjects[2].name"))},
		{"user name is free-form", func(b *rbacv1.RoleBinding) { b.Subjects[0].Name = "Jane Doe <jane@example.com>" }, none()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := fixture[rbacv1.RoleBinding](t, roleBindingYAML, true)
			c.mutate(b)
			checkErrs(t, ValidateRoleBinding(b), c.want)
		})
	}
	t.Run("roleRef is immutable", func(t *testing.T) {
		old := fixture[rbacv1.RoleBinding](t, roleBindingYAML, true)
		b := old.DeepCopy()
		b.Subjects = b.Subjects[:1]
		checkErrs(t, ValidateRoleBindingUpdate(b, old), none())
		b.RoleRef.Name = "pod-writer"
		checkErrs(t, ValidateRoleBindingUpdate(b, old), errs(inv("roleRef")))
	})
}

func TestValidateClusterRoleBinding(t *testing.T) {
	checkErrs(t, ValidateClusterRoleBinding(fixture[rbacv1.ClusterRoleBinding](t, clusterRoleBindingYAML, false)), none())
	cases := []struct {
		name   string
		mutate func(*rbacv1.ClusterRoleBinding)
		want   []string
	}{
		{"Role ref", func(b *rbacv1.ClusterRoleBinding) { b.RoleRef.Kind = "Role" }, errs(nsup("roleRef.kind"))},
		{"service account without namespace", func(b *rbacv1.ClusterRoleBinding) { b.Subjects[1].Namespace = "" },
			errs(req("subjects[1].namespace"))},
		{"group with no apiGroup (not defaulted)", func(b *rbacv1.ClusterRoleBinding) { b.Subjects[0].APIGroup = "" },
			errs(nsup("subjects[0].apiGroup"))},
		{"no subjects is fine", func(b *rbacv1.ClusterRoleBinding) { b.Subjects = nil }, none()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := fixture[rbacv1.ClusterRoleBinding](t, clusterRoleBindingYAML, false)
			c.mutate(b)
			checkErrs(t, ValidateClusterRoleBinding(b), c.want)
		})
	}
	old := fixture[rbacv1.ClusterRoleBinding](t, clusterRoleBindingYAML, false)
	b := old.DeepCopy()
	b.RoleRef.Name = "cluster-admin"
	got := ValidateClusterRoleBindingUpdate(b, old)
	checkErrs(t, got, errs(inv("roleRef")))
	if len(got) == 1 && got[0].Detail != "cannot change roleRef" {
		t.Errorf("detail = %q, want upstream's \"cannot change roleRef\"", got[0].Detail)
	}
}
