package apiserver

import (
	"fmt"
	"net/http"
	"sync"

	restful "github.com/emicklei/go-restful/v3"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/apiserver/pkg/server/routes"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/common/restfuladapter"
	"k8s.io/kube-openapi/pkg/handler"
)

// installOpenAPI publishes the OpenAPI documents of s, a server completed with
// SkipOpenAPIInstallation after every API group is installed: /openapi/v3 as the generic server
// publishes it, and /openapi/v2 built on its first request. The generic server builds the v2
// document when it starts and keeps it (6-9 MiB of every host's live heap, measured with 50
// pods); only clients older than v3 and `kubectl explain --output plaintext-openapiv2` read
// it, through the aggregator, which merges it on request too. The v3 document cannot wait:
// the aggregator reads its index, which names every group's hash, as it starts.
func installOpenAPI(s *genericapiserver.GenericAPIServer, v2 *common.Config, v3 *common.OpenAPIV3Config) {
	s.Handler.NonGoRestfulMux.Handle("/openapi/v2", &openAPIV2{services: s.Handler.GoRestfulContainer, config: v2})
	s.OpenAPIV3VersionedService = routes.OpenAPI{V3Config: v3}.InstallV3(s.Handler.GoRestfulContainer, s.Handler.NonGoRestfulMux)
}

// openAPIV2 serves /openapi/v2 of services, building the document (as
// routes.OpenAPI.InstallV2 does) on the first request; it serves the same one after.
type openAPIV2 struct {
	services *restful.Container
	config   *common.Config

	once    sync.Once
	handler http.Handler
	err     error
}

func (o *openAPIV2) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.once.Do(func() {
		spec, err := builder.BuildOpenAPISpecFromRoutes(restfuladapter.AdaptWebServices(o.services.RegisteredWebServices()), o.config)
		if err != nil {
			o.err = fmt.Errorf("build the OpenAPI v2 document: %w", err)
			return
		}
		spec.Definitions = handler.PruneDefaults(spec.Definitions)
		m := mux.NewPathRecorderMux("openapi-v2")
		handler.NewOpenAPIService(spec).RegisterOpenAPIVersionedService("/openapi/v2", m)
		o.handler = m
	})
	if o.err != nil {
		http.Error(w, o.err.Error(), http.StatusInternalServerError)
		return
	}
	o.handler.ServeHTTP(w, r)
}
