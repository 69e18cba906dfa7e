package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// BenchmarkCRDToFirstCustomResource measures the time from creating a CRD to the first
// custom resource of it accepted by the API (the client retries every 20 ms), and prints it
// as ms/first-cr. At most 10 CRDs are created whatever -benchtime says.
func BenchmarkCRDToFirstCustomResource(b *testing.B) {
	a := framework.StartAgent(b, framework.AgentOptions{Extra: []string{"--controllers="}})
	ext := apiextensionsclient.NewForConfigOrDie(a.RESTConfig())
	dyn := dynamic.NewForConfigOrDie(a.RESTConfig())
	ctx := context.Background()
	n := min(b.N, 10)
	var total time.Duration
	for i := 0; i < n; i++ {
		group := fmt.Sprintf("g%d-%d.bench.flotilla.dev", b.N, i)
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "things." + group},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: group, Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "things", Singular: "thing", Kind: "Thing", ListKind: "ThingList"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptrTrue()}}}},
			},
		}
		start := time.Now()
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		cr := &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/v1", "kind": "Thing",
			"metadata": map[string]any{"name": "first"}}}
		gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "things"}
		for {
			if _, err := dyn.Resource(gvr).Namespace("default").Create(ctx, cr, metav1.CreateOptions{}); err == nil {
				break
			}
			if time.Since(start) > time.Minute {
				b.Fatalf("no custom resource of %s accepted after a minute", group)
			}
			time.Sleep(20 * time.Millisecond)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/first-cr")
}

func ptrTrue() *bool { t := true; return &t }
