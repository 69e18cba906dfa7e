package gitsync

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// crdTestMapper maps the built-in kinds of the tests; it maps Widget only after a Reset
// once discovery serves it (served), as a discovery-backed mapper would.
type crdTestMapper struct {
	mu     sync.Mutex
	m      *meta.DefaultRESTMapper
	served atomic.Bool
	resets atomic.Int32
}

var widgetGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}

func newCRDTestMapper() *crdTestMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	m.Add(crdGroupKind.WithVersion("v1"), meta.RESTScopeRoot)
	return &crdTestMapper{m: m}
}

func (c *crdTestMapper) Reset() {
	c.resets.Add(1)
	if c.served.Load() {
		c.mu.Lock()
		c.m.Add(widgetGVK, meta.RESTScopeNamespace)
		c.mu.Unlock()
	}
}

func (c *crdTestMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.RESTMapping(gk, versions...)
}

func (c *crdTestMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.RESTMappings(gk, versions...)
}

func (c *crdTestMapper) KindFor(r schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return c.m.KindFor(r)
}

func (c *crdTestMapper) KindsFor(r schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return c.m.KindsFor(r)
}

func (c *crdTestMapper) ResourceFor(r schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return c.m.ResourceFor(r)
}

func (c *crdTestMapper) ResourcesFor(r schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return c.m.ResourcesFor(r)
}

func (c *crdTestMapper) ResourceSingularizer(r string) (string, error) {
	return c.m.ResourceSingularizer(r)
}

// crdTestServer answers the fake dynamic client: every apply patch is recorded (in order)
// and answered with the patch; a CustomResourceDefinition reports Established after
// establishAfter reads, or what conditions says.
type crdTestServer struct {
	mu      sync.Mutex
	patches []string
	dryRuns []string
	// conditions answers reads of a CustomResourceDefinition: read is the number of the read.
	conditions func(read int) []any
	reads      int
	mapper     *crdTestMapper
}

func (s *crdTestServer) client() *dynamicfake.FakeDynamicClient {
	c := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	c.PrependReactor("patch", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		pa := action.(clienttesting.PatchActionImpl)
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(pa.GetPatch(), &u.Object); err != nil {
			return true, nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(pa.PatchOptions.DryRun) > 0 {
			return true, u, nil
		}
		s.patches = append(s.patches, u.GetKind()+" "+u.GetName())
		return true, u, nil
	})
	c.PrependReactor("get", "customresourcedefinitions", func(action clienttesting.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		name := action.(clienttesting.GetAction).GetName()
		if !slices.Contains(s.patches, "CustomResourceDefinition "+name) {
			return true, nil, apierrors.NewNotFound(crdResource.GroupResource(), name)
		}
		s.reads++
		conds := s.conditions(s.reads)
		if len(conds) > 0 && conds[len(conds)-1].(map[string]any)["status"] == "True" {
			// Discovery serves the kind once it is established.
			s.mapper.served.Store(true)
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": name},
			"status":   map[string]any{"conditions": conds}}}
		return true, u, nil
	})
	return c
}

