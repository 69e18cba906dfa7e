package gitsync

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/test/framework"
)

const (
	planNS     = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n"
	planDeploy = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
        env:
        - {name: A, value: "1"}
`
	planSvc  = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: demo}\nspec:\n  selector: {app: web}\n  ports: [{port: 80}]\n"
	planCfg  = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: demo}\ndata: {a: \"1\"}\n"
	planOld  = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: old, namespace: demo}\ndata: {a: \"1\"}\n"
	planKeep = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: keep\n  namespace: demo\n  annotations: {flotilla.dev/prune: disabled}\ndata: {a: \"1\"}\n"
	planNew  = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fresh, namespace: demo}\ndata: {x: \"y\"}\n"
	// A namespace the revision creates, and an object in it.
	planNS2 = "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo2}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: demo2}\ndata: {k: v}\n"
	planBad = `apiVersion: apps/v1
kind: Deployment
metadata: {name: bad, namespace: demo}
spec:
  selector:
    matchLabels: {app: bad}
  template:
    metadata:
      labels: {app: other}
    spec:
      containers: [{name: c, image: nginx}]
`
)

func planWriteTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if content == "" {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPlanAgainstAgent applies a revision as the controller would, changes the tree and
// checks that plan reports every kind of change, through the Go API and the built binary,
// while nothing on the server changes.
func TestPlanAgainstAgent(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	cctx, err := controllers.NewContext(a.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ap := &Applier{Dynamic: cctx.Dynamic, Mapper: cctx.RESTMapper}
	ctx := context.Background()
	const source = "kube-system.root"
	repo := t.TempDir()

	t.Log("revision 1 applied as gitsync applies it; GitSource kube-system/root records the inventory")
	planWriteTree(t, repo, map[string]string{"app/ns.yaml": planNS, "app/deploy.yaml": planDeploy, "app/svc.yaml": planSvc,
		"app/cfg.yaml": planCfg, "app/old.yaml": planOld, "app/keep.yaml": planKeep, "README.md": "not rendered\n"})
	objs, err := Render(context.Background(), repo, "app", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	objs, fails := ap.Prepare(objs, source)
	if fails = append(fails, ap.Validate(ctx, objs)...); len(fails) > 0 {
		t.Fatalf("revision 1 invalid: %v", fails)
	}
	if err := ap.Apply(ctx, objs, source); err != nil {
		t.Fatal(err)
	}
	gsRes := cctx.Dynamic.Resource(GitSourceResource).Namespace("kube-system")
	gs := &v1alpha1.GitSource{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "root"},
		Spec: v1alpha1.GitSourceSpec{URL: "file:///nonexistent", Path: "app"}}
	gs.APIVersion, gs.Kind = v1alpha1.SchemeGroupVersion.String(), "GitSource"
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(gs)
	if err != nil {
		t.Fatal(err)
	}
	created, err := gsRes.Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v1alpha1.ResourceInventory{Entries: Inventory(objs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedMap(created.Object, inv, "status", "inventory"); err != nil {
		t.Fatal(err)
	}
	if _, err := gsRes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Someone else labels a git-owned object: a field git does not set is left alone.
	cmRes := cctx.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if _, err := cmRes.Namespace("demo").Patch(ctx, "cfg", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"x"}}}`),
		metav1.PatchOptions{FieldManager: "kubectl-label"}); err != nil {
		t.Fatal(err)
	}

	t.Log("plan of the applied tree: everything unchanged (no metadata noise, the foreign label ignored), exit 0")
	p, err := ap.Plan(ctx, PlanOptions{RepoDir: repo, Source: "kube-system/root"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Path != "app" || len(p.Items) != 6 || p.Counts().Unchanged != 6 || p.ExitCode(true) != 0 {
		t.Errorf("plan of the applied revision:\n%s", p.Text())
	}

	// Someone edits a git-owned field: gitsync would revert it, so the plan shows it.
	if _, err := cmRes.Namespace("demo").Patch(ctx, "cfg", types.MergePatchType, []byte(`{"data":{"a":"2"}}`),
		metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}

	type key struct{ res, ns, name string }
	watched := []key{{"namespaces", "", "demo"}, {"namespaces", "", "demo2"}, {"deployments", "demo", "web"}, {"deployments", "demo", "bad"},
		{"services", "demo", "web"}, {"configmaps", "demo", "cfg"}, {"configmaps", "demo", "old"}, {"configmaps", "demo", "keep"},
		{"configmaps", "demo", "fresh"}, {"configmaps", "demo2", "x"}, {"configmaps", "default", "x"}, {"gitsources", "kube-system", "root"}}
	snapshot := func() map[key]string {
		out := map[key]string{}
		for _, k := range watched {
			gvr := schema.GroupVersionResource{Version: "v1", Resource: k.res}
			switch k.res {
			case "deployments":
				gvr.Group, gvr.Version = "apps", "v1"
			case "gitsources":
				gvr = GitSourceResource
			}
			var u *unstructured.Unstructured
			var err error
			if k.ns == "" {
				u, err = cctx.Dynamic.Resource(gvr).Get(ctx, k.name, metav1.GetOptions{})
			} else {
				u, err = cctx.Dynamic.Resource(gvr).Namespace(k.ns).Get(ctx, k.name, metav1.GetOptions{})
			}
			switch {
			case apierrors.IsNotFound(err):
				out[k] = "absent"
			case err != nil:
				t.Fatal(err)
			default:
				out[k] = u.GetResourceVersion()
			}
		}
		return out
	}
	before := snapshot()

	t.Log("revision 2: one field changed, objects added, removed, one invalid")
	planWriteTree(t, repo, map[string]string{"app/deploy.yaml": strings.Replace(planDeploy, "replicas: 2", "replicas: 3", 1),
		"app/old.yaml": "", "app/keep.yaml": "", "app/fresh.yaml": planNew, "app/ns2.yaml": planNS2, "app/bad.yaml": planBad})
	p, err = ap.Plan(ctx, PlanOptions{RepoDir: repo, Source: "kube-system/root"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan:\n%s", p.Text())
	got := map[string]PlanItem{}
	for _, it := range p.Items {
		if it.Action == PlanInvalid {
			got["invalid"] = it
			continue
		}
		got[it.Ref()] = it
	}
	want := map[string]PlanAction{"Namespace demo": PlanUnchanged, "Service demo/web": PlanUnchanged, "ConfigMap demo/cfg": PlanUpdate,
		"Deployment demo/web": PlanUpdate, "ConfigMap demo/fresh": PlanCreate, "Namespace demo2": PlanCreate,
		"ConfigMap demo2/x": PlanCreate, "ConfigMap demo/old": PlanDelete, "ConfigMap demo/keep": PlanKeep, "invalid": PlanInvalid}
	for ref, action := range want {
		if got[ref].Action != action {
			t.Errorf("%s: action %q, want %q (%+v)", ref, got[ref].Action, action, got[ref])
		}
	}
	if len(p.Items) != len(want) {
		t.Errorf("%d items, want %d", len(p.Items), len(want))
	}
	if ch := got["Deployment demo/web"].Changes; !reflect.DeepEqual(ch, []FieldChange{{Path: "spec.replicas", Old: "2", New: "3"}}) {
		t.Errorf("Deployment changes = %+v, want only spec.replicas 2 -> 3", ch)
	}
	if ch := got["ConfigMap demo/cfg"].Changes; !reflect.DeepEqual(ch, []FieldChange{{Path: "data.a", Old: `"2"`, New: `"1"`}}) {
		t.Errorf("drifted ConfigMap changes = %+v, want data.a reverted", ch)
	}
	if it := got["Deployment demo/web"]; it.File != "app/deploy.yaml" {
		t.Errorf("update file = %q", it.File)
	}
	if r := got["invalid"].Reason; !strings.HasPrefix(r, "app/bad.yaml: Deployment demo/bad: spec.template.metadata.labels") {
		t.Errorf("invalid reason = %q", r)
	}
	if r := got["ConfigMap demo/keep"].Reason; !strings.Contains(r, "prune: disabled") {
		t.Errorf("keep reason = %q", r)
	}
	if ch := got["ConfigMap demo/fresh"].Changes; !strings.Contains(planFmtChanges(ch), `data.x: "y"`) ||
		!strings.Contains(planFmtChanges(ch), `metadata.labels["flotilla.dev/source"]: "kube-system.root"`) {
		t.Errorf("create changes = %+v", ch)
	}
	if p.ExitCode(false) != 1 || p.ExitCode(true) != 1 {
		t.Errorf("exit codes %d/%d, want 1", p.ExitCode(false), p.ExitCode(true))
	}

	t.Log("the built binary: markdown for a PR comment, exit 1 with an invalid object")
	bin := framework.FlotillaBin(t)
	cmd := exec.Command(bin, "plan", "--kubeconfig", a.Kubeconfig, "--output", "markdown", "--detailed-exitcode", repo)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("flotilla plan exit: %v", err)
	}
	md := string(out)
	t.Logf("markdown:\n%s", md)
	first, _, _ := strings.Cut(md, "\n")
	// The agent's only host runs no pods (--pods=false: tainted node.flotilla.dev/no-pods), so
	// the scheduling simulation finds that the Deployment's 3 pods would stay Pending.
	if !strings.HasPrefix(first, "❌ **flotilla plan** `app`: Plan: 3 to create, 2 to update, 1 to delete, 2 unchanged, 1 kept, 3 pod(s) would stay Pending, 1 invalid") {
		t.Errorf("markdown summary line = %q", first)
	}
	for _, w := range []string{"| ! | invalid | `Deployment demo/bad` | `app/bad.yaml` | spec.template.metadata.labels: Invalid value",
		`+ metadata.namespace: "demo2"`, "| - | delete | `ConfigMap demo/old`", "```diff\n- spec.replicas: 2\n+ spec.replicas: 3\n```"} {
		if !strings.Contains(md, w) {
			t.Errorf("markdown lacks %q:\n%s", w, md)
		}
	}

	t.Log("without the invalid object: valid with changes, but pods that would stay Pending on a host that runs none: exit 1 (json)")
	planWriteTree(t, repo, map[string]string{"app/bad.yaml": ""})
	out, err = exec.Command(bin, "plan", "--kubeconfig", a.Kubeconfig, "--output", "json", "--detailed-exitcode", repo).Output()
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("flotilla plan exit: %v, want 1", err)
	}
	var jp Plan
	if err := json.Unmarshal(out, &jp); err != nil {
		t.Fatalf("json plan: %v\n%s", err, out)
	}
	if c := jp.Counts(); c.Create != 3 || c.Update != 2 || c.Delete != 1 || c.Invalid != 0 {
		t.Errorf("json counts %+v", c)
	}
	if s := jp.Scheduling; s == nil || s.Pending != 3 || len(s.Workloads) != 1 ||
		!strings.Contains(s.Workloads[0].Reason, "untolerated taint {node.flotilla.dev/no-pods: true}") {
		t.Errorf("json scheduling %+v, want the 3 pods of Deployment demo/web Pending on the no-pods taint", jp.Scheduling)
	}

	if after := snapshot(); !reflect.DeepEqual(before, after) {
		t.Errorf("plan changed the server:\nbefore %v\nafter  %v", before, after)
	}
}

func planFmtChanges(cs []FieldChange) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.Path + ": " + c.New + "\n")
	}
	return b.String()
}
