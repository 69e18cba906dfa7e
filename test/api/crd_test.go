package api

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// widgetCRD has two versions (v1 stored, v1beta1 served, conversion None), a structural
// schema with a default, a CEL rule, status and scale subresources and printer columns.
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.flotilla.dev
spec:
  group: example.flotilla.dev
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Colour
      type: string
      jsonPath: .spec.colour
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "self.minSize <= self.size"
              message: "minSize must not exceed size"
            properties:
              size:
                type: integer
                maximum: 10
              minSize:
                type: integer
                default: 0
              colour:
                type: string
                default: blue
                enum: [blue, red]
              replicas:
                type: integer
              tags:
                type: array
                x-kubernetes-list-type: set
                items:
                  type: string
          status:
            type: object
            properties:
              replicas:
                type: integer
              phase:
                type: string
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

func TestCustomResources(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ext := apiextensionsclient.NewForConfigOrDie(a.RESTConfig())
	dyn := dynamic.NewForConfigOrDie(a.RESTConfig())
	widgets := schema.GroupVersionResource{Group: "example.flotilla.dev", Version: "v1", Resource: "widgets"}

	a.MustKubectl(widgetCRD, "apply", "-f", "-")
	waitEstablished(ctx, t, ext, "widgets.example.flotilla.dev")

	t.Run("a valid widget is defaulted, pruned and listed with its printer columns", func(t *testing.T) {
		a.MustKubectl(`apiVersion: example.flotilla.dev/v1
kind: Widget
metadata:
  name: w1
spec:
  size: 3
`, "apply", "-f", "-")
		w, err := dyn.Resource(widgets).Namespace("default").Get(ctx, "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c, _, _ := unstructured.NestedString(w.Object, "spec", "colour"); c != "blue" {
			t.Errorf("spec.colour = %q, want the default blue", c)
		}
		// kubectl asks for strict field validation; a client that does not gets the unknown
		// field pruned.
		_, stderr, err := a.Kubectl("apiVersion: example.flotilla.dev/v1\nkind: Widget\nmetadata: {name: w0}\nspec: {size: 1, unknownField: x}\n", "apply", "-f", "-")
		if err == nil || !strings.Contains(stderr, `unknown field "spec.unknownField"`) {
			t.Errorf("strict apply of an unknown field: err=%v stderr=%s", err, stderr)
		}
		pruned, err := dyn.Resource(widgets).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.flotilla.dev/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "w0"}, "spec": map[string]any{"size": int64(1), "unknownField": "x"},
		}}, metav1.CreateOptions{FieldValidation: "Ignore"})
		if err != nil {
			t.Fatal(err)
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(pruned.Object, "spec", "unknownField"); found {
			t.Errorf("spec.unknownField was stored, want it pruned: %v", pruned.Object["spec"])
		}
		out := a.MustKubectl("", "get", "wd")
		if !strings.Contains(out, "SIZE") || !strings.Contains(out, "COLOUR") || !regexpMatch(`(?m)^w1\s+3\s+blue\s+`, out) {
			t.Errorf("kubectl get wd:\n%s", out)
		}
		if out := a.MustKubectl("", "get", "all"); !strings.Contains(out, "widget.example.flotilla.dev/w1") {
			t.Errorf("kubectl get all does not list the widget (category all):\n%s", out)
		}
	})

	t.Run("schema and CEL violations are refused with 422 naming the field", func(t *testing.T) {
		_, stderr, err := a.Kubectl(`apiVersion: example.flotilla.dev/v1
kind: Widget
metadata:
  name: big
spec:
  size: 11
`, "apply", "-f", "-")
		if err == nil || !strings.Contains(stderr, "spec.size") || !strings.Contains(stderr, "less than or equal to 10") {
			t.Errorf("size 11: err=%v stderr=%s", err, stderr)
		}
		_, stderr, err = a.Kubectl(`apiVersion: example.flotilla.dev/v1
kind: Widget
metadata:
  name: inverted
spec:
  size: 2
  minSize: 5
`, "apply", "-f", "-")
		if err == nil || !strings.Contains(stderr, "minSize must not exceed size") {
			t.Errorf("CEL rule: err=%v stderr=%s", err, stderr)
		}
		_, err = dyn.Resource(widgets).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.flotilla.dev/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "red"}, "spec": map[string]any{"size": int64(1), "colour": "green"},
		}}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.colour") {
			t.Errorf("enum violation: %v, want 422 naming spec.colour", err)
		}
	})

	t.Run("status and scale subresources", func(t *testing.T) {
		w, err := dyn.Resource(widgets).Namespace("default").Get(ctx, "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(w.Object, "Ready", "status", "phase")
		_ = unstructured.SetNestedField(w.Object, int64(9), "spec", "size")
		got, err := dyn.Resource(widgets).Namespace("default").UpdateStatus(ctx, w, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p, _, _ := unstructured.NestedString(got.Object, "status", "phase"); p != "Ready" {
			t.Errorf("status.phase = %q after UpdateStatus", p)
		}
		if s, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); s != 3 {
			t.Errorf("spec.size = %d after UpdateStatus, want 3 (status updates ignore spec)", s)
		}
		a.MustKubectl("", "scale", "widget/w1", "--replicas=4")
		if out := a.MustKubectl("", "get", "widget", "w1", "-o", "jsonpath={.spec.replicas}"); out != "4" {
			t.Errorf("spec.replicas = %q after kubectl scale, want 4", out)
		}
	})

	t.Run("both versions read the same objects", func(t *testing.T) {
		out := a.MustKubectl("", "get", "widgets.v1beta1.example.flotilla.dev", "w1", "-o", "jsonpath={.apiVersion} {.spec.size}")
		if out != "example.flotilla.dev/v1beta1 3" {
			t.Errorf("w1 through v1beta1 = %q", out)
		}
	})

	t.Run("kubectl explain reads the schema", func(t *testing.T) {
		var out string
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			var err error
			out, _, err = a.Kubectl("", "explain", "widgets.spec.colour")
			return err == nil, nil
		})
		if err != nil || !strings.Contains(out, "colour") || !strings.Contains(out, "string") {
			t.Errorf("kubectl explain widgets.spec.colour: %v\n%s", err, out)
		}
	})

	t.Run("a non-structural schema is refused with apiextensions' message", func(t *testing.T) {
		_, stderr, err := a.Kubectl(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.flotilla.dev
spec:
  group: example.flotilla.dev
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            properties:
              size: {type: integer}
`, "apply", "-f", "-")
		if err == nil || !strings.Contains(stderr, "must not be empty for specified object fields") {
			t.Errorf("non-structural CRD: err=%v stderr=%s", err, stderr)
		}
	})

	t.Run("garbage collection follows ownerReferences to and from custom resources", func(t *testing.T) {
		owner, err := a.Client().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = dyn.Resource(widgets).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.flotilla.dev/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "owned", "ownerReferences": []any{map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": string(owner.UID)}}},
			"spec": map[string]any{"size": int64(1)},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Client().CoreV1().ConfigMaps("default").Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(widgets).Namespace("default").Get(ctx, "owned", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("widget owned by a deleted ConfigMap not collected: %v", err)
		}
	})

	t.Run("deleting the namespace removes its widgets", func(t *testing.T) {
		a.MustKubectl("", "create", "namespace", "shop")
		a.MustKubectl("apiVersion: example.flotilla.dev/v1\nkind: Widget\nmetadata: {name: w2, namespace: shop}\nspec: {size: 1}\n", "apply", "-f", "-")
		a.MustKubectl("", "delete", "namespace", "shop", "--wait=false")
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := a.Client().CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("namespace shop not gone: %v", err)
		}
	})

	t.Run("deleting the CRD removes its widgets and the API", func(t *testing.T) {
		a.MustKubectl("", "delete", "crd", "widgets.example.flotilla.dev")
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(widgets).Namespace("default").List(ctx, metav1.ListOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("widgets still served after the CRD was deleted: %v", err)
		}
	})
}

func waitEstablished(ctx context.Context, t *testing.T, ext apiextensionsclient.Interface, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not Established: %v", name, err)
	}
}
