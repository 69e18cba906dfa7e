package defaults

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestRBACWebhookDefaults(t *testing.T) {
	cases := []defaultCase{
		{
			name: "rolebinding: roleRef and subject apiGroups",
			in: fromYAML(t, `
metadata: {name: read-pods, namespace: default}
subjects:
- {kind: User, name: jane}
- {kind: Group, name: devs}
- {kind: ServiceAccount, name: default}
- {kind: Robot, name: r2}
roleRef: {kind: Role, name: pod-reader}
`, &rbacv1.RoleBinding{}),
			want: fromYAML(t, `
metadata: {name: read-pods, namespace: default}
subjects:
- {kind: User, name: jane, apiGroup: rbac.authorization.k8s.io}
- {kind: Group, name: devs, apiGroup: rbac.authorization.k8s.io}
- {kind: ServiceAccount, name: default}
- {kind: Robot, name: r2}
roleRef: {kind: Role, name: pod-reader, apiGroup: rbac.authorization.k8s.io}
`, &rbacv1.RoleBinding{}),
		},
		{
			name: "clusterrolebinding",
			in: fromYAML(t, `
subjects: [{kind: Group, name: manager}]
roleRef: {kind: ClusterRole, name: secret-reader}
`, &rbacv1.ClusterRoleBinding{}),
			want: fromYAML(t, `
subjects: [{kind: Group, name: manager, apiGroup: rbac.authorization.k8s.io}]
roleRef: {kind: ClusterRole, name: secret-reader, apiGroup: rbac.authorization.k8s.io}
`, &rbacv1.ClusterRoleBinding{}),
		},
		{
			name: "clusterrole: nothing",
			in:   fromYAML(t, `{rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]}`, &rbacv1.ClusterRole{}),
			want: fromYAML(t, `{rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]}`, &rbacv1.ClusterRole{}),
		},
		{
			name: "validatingwebhookconfiguration",
			in: fromYAML(t, `
metadata: {name: pod-policy.example.com}
webhooks:
- name: pod-policy.example.com
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  clientConfig:
    service: {namespace: example-namespace, name: example-service}
  admissionReviewVersions: [v1]
  sideEffects: None
- name: url.example.com
  clientConfig: {url: "https://example.com/validate"}
  admissionReviewVersions: [v1]
  sideEffects: None
`, &admissionregistrationv1.ValidatingWebhookConfiguration{}),
			want: fromYAML(t, `
metadata: {name: pod-policy.example.com}
webhooks:
- name: pod-policy.example.com
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods], scope: "*"}
  clientConfig:
    service: {namespace: example-namespace, name: example-service, port: 443}
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  matchPolicy: Equivalent
  namespaceSelector: {}
  objectSelector: {}
  timeoutSeconds: 10
- name: url.example.com
  clientConfig: {url: "https://example.com/validate"}
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  matchPolicy: Equivalent
  namespaceSelector: {}
  objectSelector: {}
  timeoutSeconds: 10
`, &admissionregistrationv1.ValidatingWebhookConfiguration{}),
		},
		{
			name: "mutatingwebhookconfiguration: reinvocationPolicy Never",
			in: fromYAML(t, `
webhooks:
- name: sidecar.example.com
  clientConfig: {url: "https://example.com/mutate"}
`, &admissionregistrationv1.MutatingWebhookConfiguration{}),
			want: fromYAML(t, `
webhooks:
- name: sidecar.example.com
  clientConfig: {url: "https://example.com/mutate"}
  failurePolicy: Fail
  matchPolicy: Equivalent
  namespaceSelector: {}
  objectSelector: {}
  timeoutSeconds: 10
  reinvocationPolicy: Never
`, &admissionregistrationv1.MutatingWebhookConfiguration{}),
		},
		{
			name: "certificatesigningrequest: nothing (v1 requires signerName)",
			in:   fromYAML(t, `{spec: {request: Zm9v, usages: [client auth]}}`, &certificatesv1.CertificateSigningRequest{}),
			want: fromYAML(t, `{spec: {request: Zm9v, usages: [client auth]}}`, &certificatesv1.CertificateSigningRequest{}),
		},
		{
			name: "rolebinding list: every item is defaulted",
			in:   &rbacv1.RoleBindingList{Items: []rbacv1.RoleBinding{{RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "r"}}}},
			want: fromYAML(t, `{items: [{roleRef: {kind: Role, name: r, apiGroup: rbac.authorization.k8s.io}}]}`, &rbacv1.RoleBindingList{}),
		},
	}
	checkDefaults(t, cases)
}

// TestRBACWebhookExplicitValuesKept defaults objects that set every defaulted field to a
// non-default value and expects no change.
func TestRBACWebhookExplicitValuesKept(t *testing.T) {
	objs := []runtime.Object{
		fromYAML(t, `
subjects: [{kind: User, name: jane, apiGroup: example.com}]
roleRef: {kind: Role, name: r, apiGroup: example.com}
`, &rbacv1.RoleBinding{}),
		fromYAML(t, `
webhooks:
- name: a.example.com
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods], scope: Namespaced}]
  clientConfig:
    service: {namespace: n, name: s, port: 8443}
  failurePolicy: Ignore
  matchPolicy: Exact
  namespaceSelector: {matchLabels: {a: b}}
  objectSelector: {matchLabels: {c: d}}
  timeoutSeconds: 30
  reinvocationPolicy: IfNeeded
`, &admissionregistrationv1.MutatingWebhookConfiguration{}),
	}
	checkExplicitValuesKept(t, objs)
}
