package apiserver

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/compatibility"
	restclient "k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/openapi"
)

// newTestGenericConfig is the configuration of an in-process generic API server with the
// scheme and OpenAPI definitions of the real one; tests add authentication and APIs.
func newTestGenericConfig() (*runtime.Scheme, serializer.CodecFactory, *genericapiserver.Config) {
	scheme := NewScheme()
	codecs := serializer.NewCodecFactory(scheme)
	gc := genericapiserver.NewConfig(codecs)
	gc.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	gc.LoopbackClientConfig = &restclient.Config{}
	gc.ExternalAddress = "127.0.0.1:6443"
	namer := openapi.Namer(scheme)
	gc.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openapi.GetOpenAPIDefinitions, namer)
	gc.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openapi.GetOpenAPIDefinitions, namer)
	return scheme, codecs, gc
}
