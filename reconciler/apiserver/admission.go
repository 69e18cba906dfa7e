package apiserver

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
)

// admissionPlugins returns the admission chain, in the order the plugins run: NamespaceLifecycle
// first (nothing is created in a namespace being deleted), then flotilla's own plugins. Mutating
// plugins run before validating ones whatever their place here (admission.NewChainHandler runs
// every Admit before any Validate).
//
// MutatingAdmissionPolicy, ValidatingAdmissionPolicy, then the admission webhooks come last,
// as in kube-apiserver: they see the object after every built-in mutation and only when the
// built-in checks passed. So a write is mutated by the built-in plugins, then by the
// MutatingAdmissionPolicies, then by the mutating webhooks, and only then judged by the
// ValidatingAdmissionPolicies and the validating webhooks.
//
// Plan-only users are refused any write that is not a dry-run before anything else looks
// at it; the RBAC escalation checks run with the validating plugins. NodeRestriction (a
// host's identity writes only its own Node, Lease and pods) validates right after
// NamespaceLifecycle. CertificateApproval and CertificateSigning (admission_certificates.go)
// check approve and sign on the request's signer. StorageObjectInUseProtection
// (admission_storageprotection.go) puts the in-use finalizers on new claims and volumes.
// LimitRanger (admission_limitranger.go) defaults new pods' requests and limits from the
// namespace's LimitRanges and refuses pods and claims outside their bounds. ResourceQuota
// (admission_resourcequota.go) is the very last, as upstream: it charges the write to the
// namespace's quotas only once everything else has let it through.
func admissionPlugins(f informers.SharedInformerFactory, client kubernetes.Interface, hooks webhookDeps, policies policyDeps, rb *rbac.Authorizer, authz authorizer.Authorizer, podSecurity *podSecurityPlugin) ([]admission.Interface, error) {
	nsLifecycle, err := lifecycle.NewLifecycle(sets.New(SystemNamespaces...))
	if err != nil {
		return nil, err
	}
	nsLifecycle.SetExternalKubeClientSet(client)
	nsLifecycle.SetExternalKubeInformerFactory(f)
	if err := nsLifecycle.ValidateInitialization(); err != nil {
		return nil, fmt.Errorf("namespace lifecycle admission: %w", err)
	}
	plugins := []admission.Interface{
		newPlannerGuard(),
		nsLifecycle,
		newNodeRestriction(client),
		newLimitRanger(f),
		newServiceAccountAdmission(client, f),
		podSecurity,
		newNodeFeatureValidator(f),
		newRuntimeClassPlugin(f, client),
		newPriorityPlugin(f, client),
		newStorageProtection(),
		// CertificateApproval, CertificateSigning, CertificateSubjectRestriction (upstream's order).
		newCertificateApproval(authz),
		newCertificateSigning(authz),
		newCertificateSubjectRestriction(),
		newUnenforcedKindsWarner(),
		newPodSettingsWarner(),
		newRBACEscalationGuard(rb),
		newConnectCreateGuard(authz),
	}
	mutatingPolicies, err := mutatingPolicyPlugin(f, client, authz, policies)
	if err != nil {
		return nil, err
	}
	vap, err := validatingPolicyPlugin(f, client, authz, policies)
	if err != nil {
		return nil, err
	}
	webhooks, err := webhookPlugins(f, client, hooks)
	if err != nil {
		return nil, err
	}
	quotas, err := resourceQuotaPlugin(f, client, policies.drained)
	if err != nil {
		return nil, err
	}
	return append(append(append(plugins, mutatingPolicies, vap), webhooks...), quotas), nil
}

// reinvokingChain runs the mutating plugins of chain a second time when a mutating webhook or
// MutatingAdmissionPolicy of reinvocationPolicy IfNeeded asked for it (another one changed
// the object after it ran), as kube-apiserver's admission chain does: the built-in plugins
// run again too, and only the webhooks and policies that asked are called again. (k8s.io/
// apiserver builds this wrapper only for chains made from its plugin registry.)
type reinvokingChain struct{ admission.Interface }

// Admit runs the chain's mutations, then once more if a plugin asked to be reinvoked.
func (c reinvokingChain) Admit(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	m, ok := c.Interface.(admission.MutationInterface)
	if !ok {
		return nil
	}
	if err := m.Admit(ctx, a, o); err != nil {
		return err
	}
	if rc := a.GetReinvocationContext(); rc.ShouldReinvoke() {
		rc.SetIsReinvoke()
		return m.Admit(ctx, a, o)
	}
	return nil
}

// Validate runs the chain's validations.
func (c reinvokingChain) Validate(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	if v, ok := c.Interface.(admission.ValidationInterface); ok {
		return v.Validate(ctx, a, o)
	}
	return nil
}
