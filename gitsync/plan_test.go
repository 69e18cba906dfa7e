package gitsync

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func planObj(t *testing.T, y string) map[string]any {
	t.Helper()
	if y == "" {
		return nil
	}
	var m map[string]any
	b, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	// Through JSON into unstructured, so numbers are int64 as the API client gives them.
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	m = u.Object
	return m
}

const liveDeploy = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
  uid: 1234
  resourceVersion: "77"
  generation: 3
  creationTimestamp: "2026-01-01T00:00:00Z"
  managedFields: [{manager: flotilla-gitsync, operation: Apply}]
  labels: {app: web, flotilla.dev/source: kube-system.root}
  annotations: {deployment.kubernetes.io/revision: "2"}
spec:
  replicas: 2
  template:
    spec:
      containers:
      - name: web
        image: nginx:1
        args: [a, b]
        env:
        - {name: A, value: "1"}
        - {name: B, value: "2"}
        ports:
        - {containerPort: 80, protocol: TCP}
status:
  replicas: 2
`

func TestDiffObjects(t *testing.T) {
	// planned is live with one edit applied by repl (old -> new).
	edit := func(pairs ...string) string { return strings.NewReplacer(pairs...).Replace(liveDeploy) }
	tests := []struct {
		name          string
		live, planned string
		want          []FieldChange
	}{
		{"identical", liveDeploy, liveDeploy, nil},
		{"only server noise differs", liveDeploy, edit(`resourceVersion: "77"`, `resourceVersion: "78"`, "generation: 3", "generation: 4",
			"uid: 1234", "uid: 999", "manager: flotilla-gitsync", "manager: kubectl"), nil},
		{"a scalar changes", liveDeploy, edit("replicas: 2\nspec", "replicas: 2\nspec", "spec:\n  replicas: 2", "spec:\n  replicas: 3"),
			[]FieldChange{{Path: "spec.replicas", Old: "2", New: "3"}}},
		{"a container field, by name", liveDeploy, edit("nginx:1", "nginx:2"),
			[]FieldChange{{Path: "spec.template.spec.containers[name=web].image", Old: `"nginx:1"`, New: `"nginx:2"`}}},
		{"env var inserted first is one addition, not a shift", liveDeploy,
			edit(`        - {name: A, value: "1"}`, "        - {name: Z, value: \"0\"}\n        - {name: A, value: \"1\"}"),
			[]FieldChange{{Path: "spec.template.spec.containers[name=web].env[name=Z].name", New: `"Z"`},
				{Path: "spec.template.spec.containers[name=web].env[name=Z].value", New: `"0"`}}},
		{"env var removed", liveDeploy, edit("        - {name: B, value: \"2\"}\n", ""),
			[]FieldChange{{Path: "spec.template.spec.containers[name=web].env[name=B].name", Old: `"B"`},
				{Path: "spec.template.spec.containers[name=web].env[name=B].value", Old: `"2"`}}},
		{"scalar list is one value", liveDeploy, edit("args: [a, b]", "args: [a, c]"),
			[]FieldChange{{Path: "spec.template.spec.containers[name=web].args", Old: `["a","b"]`, New: `["a","c"]`}}},
		{"port keyed by containerPort", liveDeploy, edit("protocol: TCP", "protocol: UDP"),
			[]FieldChange{{Path: "spec.template.spec.containers[name=web].ports[containerPort=80].protocol", Old: `"TCP"`, New: `"UDP"`}}},
		{"label with dots is quoted", liveDeploy, edit("flotilla.dev/source: kube-system.root", "flotilla.dev/source: other"),
			[]FieldChange{{Path: `metadata.labels["flotilla.dev/source"]`, Old: `"kube-system.root"`, New: `"other"`}}},
		{"last-applied annotation is noise", liveDeploy,
			edit(`annotations: {deployment.kubernetes.io/revision: "2"}`, `annotations: {deployment.kubernetes.io/revision: "2", kubectl.kubernetes.io/last-applied-configuration: "{}"}`), nil},
		{"status is ignored", liveDeploy, edit("status:\n  replicas: 2", "status:\n  replicas: 0"), nil},
		{"create lists every field git sets", "", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: demo}\ndata: {k: v}\n",
			[]FieldChange{{Path: "apiVersion", New: `"v1"`}, {Path: "kind", New: `"ConfigMap"`},
				{Path: "metadata.name", New: `"c"`}, {Path: "metadata.namespace", New: `"demo"`}, {Path: "data.k", New: `"v"`}}},
		{"map becomes empty", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: v}\n", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {}\n",
			[]FieldChange{{Path: "data.k", Old: `"v"`}}},
		{"unkeyed list by position", "kind: X\nspec: {rules: [{host: a}, {host: b}]}\n", "kind: X\nspec: {rules: [{host: a}, {host: c}, {host: d}]}\n",
			[]FieldChange{{Path: "spec.rules[1].host", Old: `"b"`, New: `"c"`}, {Path: "spec.rules[2].host", New: `"d"`}}},
		{"duplicate names fall back to position", "kind: X\nspec: {l: [{name: a, v: 1}, {name: a, v: 2}]}\n", "kind: X\nspec: {l: [{name: a, v: 1}, {name: a, v: 3}]}\n",
			[]FieldChange{{Path: "spec.l[1].v", Old: "2", New: "3"}}},
		{"type change is one value", "kind: X\nspec: {v: {a: 1}}\n", "kind: X\nspec: {v: 5}\n",
			[]FieldChange{{Path: "spec.v", Old: `{"a":1}`, New: "5"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DiffObjects(planObj(t, tc.live), planObj(t, tc.planned))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("DiffObjects:\n got  %+v\n want %+v", got, tc.want)
			}
		})
	}
}

func TestPruneKeepReason(t *testing.T) {
	const src = "kube-system.root"
	mk := func(kind, name string, labels, ann map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind(kind)
		u.SetName(name)
		u.SetLabels(labels)
		u.SetAnnotations(ann)
		return u
	}
	mine := map[string]string{SourceLabel: src}
	tests := []struct {
		name string
		live *unstructured.Unstructured
		want string // substring; "" = deleted
	}{
		{"labelled: deleted", mk("ConfigMap", "a", mine, nil), ""},
		{"other source's label", mk("ConfigMap", "a", map[string]string{SourceLabel: "default.apps"}, nil), `is "default.apps"`},
		{"no label", mk("ConfigMap", "a", nil, nil), "no longer this source's"},
		{"prune disabled", mk("ConfigMap", "a", mine, map[string]string{PruneAnnotation: "disabled"}), "prune: disabled"},
		{"namespace it created: deleted", mk("Namespace", "demo", mine, map[string]string{CreatedByAnnotation: src}), ""},
		{"namespace it did not create", mk("Namespace", "demo", mine, nil), "not created by this source"},
		{"protected namespace", mk("Namespace", "kube-public", mine, map[string]string{CreatedByAnnotation: src}), "never pruned"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PruneKeepReason(tc.live, src)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("PruneKeepReason = %q, want %q", got, tc.want)
			}
		})
	}
}

func samplePlan() *Plan {
	return &Plan{Source: "kube-system/root", Path: "sites/a", Items: []PlanItem{
		{Action: PlanUnchanged, Kind: "Namespace", Name: "demo", File: "sites/a/ns.yaml"},
		{Action: PlanCreate, Kind: "ConfigMap", Namespace: "demo", Name: "fresh", File: "sites/a/cm.yaml",
			Changes: []FieldChange{{Path: "data.x", New: `"y"`}}},
		{Action: PlanUpdate, Kind: "Deployment", Namespace: "demo", Name: "web", File: "base/deploy.yaml",
			Changes: []FieldChange{{Path: "spec.replicas", Old: "2", New: "3"}}},
		{Action: PlanDelete, Kind: "Service", Namespace: "demo", Name: "old"},
		{Action: PlanKeep, Kind: "ConfigMap", Namespace: "demo", Name: "keep", Reason: "annotated flotilla.dev/prune: disabled"},
	}}
}

func TestPlanExitCode(t *testing.T) {
	changes := samplePlan()
	none := &Plan{Items: []PlanItem{{Action: PlanUnchanged}, {Action: PlanKeep}}}
	invalid := samplePlan()
	invalid.Items = append(invalid.Items, PlanItem{Action: PlanInvalid, Reason: "bad.yaml: Deployment demo/bad: spec: x"})
	offline := &Plan{Offline: true, Items: []PlanItem{{Action: PlanRendered}}}
	tests := []struct {
		name     string
		p        *Plan
		detailed bool
		want     int
	}{
		{"changes", changes, false, 0},
		{"changes, detailed", changes, true, 2},
		{"no changes, detailed", none, true, 0},
		{"invalid", invalid, false, 1},
		{"invalid, detailed", invalid, true, 1},
		{"offline, detailed", offline, true, 0},
	}
	for _, tc := range tests {
		if got := tc.p.ExitCode(tc.detailed); got != tc.want {
			t.Errorf("%s: ExitCode = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestPlanText(t *testing.T) {
	p := samplePlan()
	p.Items = append(p.Items, PlanItem{Action: PlanInvalid, Kind: "Deployment", Reason: "bad.yaml: Deployment demo/bad: spec.template.metadata.labels: Invalid value"})
	got := p.Text()
	want := `flotilla plan: GitSource kube-system/root, path sites/a
