package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"

	"github.com/flotilla-dev/flotilla/gitsync"
)

const planTestCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, maximum: 10}
`

func planTestRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestPlanOfflineNamesAndCRDs: an offline plan reads a directory whose name has "+" and a
// space, and names the field of a custom resource that violates the revision's definition.
func TestPlanOfflineNamesAndCRDs(t *testing.T) {
	dir := "manifests/ha-1.21+/my app"
	repo := planTestRepo(t, map[string]string{
		dir + "/crd.yaml":   planTestCRD,
		dir + "/ok.yaml":    "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: ok, namespace: demo}\nspec: {size: 3}\n",
		dir + "/cm+1.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n",
		"other/ignored.txt": "not rendered",
	})

	var out bytes.Buffer
	code, err := runPlan(context.Background(), planOptions{path: dir, output: "text"}, repo, &out)
	if err != nil || code != 0 {
		t.Fatalf("valid revision: code %d, err %v\n%s", code, err, out.String())
	}
	for _, want := range []string{dir + "/ok.yaml", dir + "/cm+1.yaml", "widgets.example.com"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan does not list %s:\n%s", want, out.String())
		}
	}

	if err := os.WriteFile(filepath.Join(repo, dir, "bad.yaml"),
		[]byte("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: bad, namespace: demo}\nspec: {size: 11}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	code, err = runPlan(context.Background(), planOptions{path: dir, output: "json"}, repo, &out)
	if code != 1 || err == nil || !strings.Contains(err.Error(), "1 object(s) failed validation") {
		t.Fatalf("invalid revision: code %d, err %v", code, err)
	}
	want := dir + "/bad.yaml: Widget demo/bad: spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("plan does not name the field (%q):\n%s", want, out.String())
	}
}

const planTestDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports: [{name: http, containerPort: 80}]
`

// TestPlanOfflineValidates: without a cluster, plan validates every object as the API would
// (defaults, validation, strict fields, served kinds): a valid repository passes, and an
// invalid Deployment, an undeclared field or a kind nobody serves fail it, naming the object
// and the field as an online plan does.
func TestPlanOfflineValidates(t *testing.T) {
	repo := planTestRepo(t, map[string]string{
		"app/kustomization.yaml": "resources: [ns.yaml, web.yaml, svc.yaml, cm.yaml, ing.yaml]\n",
		"app/ns.yaml":            "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n",
		"app/web.yaml":           planTestDeployment,
		"app/svc.yaml":           "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: demo}\nspec: {selector: {app: web}, ports: [{port: 80, targetPort: http}]}\n",
		"app/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: demo}\ndata: {KEY: v}\n",
		"app/ing.yaml": `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: demo}
spec:
  rules:
  - host: web.example.com
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
`,
	})
	if _, err := git.PlainInit(repo, false); err != nil {
		t.Fatal(err)
	}
	plan := func(output string, detailed bool) (string, int, error) {
		t.Helper()
		var out bytes.Buffer
		code, err := runPlan(context.Background(), planOptions{path: "app", output: output, detailed: detailed}, repo, &out)
		return out.String(), code, err
	}

	out, code, err := plan("text", true)
	if err != nil || code != 0 {
		t.Fatalf("valid revision: code %d, err %v\n%s", code, err, out)
	}
	for _, want := range []string{"flotilla plan: path app (offline: every object validated as flotilla's API would", "app/web.yaml: Deployment default/web\n",
		"app/ing.yaml: Ingress demo/web\n", "Rendered 5 object(s) from app (offline: not compared with a cluster).\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("valid plan lacks %q:\n%s", want, out)
		}
	}

	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(repo, "app", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("web.yaml", strings.Replace(planTestDeployment, "        image: nginx:1.27\n", "", 1))
	out, code, err = plan("text", true)
	if code != 1 || err == nil || !strings.Contains(err.Error(), "1 object(s) failed validation") {
		t.Fatalf("invalid Deployment: code %d, err %v\n%s", code, err, out)
	}
	for _, want := range []string{
		"! invalid  app/web.yaml: Deployment default/web: spec.template.spec.containers[0].image: Required value",
		"Rendered 5 object(s) from app (offline: not compared with a cluster), 1 invalid: nothing of this revision would be applied.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("invalid plan lacks %q:\n%s", want, out)
		}
	}

	// An undeclared field, and a kind that is neither served nor defined by the revision.
	write("web.yaml", strings.Replace(planTestDeployment, "selector:", "replica: 2\n  selector:", 1))
	write("kustomization.yaml", "resources: [ns.yaml, web.yaml, svc.yaml, cm.yaml, ing.yaml, widget.yaml]\n")
	write("widget.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: demo}\n")
	out, code, err = plan("json", false)
	if code != 1 || err == nil || !strings.Contains(err.Error(), "2 object(s) failed validation") {
		t.Fatalf("undeclared field and unknown kind: code %d, err %v\n%s", code, err, out)
	}
	for _, want := range []string{
		`"reason": "app/web.yaml: Deployment default/web: spec.replica: Forbidden: field not declared in schema"`,
		`"reason": "app/widget.yaml: Widget demo/w: kind example.com/v1, Kind=Widget is not served by the API"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("json plan lacks %s:\n%s", want, out)
		}
	}
	out, _, _ = plan("markdown", false)
	if !strings.HasPrefix(out, "❌ **flotilla plan** `app`: Rendered 6 object(s)") || !strings.Contains(out, "Offline: every object validated") {
		t.Errorf("markdown plan:\n%s", out)
	}
}

// TestPlanExitPending: with --detailed-exitcode, pods that would stay Pending make the plan
// fail (1, saying how many) before "changes" (2); without it they only show.
func TestPlanExitPending(t *testing.T) {
	p := &gitsync.Plan{Items: []gitsync.PlanItem{{Action: gitsync.PlanCreate, Kind: "Deployment", Namespace: "default", Name: "web"}},
		Scheduling: &gitsync.SchedulingReport{Nodes: 3, Pending: 2, Workloads: []gitsync.WorkloadScheduling{{Kind: "Deployment",
			Namespace: "default", Name: "web", Pods: 5, Fit: 3, Pending: 2, Reason: "0/3 nodes are available: 3 Insufficient memory."}}}}
	code, err := planExit(p, true)
	if code != 1 || err == nil || err.Error() != "2 pod(s) of this revision would stay Pending (see Scheduling)" {
		t.Errorf("pending, detailed: %d, %v", code, err)
	}
	if code, err := planExit(p, false); code != 0 || err != nil {
		t.Errorf("pending, not detailed: %d, %v", code, err)
	}
	p.Scheduling.Pending, p.Scheduling.Workloads[0].Pending = 0, 0
	if code, err := planExit(p, true); code != 2 || err != nil {
		t.Errorf("no pending, detailed: %d, %v", code, err)
	}
	p.Items = append(p.Items, gitsync.PlanItem{Action: gitsync.PlanInvalid, Reason: "bad"})
	p.Scheduling.Pending = 2
	if code, err := planExit(p, true); code != 1 || err == nil || !strings.Contains(err.Error(), "1 object(s) failed validation") {
		t.Errorf("invalid and pending: %d, %v", code, err)
	}
}
