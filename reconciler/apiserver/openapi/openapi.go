package openapi

import (
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/kube-openapi/pkg/common"
)

// Title is the title of the OpenAPI documents the server publishes.
const Title = "Flotilla"

// Definitions returns the generated definitions of every served type.
func Definitions() common.GetOpenAPIDefinitions {
	return GetOpenAPIDefinitions
}

// Namer names definitions by the types' OpenAPIModelName and tags the definition of
// every kind with the x-kubernetes-group-version-kind extension the SSA type
// converter and kubectl look kinds up by.
//
// The scheme must be complete: the namer takes a snapshot. Kinds registered under
// runtime.APIVersionInternal are left out: we register the versioned Go types a
// second time as internal, so they would otherwise be advertised as
// "<group>/__internal" in the extension of the versioned definition.
//
// The other schemes (apiextensions', the aggregator's) have internal types of their own and
// are used as they are.
func Namer(scheme *runtime.Scheme, others ...*runtime.Scheme) *openapinamer.DefinitionNamer {
	return openapinamer.NewDefinitionNamer(append([]*runtime.Scheme{versionedOnly(scheme)}, others...)...)
}

// Configure sets cfg.OpenAPIConfig (/openapi/v2) and cfg.OpenAPIV3Config (/openapi/v3,
// and the SSA type converter) from the generated definitions. Info.Version is left
// for cfg.Complete() to fill from cfg.EffectiveVersion.
func Configure(cfg *genericapiserver.Config, scheme *runtime.Scheme) {
	namer := Namer(scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(GetOpenAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title = Title
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(GetOpenAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title = Title
}

// versionedOnly copies the versioned kinds of scheme into a new scheme.
func versionedOnly(scheme *runtime.Scheme) *runtime.Scheme {
	out := runtime.NewScheme()
	for gvk, t := range scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal {
			continue
		}
		obj, ok := reflect.New(t).Interface().(runtime.Object)
		if !ok {
			continue
		}
		out.AddKnownTypeWithName(gvk, obj)
	}
	return out
}
