package apiserver

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// policyDeps is what the ValidatingAdmissionPolicy plugin needs besides the informers: a
// dynamic client for params of any kind, a REST mapper that follows CRDs, and the channel
// closed when the server has drained its requests.
type policyDeps struct {
	dynamic dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	drained <-chan struct{}
}

// newPolicyDeps builds policyDeps over the loopback client. The REST mapper reads discovery
// lazily and is reset every 30 s (as kube-apiserver's admission initializer does), so kinds
// of CustomResourceDefinitions created later are matched.
func newPolicyDeps(loopback *restclient.Config, drained <-chan struct{}) (policyDeps, error) {
	dyn, err := dynamic.NewForConfig(loopback)
	if err != nil {
		return policyDeps{}, fmt.Errorf("dynamic client for admission policies: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(loopback)
	if err != nil {
		return policyDeps{}, fmt.Errorf("discovery client for admission policies: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	go wait.Until(mapper.Reset, 30*time.Second, drained)
	return policyDeps{dynamic: dyn, mapper: mapper, drained: drained}, nil
}

// validatingPolicyPlugin is k8s.io/apiserver's ValidatingAdmissionPolicy plugin: every
// ValidatingAdmissionPolicy with its bindings is evaluated on each write it matches
// (matchConstraints, matchConditions, paramKind/paramRef, variables, validations with
// message or messageExpression, validationActions Deny/Warn/Audit, failurePolicy,
// auditAnnotations), with the Kubernetes CEL libraries and the request's authorizer.
func validatingPolicyPlugin(f informers.SharedInformerFactory, client kubernetes.Interface, authz authorizer.Authorizer, deps policyDeps) (admission.Interface, error) {
	p, err := validating.NewPlugin(nil)
	if err != nil {
		return nil, fmt.Errorf("ValidatingAdmissionPolicy admission: %w", err)
	}
	p.SetExternalKubeInformerFactory(f)
	p.SetExternalKubeClientSet(client)
	p.SetDynamicClient(deps.dynamic)
	p.SetRESTMapper(deps.mapper)
	p.SetUnconditionalAuthorizer(authz)
	p.SetDrainedNotification(deps.drained)
	if err := p.ValidateInitialization(); err != nil {
		return nil, fmt.Errorf("ValidatingAdmissionPolicy admission: %w", err)
	}
	return p, nil
}
