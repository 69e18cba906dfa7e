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
	// Each group's document is served, the same at its hash, in JSON and protobuf, with the
	// meta kinds registered in every group scoped to its own.
	url := index.Paths["apis/apps/v1"].ServerRelativeURL
	path, _, _ := strings.Cut(url, "?")
	apps, err := get(path, "")
	if err != nil || !strings.Contains(string(apps), `"io.k8s.api.apps.v1.Deployment"`) {
		t.Fatalf("/openapi/v3/apis/apps/v1: no Deployment schema (%d bytes), %v", len(apps), err)
	}
	_, hash, _ := strings.Cut(url, "?hash=")
	again, err := admin.Discovery().RESTClient().Get().AbsPath(path).Param("hash", hash).DoRaw(ctx)
	if err != nil || string(again) != string(apps) {
		t.Errorf("%s: %d bytes, %v; want the %d bytes of %s", url, len(again), err, len(apps), path)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				GVKs []map[string]string `json:"x-kubernetes-group-version-kind"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(apps, &doc); err != nil {
		t.Fatal(err)
	}
	gvks := doc.Components.Schemas["io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"].GVKs
	if len(gvks) != 2 || gvks[0]["group"]+"/"+gvks[0]["version"] != "/v1" || gvks[1]["group"]+"/"+gvks[1]["version"] != "apps/v1" {
		t.Errorf("apps/v1 document: DeleteOptions of %v, want of core v1 and apps/v1 only", gvks)
	}
	if gvks := doc.Components.Schemas["io.k8s.api.apps.v1.Deployment"].GVKs; len(gvks) != 1 || gvks[0]["kind"] != "Deployment" {
		t.Errorf("apps/v1 document: Deployment of %v", gvks)
	}
	pb, err = get(path, "application/com.github.proto-openapi.spec.v3@v1.0+protobuf")
	if err != nil || len(pb) == 0 || pb[0] == '{' {
		t.Errorf("%s in protobuf: %d bytes starting %q, %v", path, len(pb), pb[:min(len(pb), 16)], err)
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
