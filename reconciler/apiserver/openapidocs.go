package apiserver

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	restful "github.com/emicklei/go-restful/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/common/restfuladapter"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
)

// installOpenAPI publishes the OpenAPI documents of s, a server completed with
// SkipOpenAPIInstallation after every API group is installed: /openapi/v3 (installOpenAPIV3)
// and /openapi/v2 built on its first request. The generic server builds the v2 document when
// it starts and keeps it (6-9 MiB of every host's live heap, measured with 50 pods); only
// clients older than v3 and `kubectl explain --output plaintext-openapiv2` read it, through
// the aggregator, which merges it on request too. The v3 documents cannot wait: the aggregator
// reads their index, which names every group's hash, as it starts.
func installOpenAPI(s *genericapiserver.GenericAPIServer, v2 *common.Config, v3 *common.OpenAPIV3Config) error {
	s.Handler.NonGoRestfulMux.Handle("/openapi/v2", &openAPIV2{services: s.Handler.GoRestfulContainer, config: v2})
	service, err := installOpenAPIV3(s.Handler.GoRestfulContainer, s.Handler.NonGoRestfulMux, v3)
	if err != nil {
		return err
	}
	s.OpenAPIV3VersionedService = service
	return nil
}

// installOpenAPIV3 publishes /openapi/v3 on mux, one document for each group version of
// services, as routes.OpenAPI.InstallV3 does, but keeps only each document's JSON: the
// handler keeps the document it was given for as long as it serves it, though it reads it
// only once, to marshal it (its protobuf form is made from the JSON, and its hash is that of
// the JSON). Each document is marshalled here, then emptied. Once every group is built,
// config's definitions are let go too; the apiextensions and aggregator servers build their
// groups' documents from config.GetDefinitions again. With forgetOpenAPIModels, an API server
// just started keeps some 10 MiB less live heap (47.5 MiB against 37.6, measured in this
// package's test server).
func installOpenAPIV3(services *restful.Container, mux *mux.PathRecorderMux, config *common.OpenAPIV3Config) (*handler3.OpenAPIService, error) {
	service := handler3.NewOpenAPIService()
	if err := service.RegisterOpenAPIV3VersionedService("/openapi/v3", mux); err != nil {
		return nil, fmt.Errorf("serve /openapi/v3: %w", err)
	}
	for _, ws := range services.RegisteredWebServices() {
		gv := strings.TrimPrefix(ws.RootPath(), "/")
		doc, err := builder3.BuildOpenAPISpecFromRoutes(restfuladapter.AdaptWebServices([]*restful.WebService{ws}), config)
		if err != nil {
			return nil, fmt.Errorf("build the OpenAPI v3 document of %s: %w", gv, err)
		}
		if gv, ok := groupVersionOfPath(gv); ok {
			scopeCrossRegisteredKinds(doc, gv)
		}
		service.UpdateGroupVersion(gv, doc)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/openapi/v3/"+gv, nil)
		req.Header.Set("Accept", "application/json")
		service.HandleGroupVersion(rec, req)
		if rec.Code != http.StatusOK || rec.Body.Len() == 0 {
			return nil, fmt.Errorf("marshal the OpenAPI v3 document of %s: status %d, %d bytes", gv, rec.Code, rec.Body.Len())
		}
		*doc = spec3.OpenAPI{}
	}
	config.Definitions = nil
	return service, nil
}

// forgetOpenAPIModels lets go of the OpenAPI models of infos' resources, which the generic
// server builds each group's field manager from as it installs the group, then keeps with the
// group's info (for its shutdown), though nothing reads them again: some 3 MB for the
// built-in groups, which also kept the definitions they share alive.
func forgetOpenAPIModels(infos ...*genericapiserver.APIGroupInfo) {
	for _, info := range infos {
		info.StaticOpenAPISpec = nil
	}
}

// scopeCrossRegisteredKinds narrows the group-version-kinds of the meta kinds registered in
// every group (WatchEvent and DeleteOptions) to those of doc's group version and core/v1, as
// the generic server does: otherwise each document lists them in every group of the server,
// and a client that maps a kind to its schema by them finds one schema in many documents.
func scopeCrossRegisteredKinds(doc *spec3.OpenAPI, gv schema.GroupVersion) {
	if doc.Components == nil {
		return
	}
	const extension = "x-kubernetes-group-version-kind"
	for _, schema := range doc.Components.Schemas {
		if schema == nil {
			continue
		}
		gvks, ok := schema.Extensions[extension].([]interface{})
		if !ok || len(gvks) <= 1 {
			continue
		}
		if first, ok := gvks[0].(map[string]interface{}); !ok || (first["kind"] != "WatchEvent" && first["kind"] != "DeleteOptions") {
			continue
		}
		var scoped []interface{}
		for _, item := range gvks {
			gvk, _ := item.(map[string]interface{})
			g, _ := gvk["group"].(string)
			v, _ := gvk["version"].(string)
			if (g == gv.Group && v == gv.Version) || (g == "" && v == "v1") {
				scoped = append(scoped, item)
			}
		}
		if len(scoped) > 0 {
			schema.Extensions[extension] = scoped
		} else {
			delete(schema.Extensions, extension)
		}
	}
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
