// Package examples_test keeps the example repositories working: each renders as gitsync
// renders it and passes a server-side dry-run on a real agent, so a broken example fails
// `make test`.
package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// example is one repository (root) and the path a site would give as --git-path.
type example struct {
	name, root, path string
	// want lists "Kind namespace/name" of every rendered object; a name ending in "-*"
	// matches a kustomize-generated name with a hash suffix.
	want []string
}

var fleetBase = []string{"Namespace hello", "ConfigMap hello/site-config-*", "Service hello/hello",
	"Deployment hello/hello", "Ingress hello/hello"}

// fleetSites are the sites of examples/fleet and what each differs in.
var fleetSites = map[string]struct {
	replicas int64
	version  string
	extra    []string
}{
	"shop-berlin":   {3, "v1", nil},
	"shop-lisbon":   {2, "v1", nil},
	"factory-porto": {1, "v1", []string{"ConfigMap hello/line-config"}},
}

func dir(parts ...string) string {
	return filepath.Join(append([]string{framework.RepoRoot(), "examples"}, parts...)...)
}

// allExamples lists every example; fleet sites are read from the tree, so a new site is
// tested without editing this file (and must be added to fleetSites).
func allExamples(t *testing.T) []example {
	t.Helper()
	out := []example{
		{"hello", dir("hello"), ".", []string{"Namespace hello", "Service hello/hello", "Deployment hello/hello", "Ingress hello/hello"}},
		{"web-statefulset", dir("web-statefulset"), ".", []string{"Service nginx", "StatefulSet web"}},
		{"node-agent-daemonset", dir("node-agent-daemonset"), ".", []string{"DaemonSet kube-system/node-agent"}},
	}
	sites, err := os.ReadDir(dir("fleet", "sites"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sites {
		site, ok := fleetSites[s.Name()]
		if !ok {
			t.Errorf("fleet site %s is not listed in fleetSites: add what it should render", s.Name())
			continue
		}
		out = append(out, example{"fleet/" + s.Name(), dir("fleet"), "sites/" + s.Name(), slices.Concat(fleetBase, site.extra)})
	}
	if len(out) < 3+len(fleetSites) {
		t.Fatalf("found %d examples, want %d", len(out), 3+len(fleetSites))
	}
	return out
}

func ref(kind, ns, name string) string {
	if ns == "" {
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}

// checkObjects compares the rendered refs with want (order-free, "-*" hash wildcards).
func checkObjects(t *testing.T, got, want []string) {
	t.Helper()
	rest := slices.Clone(got)
	for _, w := range want {
		i := slices.IndexFunc(rest, func(g string) bool {
			if p, ok := strings.CutSuffix(w, "-*"); ok {
				return strings.HasPrefix(g, p+"-") && len(g) > len(p)+1
			}
			return g == w
		})
		if i < 0 {
			t.Errorf("missing %s; rendered %v", w, got)
			continue
		}
		rest = slices.Delete(rest, i, i+1)
	}
	if len(rest) > 0 {
		t.Errorf("unexpected objects %v", rest)
	}
}

func TestExamplesRender(t *testing.T) {
	for _, ex := range allExamples(t) {
		t.Run(ex.name, func(t *testing.T) {
			objs, err := gitsync.Render(context.Background(), ex.root, ex.path, gitsync.Limits{})
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, ref(o.Obj.GetKind(), o.Obj.GetNamespace(), o.Obj.GetName()))
			}
			checkObjects(t, got, ex.want)
		})
	}
}

// TestFleetSitesDiffer checks what each overlay changes: replicas, the SITE value, and
// that the Deployment reads the hashed ConfigMap name kustomize generated.
func TestFleetSitesDiffer(t *testing.T) {
	for name, site := range fleetSites {
		t.Run(name, func(t *testing.T) {
			objs, err := gitsync.Render(context.Background(), dir("fleet"), "sites/"+name, gitsync.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			var deploy, cm *unstructured.Unstructured
			for _, o := range objs {
				switch {
				case o.Obj.GetKind() == "Deployment":
					deploy = o.Obj
				case o.Obj.GetKind() == "ConfigMap" && strings.HasPrefix(o.Obj.GetName(), "site-config-"):
					cm = o.Obj
				}
			}
			if deploy == nil || cm == nil {
				t.Fatalf("Deployment %v, site ConfigMap %v", deploy != nil, cm != nil)
			}
			if r, _, _ := unstructured.NestedInt64(deploy.Object, "spec", "replicas"); r != site.replicas {
				t.Errorf("replicas = %d, want %d", r, site.replicas)
			}
			if v, _, _ := unstructured.NestedString(cm.Object, "data", "SITE"); v != name {
				t.Errorf("site-config SITE = %q, want %q", v, name)
			}
			containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
			b, _ := json.Marshal(containers)
			if !strings.Contains(string(b), `"configMapRef":{"name":"`+cm.GetName()+`"}`) {
				t.Errorf("Deployment does not read ConfigMap %s: %s", cm.GetName(), b)
			}
			if !strings.Contains(string(b), `{"name":"VERSION","value":"`+site.version+`"}`) {
				t.Errorf("VERSION is not %s: %s", site.version, b)
			}
			if !strings.Contains(string(b), `"image":"flotilla.local/hello:latest"`) {
				t.Errorf("image: %s", b)
			}
		})
	}
}

// TestExamplesDryRun validates every example against a real API server exactly as
// gitsync validates a revision before applying it (dryRun=All, fieldValidation=Strict).
func TestExamplesDryRun(t *testing.T) {
	exs := allExamples(t)
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	cctx, err := controllers.NewContext(a.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ap := &gitsync.Applier{Dynamic: cctx.Dynamic, Mapper: cctx.RESTMapper}
	ctx := context.Background()
	for _, ex := range exs {
		t.Run(ex.name, func(t *testing.T) {
			objs, err := gitsync.Render(context.Background(), ex.root, ex.path, gitsync.Limits{})
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			objs, fails := ap.Prepare(objs, "kube-system.root")
			fails = append(fails, ap.Validate(ctx, objs)...)
			if len(fails) > 0 {
				t.Errorf("%d object(s) fail the dry-run:\n%s", len(fails), strings.Join(fails, "\n"))
			}
			if len(objs) != len(ex.want) {
				t.Errorf("validated %d objects, want %d", len(objs), len(ex.want))
			}
		})
	}
	// The check can fail: a broken object is reported in gitsync's shape.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "bad.yaml"), []byte("apiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {ports: [{port: 99999}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := gitsync.Render(context.Background(), bad, ".", gitsync.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	objs, _ = ap.Prepare(objs, "kube-system.root")
	if fails := ap.Validate(ctx, objs); len(fails) != 1 || !strings.HasPrefix(fails[0], "bad.yaml: Service default/bad: spec.ports[0].port") {
		t.Errorf("broken object: %v", fails)
	}
}

// TestFleetPlanOffline runs the built `flotilla plan` on each fleet site without a cluster,
// as a reviewer would, and checks the objects it lists.
func TestFleetPlanOffline(t *testing.T) {
	bin := framework.FlotillaBin(t)
	for name, site := range fleetSites {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin, "plan", "--path", "sites/"+name, "--output", "json", "--detailed-exitcode", dir("fleet"))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("flotilla plan: %v\n%s", err, stderr.String())
			}
			var p gitsync.Plan
			if err := json.Unmarshal(stdout.Bytes(), &p); err != nil {
				t.Fatalf("plan output: %v\n%s", err, stdout.String())
			}
			if !p.Offline || p.Path != "sites/"+name {
				t.Errorf("offline %v, path %q", p.Offline, p.Path)
			}
			var got []string
			for _, it := range p.Items {
				// Generated objects (configMapGenerator) have no file of their own.
				generated := strings.HasPrefix(it.Name, "site-config-")
				if it.Action != gitsync.PlanRendered || (it.File == "") != generated {
					t.Errorf("item %+v: want action rendered with its file", it)
				}
				got = append(got, ref(it.Kind, it.Namespace, it.Name))
			}
			checkObjects(t, got, slices.Concat(fleetBase, site.extra))

			// Text output names each object with its file.
			out, err := exec.Command(bin, "plan", "--path", "sites/"+name, dir("fleet")).Output()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), "base/deployment.yaml: Deployment hello/hello\n") {
				t.Errorf("text plan:\n%s", out)
			}
		})
	}

	t.Run("render error exits 1", func(t *testing.T) {
		cmd := exec.Command(bin, "plan", "--path", "sites/no-such-site", dir("fleet"))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "sites/no-such-site") {
			t.Errorf("exit %v, output %s", err, out)
		}
	})
}

