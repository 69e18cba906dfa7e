package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