func establishedAfter(n int) func(int) []any {
	return func(read int) []any {
		if read < n {
			return []any{map[string]any{"type": "Established", "status": "False", "reason": "Installing", "message": "the initial names have not been accepted"}}
		}
		return []any{map[string]any{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
			map[string]any{"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}}
	}
}

// crdRevision is a revision with a Namespace, a CRD, two of its custom resources and a
// ConfigMap, listed in an order unlike the apply order.
func crdRevision(t *testing.T) []Object {
	return []Object{
		crdObj(t, widget("{size: 5}"), "w.yaml"),
		crdObj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: demo}\n", "cfg.yaml"),
		crdObj(t, strings.Replace(widget("{size: 2}"), "name: w1, namespace: default", "name: w2", 1), "w2.yaml"),
		crdObj(t, widgetCRD, "crd.yaml"),
		crdObj(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n", "ns.yaml"),
	}
}

func TestPrepareCustomResourcesOfTheRevision(t *testing.T) {
	a := &Applier{Mapper: newCRDTestMapper()}
	objs, fails := a.Prepare(crdRevision(t), "default.src")
	if len(fails) > 0 {
		t.Fatalf("fails: %v", fails)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Obj.GetKind()+" "+o.Obj.GetNamespace()+"/"+o.Obj.GetName())
	}
	// The Widget without a namespace gets "default": the revision's definition is namespaced.
	want := []string{"Namespace /demo", "CustomResourceDefinition /widgets.example.com", "ConfigMap demo/cfg", "Widget default/w1", "Widget default/w2"}
	if !slices.Equal(got, want) {
		t.Fatalf("Prepare order:\n  %q\nwant\n  %q", got, want)
	}
	// A kind that neither the API nor the revision defines is still refused.
	_, fails = a.Prepare([]Object{crdObj(t, widget("{size: 5}"), "w.yaml")}, "default.src")
	if len(fails) != 1 || !strings.Contains(fails[0], "w.yaml: Widget default/w1: kind example.com/v1, Kind=Widget is not served by the API") {
		t.Fatalf("fails = %q", fails)
	}
}

func TestValidateCustomResourcesOfTheRevision(t *testing.T) {
	srv := &crdTestServer{conditions: establishedAfter(1), mapper: newCRDTestMapper()}
	dyn := srv.client()
	a := &Applier{Dynamic: dyn, Mapper: srv.mapper}
	objs, fails := a.Prepare(append(crdRevision(t), crdObj(t, strings.Replace(widget("{size: 11}"), "w1", "w3", 1), "bad.yaml")), "default.src")
	if len(fails) > 0 {
		t.Fatal(fails)
	}
	lines := a.Validate(context.Background(), objs)
	want := []string{"bad.yaml: Widget default/w3: spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"}
	if !slices.Equal(lines, want) {
		t.Fatalf("Validate = %q, want %q", lines, want)
	}
	// Only what the server can dry-run went to it: not the Widgets.
	for _, act := range dyn.Actions() {
		if pa, ok := act.(clienttesting.PatchAction); ok && pa.GetResource().Resource == "widgets" {
			t.Errorf("a Widget was sent to the server before its definition exists: %v", pa)
		}
	}
	// A definition that is not structural: its line, and its resources are not checked.
	bad := strings.Replace(widgetCRD, "size: {type: integer, minimum: 1, maximum: 10}", "size: {minimum: 1}", 1)
	objs, _ = a.Prepare([]Object{crdObj(t, bad, "crd.yaml"), crdObj(t, widget("{size: 5}"), "w.yaml")}, "default.src")
	lines = a.Validate(context.Background(), objs)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "crd.yaml: CustomResourceDefinition widgets.example.com: ") ||
		!strings.Contains(lines[0], "properties[size].type: Required value: must not be empty for specified object fields") ||
		lines[1] != "w.yaml: Widget default/w1: not checked: its CustomResourceDefinition widgets.example.com in this revision is invalid" {
		t.Fatalf("Validate = %q", lines)
	}
}

func TestApplyWaitsForCRDs(t *testing.T) {
	srv := &crdTestServer{conditions: establishedAfter(3), mapper: newCRDTestMapper()}
	a := &Applier{Dynamic: srv.client(), Mapper: srv.mapper}
	objs, fails := a.Prepare(crdRevision(t), "default.src")
	if len(fails) > 0 {
		t.Fatal(fails)
	}
	applied, _, err := a.ApplyObjects(context.Background(), objs, "default.src")
	if err != nil {
		t.Fatal(err)
	}
	if srv.reads < 3 {
		t.Errorf("the CustomResourceDefinition was read %d times; it is established at the third", srv.reads)
	}
	if srv.mapper.resets.Load() == 0 {
		t.Error("the RESTMapper was not reset after the definitions were established")
	}
	want := []string{"Namespace demo", "CustomResourceDefinition widgets.example.com"}
	if !slices.Equal(srv.patches[:2], want) {
		t.Fatalf("applied first %q, want %q", srv.patches[:2], want)
	}
	rest := slices.Sorted(slices.Values(srv.patches[2:]))
	if !slices.Equal(rest, []string{"ConfigMap cfg", "Widget w1", "Widget w2"}) {
		t.Fatalf("then applied %q", rest)
	}
	if len(applied) != 5 {
		t.Fatalf("applied %d objects", len(applied))
	}
	// The health check gets the definition as established.
	if h := ObjectHealth(applied[1], time.Now()); h.Status != "Healthy" {
		t.Errorf("CRD health = %+v (%v)", h, applied[1].Object)
	}
}

func TestApplyCRDNotEstablished(t *testing.T) {
	tests := []struct {
		name       string
		conditions func(int) []any
		timeout    time.Duration
		want       string
	}{
		{"names refused", func(int) []any {
			return []any{map[string]any{"type": "NamesAccepted", "status": "False", "reason": "KindConflict", "message": `"Widget" is already in use`},
				map[string]any{"type": "Established", "status": "False", "reason": "NotAccepted", "message": "not all names are accepted"}}
		}, time.Minute, `crd.yaml: CustomResourceDefinition widgets.example.com: CustomResourceDefinition widgets.example.com is not established: NamesAccepted=False (KindConflict): "Widget" is already in use`},
		{"timeout", establishedAfter(1 << 30), 500 * time.Millisecond,
			"crd.yaml: CustomResourceDefinition widgets.example.com: CustomResourceDefinition widgets.example.com is not established after 500ms: Established=False (Installing): the initial names have not been accepted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &crdTestServer{conditions: tt.conditions, mapper: newCRDTestMapper()}
			a := &Applier{Dynamic: srv.client(), Mapper: srv.mapper, EstablishTimeout: tt.timeout}
			objs, _ := a.Prepare(crdRevision(t), "default.src")
			start := time.Now()
			_, _, err := a.ApplyObjects(context.Background(), objs, "default.src")
			if err == nil {
				t.Fatal("no error")
			}
			if time.Since(start) > tt.timeout+5*time.Second {
				t.Errorf("took %s", time.Since(start))
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q\nwant it to contain %q", msg, tt.want)
			}
			if !strings.Contains(msg, "2 Widget object(s) not applied: their CustomResourceDefinition widgets.example.com is not established") {
				t.Errorf("error %q does not say the Widgets were not applied", msg)
			}
			if slices.Contains(srv.patches, "Widget w1") || !slices.Contains(srv.patches, "ConfigMap cfg") {
				t.Errorf("applied %q: want the ConfigMap and no Widget", srv.patches)
			}
		})
	}
}