// TestCIWorkflows checks that the CI examples parse and run the plan the README promises.
func TestCIWorkflows(t *testing.T) {
	for _, f := range []string{"github/flotilla-plan.yml", "gitea/flotilla-plan.yml"} {
		b, err := os.ReadFile(dir("ci", f))
		if err != nil {
			t.Fatal(err)
		}
		var wf struct {
			On map[string]any `json:"on"`
			// YAML 1.1 reads a bare `on` key as true.
			True map[string]any `json:"true"`
			Jobs map[string]struct {
				Steps []map[string]any `json:"steps"`
			} `json:"jobs"`
		}
		if err := yaml.Unmarshal(b, &wf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		_, ok1 := wf.On["pull_request"]
		if _, ok2 := wf.True["pull_request"]; !ok1 && !ok2 {
			t.Errorf("%s: not run on pull requests", f)
		}
		steps := wf.Jobs["plan"].Steps
		var runs []string
		for _, s := range steps {
			if r, ok := s["run"].(string); ok {
				runs = append(runs, r)
			}
		}
		all := strings.Join(runs, "\n")
		for _, want := range []string{`flotilla plan "${args[@]}"`, "--output markdown", "--detailed-exitcode", "--kubeconfig"} {
			if !strings.Contains(all, want) {
				t.Errorf("%s: no %q in its steps", f, want)
			}
		}
	}
}
