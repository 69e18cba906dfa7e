package apiserver

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	apiextensionsoptions "k8s.io/apiextensions-apiserver/pkg/cmd/server/options"
	apiextensionsopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/informers"
	aggregatoropenapi "k8s.io/kube-aggregator/pkg/generated/openapi"
	"k8s.io/kube-openapi/pkg/common"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/openapi"
)

// The API is a chain of servers, as in kube-apiserver: the aggregator in front (APIServices,
// merged discovery and OpenAPI), then flotilla's own groups, then apiextensions
// (CustomResourceDefinitions and their custom resources), then a not-found handler. Every
// server of the chain shares the authentication, authorization, admission and etcd of the
// first; each has its own codecs and storage prefix-free REST options.

// definitions returns the OpenAPI definitions of every server of the chain.
func definitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	out := openapi.GetOpenAPIDefinitions(ref)
	for name, def := range apiextensionsopenapi.GetOpenAPIDefinitions(ref) {
		out[name] = def
	}
	for name, def := range aggregatoropenapi.GetOpenAPIDefinitions(ref) {
		if _, ok := out[name]; !ok {
			out[name] = def
		}
	}
	return out
}

// extensionsConfig derives the apiextensions server's configuration from ours: the same
// serving, authentication, authorization and admission, its own scheme, codecs and storage
// (CRDs in /registry/apiextensions.k8s.io, custom resources in /registry/<group>/<plural>).
func extensionsConfig(gc genericapiserver.Config, etcd genericoptions.EtcdOptions, shared *sharedEtcd, f informers.SharedInformerFactory,
	services webhook.ServiceResolver, auth webhook.AuthenticationInfoResolverWrapper) (*apiextensionsapiserver.Config, error) {
	gc.PostStartHooks = map[string]genericapiserver.PostStartHookConfigEntry{}
	gc.RESTOptionsGetter = nil
	etcd.StorageConfig.Codec = apiextensionsapiserver.Codecs.LegacyCodec(apiextensionsv1.SchemeGroupVersion)
	etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(apiextensionsv1.SchemeGroupVersion)
	etcd.SkipHealthEndpoints = true
	if err := etcd.ApplyTo(&gc); err != nil {
		return nil, fmt.Errorf("configure CustomResourceDefinition storage: %w", err)
	}
	gc.RESTOptionsGetter = shared.options(gc.RESTOptionsGetter, etcd)
	resources := serverstorage.NewResourceConfig()
	resources.EnableVersions(apiextensionsv1.SchemeGroupVersion)
	gc.MergedResourceConfig = resources

	// Custom resources are stored as JSON through their own REST options.
	crdEtcd := etcd
	crdEtcd.StorageConfig.Codec = nil
	return &apiextensionsapiserver.Config{
		GenericConfig: &genericapiserver.RecommendedConfig{Config: gc, SharedInformerFactory: f},
		ExtraConfig: apiextensionsapiserver.ExtraConfig{
			CRDRESTOptionsGetter: shared.options(newCRDRESTOptionsGetter(crdEtcd, gc), crdEtcd),
			// Every host serves the API, but clients of a site talk to one of them and
			// flotilla's own writers use their host's server: a CRD is Established as soon
			// as this server serves it (with more than one, apiextensions waits 5 s first).
			MasterCount:         1,
			ServiceResolver:     services,
			AuthResolverWrapper: auth,
		},
	}, nil
}

// newCRDRESTOptionsGetter returns the REST options of custom resources: stored as JSON
// (unstructured), with the watch cache sizes of the server's default.
func newCRDRESTOptionsGetter(etcd genericoptions.EtcdOptions, gc genericapiserver.Config) genericregistry.RESTOptionsGetter {
	return apiextensionsoptions.NewCRDRESTOptionsGetter(etcd, gc.ResourceTransformers, gc.StorageObjectCountTracker)
}
