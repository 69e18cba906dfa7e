package api

import (
	"context"
	"fmt"
	"os"
	"strconv"
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
// custom resource of it accepted by the API (a refused create is tried again 5 ms later, the
// figure's resolution), and prints the mean and the longest as ms/first-cr and
// ms/first-cr-max. Each CRD makes the next one's cost higher (the API serves one more
// group), so it creates FLOTILLA_BENCH_CRDS CRDs (default 5) whatever b.N: run it with
// -benchtime 1x.
func BenchmarkCRDToFirstCustomResource(b *testing.B) {
	a := framework.StartAgent(b, framework.AgentOptions{Extra: []string{"--controllers="}})
	ext := apiextensionsclient.NewForConfigOrDie(a.RESTConfig())
	dyn := dynamic.NewForConfigOrDie(a.RESTConfig())
	ctx := context.Background()
	n := 5
	if v, err := strconv.Atoi(os.Getenv("FLOTILLA_BENCH_CRDS")); err == nil && v > 0 {
		n = v
	}
	var total, longest time.Duration
	for i := 0; i < n; i++ {
		crdRuns++
		group := fmt.Sprintf("g%d.bench.flotilla.dev", crdRuns)
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
			time.Sleep(5 * time.Millisecond)
		}
		took := time.Since(start)
		total += took
		longest = max(longest, took)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/first-cr")
	b.ReportMetric(float64(longest.Milliseconds()), "ms/first-cr-max")
	b.ReportMetric(0, "ns/op") // one run: the figures above say what it took
}

// crdRuns names each CRD's group: a run without -benchtime 1x calls the benchmark again.
var crdRuns int

func ptrTrue() *bool { t := true; return &t }
