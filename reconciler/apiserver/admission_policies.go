package apiserver

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// policyDeps is what the ValidatingAdmissionPolicy and MutatingAdmissionPolicy plugins need
// besides the informers: a dynamic client for params of any kind, a REST mapper that follows
// CRDs, and the channel closed when the server has drained its requests.
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
	if err := initPolicyPlugin(p, f, client, authz, deps); err != nil {
		return nil, fmt.Errorf("ValidatingAdmissionPolicy admission: %w", err)
	}
	return p, nil
}

// policyPlugin is what the Validating and MutatingAdmissionPolicy plugins share (both are
// k8s.io/apiserver's generic policy plugin).
type policyPlugin interface {
	SetExternalKubeInformerFactory(informers.SharedInformerFactory)
	SetExternalKubeClientSet(kubernetes.Interface)
	SetDynamicClient(dynamic.Interface)
	SetRESTMapper(meta.RESTMapper)
	SetUnconditionalAuthorizer(authorizer.UnconditionalAuthorizer)
	SetDrainedNotification(<-chan struct{})
	ValidateInitialization() error
}

// initPolicyPlugin gives p its informers, clients, REST mapper and authorizer and starts it.
// ValidateInitialization creates the policy and binding informers on f, so they start with
// the other shared informers.
func initPolicyPlugin(p policyPlugin, f informers.SharedInformerFactory, client kubernetes.Interface, authz authorizer.Authorizer, deps policyDeps) error {
	p.SetExternalKubeInformerFactory(serverLifetimeFactory{SharedInformerFactory: f, stop: deps.drained})
	p.SetExternalKubeClientSet(client)
	p.SetDynamicClient(deps.dynamic)
	p.SetRESTMapper(deps.mapper)
	p.SetUnconditionalAuthorizer(authz)
	p.SetDrainedNotification(deps.drained)
	return p.ValidateInitialization()
}

// mutatingPolicyPlugin is k8s.io/apiserver's MutatingAdmissionPolicy plugin: every
// MutatingAdmissionPolicy with its bindings is applied on each CREATE, UPDATE or CONNECT it
// matches (matchConstraints, matchConditions, paramKind/paramRef, variables, mutations of
// patchType ApplyConfiguration or JSONPatch, failurePolicy), with the Kubernetes CEL libraries
// and the request's authorizer. Apply configurations are merged with the schemas the server
// publishes at /openapi/v3, which the plugin reads through client.
//
// The plugin is off unless the MutatingAdmissionPolicy feature gate is on (GA and on by default
// in this k8s.io/apiserver): it reads the process's gate, and a server that stores these
// policies refuses to start rather than silently not applying them.
func mutatingPolicyPlugin(f informers.SharedInformerFactory, client kubernetes.Interface, authz authorizer.Authorizer, deps policyDeps) (admission.Interface, error) {
	p, err := mutating.NewPlugin(nil)
	if err != nil {
		return nil, fmt.Errorf("MutatingAdmissionPolicy admission: %w", err)
	}
	if !utilfeature.DefaultFeatureGate.Enabled(features.MutatingAdmissionPolicy) {
		return nil, fmt.Errorf("MutatingAdmissionPolicy admission: the %s feature gate is off; MutatingAdmissionPolicies are served and must be applied, so leave the gate on", features.MutatingAdmissionPolicy)
	}
	p.InspectFeatureGates(utilfeature.DefaultFeatureGate)
	if err := initPolicyPlugin(p, f, client, authz, deps); err != nil {
		return nil, fmt.Errorf("MutatingAdmissionPolicy admission: %w", err)
	}
	return p, nil
}

// serverLifetimeFactory is the shared informer factory as the policy plugins see it: an
// informer they start runs until the server drains. The plugins start the informer of a
// built-in param kind (ConfigMap...) from the factory with a stop channel of their own, which
// they close when no policy uses that kind any more; the factory's informer stopped that way
// stays stopped (the factory starts each informer once), and a policy of that param kind
// created later would read its params with a request to the API on every write it matches.
type serverLifetimeFactory struct {
	informers.SharedInformerFactory
	stop <-chan struct{}
}

// Start starts the factory's informers not started yet, until the server drains.
func (f serverLifetimeFactory) Start(<-chan struct{}) { f.SharedInformerFactory.Start(f.stop) }
