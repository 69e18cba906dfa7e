package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	restful "github.com/emicklei/go-restful/v3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// The OpenAPI documents the chain publishes: /openapi/v2 (built on its first request) merges
// every server's kinds, in JSON and protobuf, the same to concurrent first readers; /openapi/v3
// indexes every group.
func TestOpenAPIDocuments(t *testing.T) {
	etcdURL, _ := startTestEtcd(t)
	admin, _ := startTestServer(t, etcdURL, nil)
	ctx := context.Background()
	get := func(path, accept string) ([]byte, error) {
		req := admin.Discovery().RESTClient().Get().AbsPath(path)
		if accept != "" {
			req = req.SetHeader("Accept", accept)
		}
		return req.DoRaw(ctx)
	}

	const readers = 4
	docs := make([]spec.Swagger, readers)
	errs := make([]error, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Go(func() {
			raw, err := get("/openapi/v2", "application/json")
			if err == nil {
				err = json.Unmarshal(raw, &docs[i])
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reader %d of /openapi/v2: %v", i, err)
		}
		for _, name := range []string{
			"io.k8s.api.core.v1.Pod",
			"io.k8s.api.apps.v1.Deployment",
			"io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
			"io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService",
		} {
			if _, ok := docs[i].Definitions[name]; !ok {
				t.Errorf("reader %d: /openapi/v2 has no definition %s (%d definitions)", i, name, len(docs[i].Definitions))
			}
		}
		if docs[i].Paths == nil || docs[i].Paths.Paths["/api/v1/namespaces/{namespace}/pods"].Get == nil {
			t.Errorf("reader %d: /openapi/v2 has no GET of /api/v1/namespaces/{namespace}/pods", i)
		}
	}
	pb, err := get("/openapi/v2", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
	if err != nil || len(pb) == 0 || pb[0] == '{' {
		t.Errorf("/openapi/v2 in protobuf: %d bytes starting %q, %v", len(pb), pb[:min(len(pb), 16)], err)
	}

	raw, err := get("/openapi/v3", "")
	if err != nil {
		t.Fatalf("/openapi/v3: %v", err)
	}
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	for _, gv := range []string{"api/v1", "apis/apps/v1", "apis/apiextensions.k8s.io/v1", "apis/apiregistration.k8s.io/v1"} {
		if _, ok := index.Paths[gv]; !ok {
			t.Errorf("/openapi/v3 does not index %s", gv)
		}
	}
	path, _, _ := strings.Cut(index.Paths["apis/apps/v1"].ServerRelativeURL, "?")
	apps, err := get(path, "")
	if err != nil || !strings.Contains(string(apps), `"io.k8s.api.apps.v1.Deployment"`) {
		t.Errorf("/openapi/v3/apis/apps/v1: no Deployment schema (%d bytes), %v", len(apps), err)
	}
}

// A document that cannot be built is a 500 saying why, on every request.
func TestOpenAPIV2BuildError(t *testing.T) {
	type widget struct{ Name string }
	ws := new(restful.WebService).Path("/apis/example.com/v1")
	ws.Route(ws.GET("/widgets").To(func(*restful.Request, *restful.Response) {}).Operation("listWidgets").Writes(widget{}))
	c := restful.NewContainer()
	c.Add(ws)
	h := &openAPIV2{services: c, config: &common.Config{
		Info:           &spec.Info{InfoProps: spec.InfoProps{Title: "test", Version: "v0"}},
		GetDefinitions: func(common.ReferenceCallback) map[string]common.OpenAPIDefinition { return nil },
	}}
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi/v2", nil))
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "OpenAPI v2") {
			t.Fatalf("a document without its definitions: %d %q, want 500 saying why", rec.Code, rec.Body.String())
		}
	}
}
