package gitsync

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// sourceObject is GitSource default/name with spec, applied as testSA unless spec names
// another spec.serviceAccountName.
func sourceObject(name string, spec map[string]any) *unstructured.Unstructured {
	if _, ok := spec["serviceAccountName"]; !ok {
		spec["serviceAccountName"] = testSA
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "flotilla.dev/v1alpha1", "kind": "GitSource",
		"metadata": map[string]any{"name": name, "namespace": "default"}, "spec": spec}}
}

// createSource creates GitSource default/apps with spec.
func (e *env) createSource(spec map[string]any) {
	e.t.Helper()
	if _, err := e.cctx.Dynamic.Resource(GitSourceResource).Namespace("default").Create(context.Background(), sourceObject("apps", spec), metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// TestNamesAgainstAgent: the controller applies a revision read from a directory whose name
// has "+" and a space (and a Windows device name) as any other.
func TestNamesAgainstAgent(t *testing.T) {
	r := newRepo(t)
	dir := "manifests/ha-1.21+"
	head := r.commit(map[string]string{
		dir + "/kustomization.yaml":   "resources:\n- ns.yaml\n- my app/cm.yaml\n- aux/cm+1.yaml\n",
		dir + "/ns.yaml":              nsYAML,
		dir + "/my app/cm.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: space, namespace: demo}\n",
		dir + "/aux/cm+1.yaml":        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: aux, namespace: demo}\n",
		"elsewhere/not-rendered.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: elsewhere, namespace: demo}\n",
	})
	e := start(t)
	e.createSource(map[string]any{"url": "file://" + r.dir, "interval": "1m", "path": dir})
	e.waitFor("revision applied", e.readyAt(head))
	for _, name := range []string{"space", "aux"} {
		if _, err := e.client.CoreV1().ConfigMaps("demo").Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("ConfigMap demo/%s: %v", name, err)
		}
	}
}

// requireCRDs skips the test when (and only when) the API answers 404 for
// apiextensions.k8s.io/v1: the server does not serve CustomResourceDefinitions yet.
func (e *env) requireCRDs() {
	e.t.Helper()
	_, err := e.client.Discovery().ServerResourcesForGroupVersion("apiextensions.k8s.io/v1")
	if apierrors.IsNotFound(err) {
		e.t.Skip("the API does not serve apiextensions.k8s.io/v1 (404): run this test again once the server serves CustomResourceDefinitions")
	}
	if err != nil {
		e.t.Fatalf("discovery of apiextensions.k8s.io/v1: %v", err)
	}
}

// TestCRDRevisionAgainstAgent: a revision with a CustomResourceDefinition and its custom
// resources is validated against the definition before anything is applied, then applied
// in stages (the definition, established, then its resources); a resource that violates the
// definition stops the whole revision with the field named; plan lists the resources of a
// definition that is only in the repository as creates.
func TestCRDRevisionAgainstAgent(t *testing.T) {
	r := newRepo(t)
	w1 := strings.Replace(widget("{size: 5}"), "namespace: default", "namespace: demo", 1)
	head := r.commit(map[string]string{"crd.yaml": widgetCRD, "ns.yaml": nsYAML, "w1.yaml": w1})
	e := start(t)
	e.requireCRDs()
	ctx := context.Background()
	e.createSource(map[string]any{"url": "file://" + r.dir, "interval": "2s"})
	widgets := e.cctx.Dynamic.Resource(widgetGVK.GroupVersion().WithResource("widgets")).Namespace("demo")

	t.Log("one revision: the definition, its namespace and a Widget")
	e.waitFor("revision with the CRD applied", e.readyAt(head))
	w, err := widgets.Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w.GetLabels()[SourceLabel] != "default.apps" {
		t.Errorf("Widget labels %v", w.GetLabels())
	}
	if v, _, _ := unstructured.NestedInt64(w.Object, "spec", "minSize"); v != 1 {
		t.Errorf("the server did not default spec.minSize: %v", w.Object)
	}

	t.Log("a Widget that violates the definition: nothing of the revision is applied")
	bad := strings.NewReplacer("name: w1", "name: bad", "size: 5", "size: 11").Replace(w1)
	badHead := r.commit(map[string]string{"bad.yaml": bad, "cm.yaml": newCMYAML})
	want := "bad.yaml: Widget demo/bad: spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"
	e.waitFor("validation failure naming the field", func() bool {
		st := e.source().Status
		c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == ReasonValidationFailed && strings.Contains(c.Message, badHead) && strings.Contains(c.Message, want)
	})
	if _, err := e.client.CoreV1().ConfigMaps("demo").Get(ctx, "fresh", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap of the invalid revision: err = %v, want NotFound", err)
	}

	t.Log("plan: a definition only in the working tree makes its resources creates")
	work := t.TempDir()
	sprocketCRD := strings.NewReplacer("widgets", "sprockets", "Widget", "Sprocket", "widget", "sprocket").Replace(widgetCRD)
	sprocket := "apiVersion: example.com/v1\nkind: Sprocket\nmetadata: {name: s1, namespace: demo}\nspec: {size: 4}\n"
	badSprocket := "apiVersion: example.com/v1\nkind: Sprocket\nmetadata: {name: s2, namespace: demo}\nspec: {size: 4, minSize: 9}\n"
	for name, content := range map[string]string{"crd.yaml": sprocketCRD, "s1.yaml": sprocket, "s2.yaml": badSprocket} {
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ap := &Applier{Dynamic: e.cctx.Dynamic, Mapper: e.cctx.RESTMapper}
	p, err := ap.Plan(ctx, PlanOptions{RepoDir: work, Path: ".", Source: "default/other"})
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]PlanItem{}
	for _, it := range p.Items {
		actions[it.Kind+" "+it.Name] = it
	}
	if it := actions["Sprocket s1"]; it.Action != PlanCreate {
		t.Errorf("Sprocket s1: %+v, want create", it)
	}
	if it := actions["Sprocket s2"]; it.Action != PlanInvalid || !strings.Contains(it.Reason, "s2.yaml: Sprocket demo/s2: spec: Invalid value: minSize must not exceed size") {
		t.Errorf("Sprocket s2: %+v, want invalid naming spec", it)
	}
	if it := actions["CustomResourceDefinition sprockets.example.com"]; it.Action != PlanCreate {
		t.Errorf("CRD: %+v, want create", it)
	}
	if _, err := e.cctx.Dynamic.Resource(crdResource).Get(ctx, "sprockets.example.com", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("plan created the CRD: err = %v", err)
	}
}