// TestPlanCustomResourcesOfTheRevision: plan lists a custom resource whose definition is only
// in the revision as a create, and one that violates the definition as invalid, naming the
// field; offline too.
func TestPlanCustomResourcesOfTheRevision(t *testing.T) {
	repo := t.TempDir()
	for name, content := range map[string]string{
		"app/crd.yaml": widgetCRD,
		"app/ns.yaml":  "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n",
		"app/w.yaml":   strings.Replace(widget("{size: 5}"), "namespace: default", "namespace: demo", 1),
		"app/bad.yaml": strings.Replace(widget("{size: 2, minSize: 3}"), "w1", "bad", 1),
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(repo, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	items := func(p *Plan) map[string]PlanItem {
		out := map[string]PlanItem{}
		for _, it := range p.Items {
			out[it.Kind+" "+it.Name] = it
		}
		return out
	}
	const badReason = "app/bad.yaml: Widget default/bad: spec: Invalid value: minSize must not exceed size"

	off, err := PlanOffline(repo, "app", Limits{}, "")
	if err != nil {
		t.Fatal(err)
	}
	got := items(off)
	if got["Widget w1"].Action != PlanRendered || got["CustomResourceDefinition widgets.example.com"].Action != PlanRendered {
		t.Errorf("offline: %+v", off.Items)
	}
	if it := got["Widget bad"]; it.Action != PlanInvalid || it.Reason != badReason {
		t.Errorf("offline: bad Widget %+v, want invalid with %q", it, badReason)
	}
	if off.ExitCode(false) != 1 {
		t.Errorf("offline exit code %d", off.ExitCode(false))
	}

	srv := &crdTestServer{conditions: establishedAfter(1), mapper: newCRDTestMapper()}
	a := &Applier{Dynamic: srv.client(), Mapper: srv.mapper}
	p, err := a.Plan(context.Background(), PlanOptions{RepoDir: repo, Path: "app", Source: "default/src"})
	if err != nil {
		t.Fatal(err)
	}
	got = items(p)
	w := got["Widget w1"]
	if w.Action != PlanCreate || w.Namespace != "demo" || !slices.ContainsFunc(w.Changes, func(c FieldChange) bool { return c.Path == "spec.size" && c.New == "5" }) {
		t.Errorf("Widget w1: %+v, want a create setting spec.size", w)
	}
	if it := got["Widget bad"]; it.Action != PlanInvalid || it.Reason != badReason {
		t.Errorf("bad Widget %+v, want invalid with %q", it, badReason)
	}
	if it := got["CustomResourceDefinition widgets.example.com"]; it.Action != PlanCreate {
		t.Errorf("CRD: %+v", it)
	}
	if c := p.Counts(); c.Invalid != 1 || c.Create != 3 {
		t.Errorf("counts %+v", c)
	}
	if len(srv.patches) != 0 {
		t.Errorf("plan applied %q", srv.patches)
	}
}