+ create    ConfigMap demo/fresh (sites/a/cm.yaml)
~ update    Deployment demo/web (base/deploy.yaml)
      - spec.replicas: 2
      + spec.replicas: 3
- delete    Service demo/old
= keep      ConfigMap demo/keep: annotated flotilla.dev/prune: disabled
! invalid  bad.yaml: Deployment demo/bad: spec.template.metadata.labels: Invalid value
Plan: 1 to create, 1 to update, 1 to delete, 1 unchanged, 1 kept, 1 invalid: nothing of this revision would be applied.
`
	if got != want {
		t.Errorf("Text:\n%s\nwant:\n%s", got, want)
	}
	off := &Plan{Offline: true, Path: "sites/a", Items: []PlanItem{{Action: PlanRendered, Kind: "Namespace", Name: "demo", File: "base/ns.yaml"}}}
	off.Items = append(off.Items, PlanItem{Action: PlanInvalid, Kind: "Deployment", Namespace: "demo", Name: "bad", File: "base/bad.yaml",
		Reason: "base/bad.yaml: Deployment demo/bad: spec.template.spec.containers[0].image: Required value"})
	want = `flotilla plan: path sites/a (` + planOfflineNote + `)
! invalid  base/bad.yaml: Deployment demo/bad: spec.template.spec.containers[0].image: Required value
base/ns.yaml: Namespace demo
Rendered 2 object(s) from sites/a (offline: not compared with a cluster), 1 invalid: nothing of this revision would be applied.
`
	if got := off.Text(); got != want {
		t.Errorf("offline Text:\n%s\nwant:\n%s", got, want)
	}
	off.Items = off.Items[:1]
	if got, want := off.Text(), "flotilla plan: path sites/a ("+planOfflineNote+")\nbase/ns.yaml: Namespace demo\nRendered 1 object(s) from sites/a (offline: not compared with a cluster).\n"; got != want {
		t.Errorf("offline Text = %q, want %q", got, want)
	}
}

func TestPlanMarkdown(t *testing.T) {
	p := samplePlan()
	p.Items[4].Reason = "a | b\nc"
	md := p.Markdown()
	lines := strings.Split(md, "\n")
	if !strings.HasPrefix(lines[0], "📝 **flotilla plan** `sites/a`: Plan: 1 to create, 1 to update, 1 to delete, 1 unchanged, 1 kept.") {
		t.Errorf("first line = %q", lines[0])
	}
	for _, want := range []string{
		"| | Action | Object | File | Details |",
		"| ~ | update | `Deployment demo/web` | `base/deploy.yaml` | 1 field(s) change |",
		"| - | delete | `Service demo/old` |  |  |",
		`| = | keep | ` + "`ConfigMap demo/keep`" + ` |  | a \| b<br>c |`,
		"<details><summary>~ update <code>Deployment demo/web</code> (1 field(s))</summary>\n\n```diff\n- spec.replicas: 2\n+ spec.replicas: 3\n```\n\n</details>",
		"<details><summary>1 unchanged</summary>\n\n`Namespace demo`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Index(md, "| ~ | update") > strings.Index(md, "<details>") {
		t.Error("the table must come before the diffs")
	}

	// A huge plan stays under the comment limit and says what it left out.
	big := &Plan{Source: "a/b", Path: "."}
	for i := 0; i < 400; i++ {
		big.Items = append(big.Items, PlanItem{Action: PlanUpdate, Kind: "ConfigMap", Name: "c", Namespace: "n",
			Changes: []FieldChange{{Path: "data.k", Old: `"` + strings.Repeat("x", 200) + `"`, New: `"y"`}}})
	}
	md = big.Markdown()
	if len(md) > MarkdownLimit+200 || !strings.Contains(md, "left out to fit a comment") {
		t.Errorf("big markdown: %d bytes, note present %v", len(md), strings.Contains(md, "left out"))
	}
}

func TestPlanJSON(t *testing.T) {
	b, err := samplePlan().JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, samplePlan()) {
		t.Errorf("JSON round trip changed the plan:\n%s", b)
	}
	if !strings.Contains(string(b), `"action": "update"`) || !strings.Contains(string(b), `"path": "spec.replicas"`) {
		t.Errorf("JSON field names: %s", b)
	}
}

// TestPlanOfflineExamples: every example repository passes the offline plan, which validates
// each object as the API would (the examples pass a server-side dry-run in examples/).
func TestPlanOfflineExamples(t *testing.T) {
	root := filepath.Join("..", "examples")
	dirs := [][2]string{{"hello", "."}, {"web-statefulset", "."}, {"node-agent-daemonset", "."}}
	sites, err := os.ReadDir(filepath.Join(root, "fleet", "sites"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sites {
		dirs = append(dirs, [2]string{"fleet", "sites/" + s.Name()})
	}
	for _, d := range dirs {
		t.Run(d[0]+"/"+d[1], func(t *testing.T) {
			p, err := PlanOffline(filepath.Join(root, d[0]), d[1], Limits{}, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Items) == 0 {
				t.Fatal("no objects")
			}
			for _, it := range p.Items {
				if it.Action != PlanRendered {
					t.Errorf("%s: %s %s", it.Ref(), it.Action, it.Reason)
				}
			}
		})
	}
}
