package defaults

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// registerRBACWebhooksCertificates registers the defaults of rbac.authorization.k8s.io/v1, the
// admissionregistration.k8s.io/v1 webhook configurations and certificates.k8s.io/v1.
func registerRBACWebhooksCertificates(scheme *runtime.Scheme) {
	// rbac.authorization.k8s.io/v1
	kind(scheme, &rbacv1.Role{}, &rbacv1.RoleList{}, func(l *rbacv1.RoleList) []rbacv1.Role { return l.Items }, noop[rbacv1.Role])
	kind(scheme, &rbacv1.ClusterRole{}, &rbacv1.ClusterRoleList{}, func(l *rbacv1.ClusterRoleList) []rbacv1.ClusterRole { return l.Items }, noop[rbacv1.ClusterRole])
	kind(scheme, &rbacv1.RoleBinding{}, &rbacv1.RoleBindingList{}, func(l *rbacv1.RoleBindingList) []rbacv1.RoleBinding { return l.Items }, setRoleBinding)
	kind(scheme, &rbacv1.ClusterRoleBinding{}, &rbacv1.ClusterRoleBindingList{},
		func(l *rbacv1.ClusterRoleBindingList) []rbacv1.ClusterRoleBinding { return l.Items }, setClusterRoleBinding)

	// admissionregistration.k8s.io/v1 webhooks
	kind(scheme, &admissionregistrationv1.ValidatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfigurationList{},
		func(l *admissionregistrationv1.ValidatingWebhookConfigurationList) []admissionregistrationv1.ValidatingWebhookConfiguration {
			return l.Items
		}, setValidatingWebhookConfiguration)
	kind(scheme, &admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.MutatingWebhookConfigurationList{},
		func(l *admissionregistrationv1.MutatingWebhookConfigurationList) []admissionregistrationv1.MutatingWebhookConfiguration {
			return l.Items
		}, setMutatingWebhookConfiguration)

	// certificates.k8s.io/v1 has no defaults.
	kind(scheme, &certificatesv1.CertificateSigningRequest{}, &certificatesv1.CertificateSigningRequestList{},
		func(l *certificatesv1.CertificateSigningRequestList) []certificatesv1.CertificateSigningRequest {
			return l.Items
		},
		noop[certificatesv1.CertificateSigningRequest])
}

// setRoleBinding fills roleRef.apiGroup and the subjects' apiGroup, as upstream's rbac/v1
// defaults do.
func setRoleBinding(b *rbacv1.RoleBinding) {
	if b.RoleRef.APIGroup == "" {
		b.RoleRef.APIGroup = rbacv1.GroupName
	}
	setSubjects(b.Subjects)
}

func setClusterRoleBinding(b *rbacv1.ClusterRoleBinding) {
	if b.RoleRef.APIGroup == "" {
		b.RoleRef.APIGroup = rbacv1.GroupName
	}
	setSubjects(b.Subjects)
}

// setSubjects gives User and Group subjects the rbac.authorization.k8s.io apiGroup;
// ServiceAccounts stay in the core group.
func setSubjects(subjects []rbacv1.Subject) {
	for i := range subjects {
		s := &subjects[i]
		if s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

// setValidatingWebhookConfiguration fills failurePolicy Fail, matchPolicy Equivalent, empty
// namespace and object selectors, timeoutSeconds 10, service port 443 and rule scope "*".
// sideEffects and admissionReviewVersions have no default in v1: they are required.
func setValidatingWebhookConfiguration(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
	for i := range c.Webhooks {
		w := &c.Webhooks[i]
		setWebhook(&w.FailurePolicy, &w.MatchPolicy, &w.NamespaceSelector, &w.ObjectSelector, &w.TimeoutSeconds, &w.ClientConfig, w.Rules)
	}
}

// setMutatingWebhookConfiguration is setValidatingWebhookConfiguration plus reinvocationPolicy
// Never.
func setMutatingWebhookConfiguration(c *admissionregistrationv1.MutatingWebhookConfiguration) {
	for i := range c.Webhooks {
		w := &c.Webhooks[i]
		setWebhook(&w.FailurePolicy, &w.MatchPolicy, &w.NamespaceSelector, &w.ObjectSelector, &w.TimeoutSeconds, &w.ClientConfig, w.Rules)
		if w.ReinvocationPolicy == nil {
			w.ReinvocationPolicy = new(admissionregistrationv1.NeverReinvocationPolicy)
		}
	}
}

func setWebhook(failurePolicy **admissionregistrationv1.FailurePolicyType, matchPolicy **admissionregistrationv1.MatchPolicyType,
	namespaceSelector, objectSelector **metav1.LabelSelector, timeoutSeconds **int32,
	cc *admissionregistrationv1.WebhookClientConfig, rules []admissionregistrationv1.RuleWithOperations) {
	if *failurePolicy == nil {
		*failurePolicy = new(admissionregistrationv1.Fail)
	}
	if *matchPolicy == nil {
		*matchPolicy = new(admissionregistrationv1.Equivalent)
	}
	if *namespaceSelector == nil {
		*namespaceSelector = &metav1.LabelSelector{}
	}
	if *objectSelector == nil {
		*objectSelector = &metav1.LabelSelector{}
	}
	if *timeoutSeconds == nil {
		*timeoutSeconds = new(int32(10))
	}
	if cc.Service != nil && cc.Service.Port == nil {
		cc.Service.Port = new(int32(443))
	}
	for i := range rules {
		if rules[i].Scope == nil {
			rules[i].Scope = new(admissionregistrationv1.AllScopes)
		}
	}
}
