package apiserver

import (
	"context"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"
)

// unenforcedKind is a kind the API stores, as every Kubernetes API server does, but that nothing
// in flotilla carries out.
type unenforcedKind struct {
	resource schema.GroupResource
	kind     string
	// effect says what does not happen, completing "<Kind> is stored but not enforced by
	// flotilla: ".
	effect string
}

// unenforcedKinds lists the kinds whose creation and update are answered with a warning, so
// that `kubectl apply` prints "Warning: ResourceQuota is stored but not enforced by flotilla:
// ...". Remove an entry in the change that implements the kind.
var unenforcedKinds = []unenforcedKind{
	{corev1.Resource("resourcequotas"), "ResourceQuota",
		"no quota admission or quota controller runs, so objects are created whatever the quota allows and status.used is never filled"},
	{corev1.Resource("limitranges"), "LimitRange",
		"no LimitRanger admission runs, so pods get no default requests or limits from it and are not checked against its minimum and maximum"},
	{networkingv1.Resource("networkpolicies"), "NetworkPolicy",
		"pod traffic is not filtered: every pod can reach every other pod"},
	{rbacv1.Resource("roles"), "Role", rbacNotEnforced},
	{rbacv1.Resource("clusterroles"), "ClusterRole", rbacNotEnforced},
	{rbacv1.Resource("rolebindings"), "RoleBinding", rbacNotEnforced},
	{rbacv1.Resource("clusterrolebindings"), "ClusterRoleBinding", rbacNotEnforced},
	{certificatesv1.Resource("certificatesigningrequests"), "CertificateSigningRequest",
		"no signer runs, so an approved request is never issued a certificate"},
}

const rbacNotEnforced = "requests are not authorized by RBAC: every authenticated user may do everything"

// UnenforcedKindsPluginName names the admission plugin that warns about unenforced kinds.
const UnenforcedKindsPluginName = "FlotillaUnenforcedKinds"

// unenforcedKindsWarner is a validating admission plugin that adds the warning of
// unenforcedKinds to the CREATE and UPDATE of those kinds. It never refuses anything.
type unenforcedKindsWarner struct {
	*admission.Handler
}

var _ admission.ValidationInterface = (*unenforcedKindsWarner)(nil)

func newUnenforcedKindsWarner() *unenforcedKindsWarner {
	return &unenforcedKindsWarner{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// Validate implements admission.ValidationInterface.
func (w *unenforcedKindsWarner) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil
	}
	for _, k := range unenforcedKinds {
		if a.GetResource().GroupResource() == k.resource {
			warning.AddWarning(ctx, "", k.kind+" is stored but not enforced by flotilla: "+k.effect)
		}
	}
	return nil
}
