package apiserver

import (
	"fmt"
	"net/url"

	"go.opentelemetry.io/otel/trace/noop"

	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
)

// webhookDeps is how admission webhooks (and CRD conversion webhooks) reach their servers:
// Services of the site resolve to one of their ready endpoints, and the API server calls
// them with no credentials of its own unless a kubeconfig says otherwise.
type webhookDeps struct {
	services webhook.ServiceResolver
	auth     webhook.AuthenticationInfoResolverWrapper
}

// webhookPlugins returns the MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins of
// k8s.io/apiserver, reading MutatingWebhookConfigurations and ValidatingWebhookConfigurations
// from the API server's informers. They honour failurePolicy, namespaceSelector,
// objectSelector, matchConditions, sideEffects on dry run, and timeoutSeconds as upstream.
func webhookPlugins(f informers.SharedInformerFactory, client kubernetes.Interface, deps webhookDeps) ([]admission.Interface, error) {
	mutator, err := mutating.NewMutatingWebhook(nil)
	if err != nil {
		return nil, fmt.Errorf("mutating admission webhook: %w", err)
	}
	validator, err := validating.NewValidatingAdmissionWebhook(nil)
	if err != nil {
		return nil, fmt.Errorf("validating admission webhook: %w", err)
	}
	for name, p := range map[string]interface {
		SetAuthenticationInfoResolverWrapper(webhook.AuthenticationInfoResolverWrapper)
		SetServiceResolver(webhook.ServiceResolver)
		SetExternalKubeClientSet(kubernetes.Interface)
		SetExternalKubeInformerFactory(informers.SharedInformerFactory)
		ValidateInitialization() error
	}{"MutatingAdmissionWebhook": mutator, "ValidatingAdmissionWebhook": validator} {
		if deps.auth != nil {
			p.SetAuthenticationInfoResolverWrapper(deps.auth)
		}
		if deps.services != nil {
			p.SetServiceResolver(deps.services)
		}
		p.SetExternalKubeClientSet(client)
		p.SetExternalKubeInformerFactory(f)
		if err := p.ValidateInitialization(); err != nil {
			return nil, fmt.Errorf("%s admission: %w", name, err)
		}
	}
	return []admission.Interface{mutator, validator}, nil
}

// newWebhookDeps resolves Services to a ready endpoint (pod IPs are routed from every host),
// and the kubernetes Service to this server's loopback address.
func newWebhookDeps(f informers.SharedInformerFactory, loopback *restclient.Config) (webhookDeps, error) {
	slices, err := proxy.NewEndpointSliceListerGetter(f.Discovery().V1().EndpointSlices().Lister())
	if err != nil {
		return webhookDeps{}, fmt.Errorf("endpoint slices for webhooks: %w", err)
	}
	self, err := url.Parse(loopback.Host)
	if err != nil {
		return webhookDeps{}, fmt.Errorf("loopback address %q: %w", loopback.Host, err)
	}
	resolver := aggregatorapiserver.NewLoopbackServiceResolver(
		aggregatorapiserver.NewEndpointServiceResolver(f.Core().V1().Services().Lister(), slices), self)
	auth := webhook.NewDefaultAuthenticationInfoResolverWrapper(nil, nil, loopback, noop.NewTracerProvider())
	return webhookDeps{services: resolver, auth: auth}, nil
}
