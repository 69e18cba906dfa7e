package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writeTree writes files (path relative to the returned directory -> content).
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// durations makes the timings of go test's output comparable.
var durations = regexp.MustCompile(`\d+\.\d\ds`)

func runPolicyTestOutput(t *testing.T, dir string, verbose bool) (bool, string) {
	t.Helper()
	var out bytes.Buffer
	ok, err := runPolicyTest(context.Background(), dir, verbose, &out)
	if err != nil {
		t.Fatal(err)
	}
	return ok, durations.ReplaceAllString(strings.ReplaceAll(out.String(), dir, "DIR"), "X.XXs")
}

func TestPolicyTestLibrary(t *testing.T) {
	var buf bytes.Buffer
	ok, err := runPolicyTest(context.Background(), "../../policies/library/", false, &buf)
	if err != nil {
		t.Fatal(err)
	}
	// Only the summary, with DIR as given (cleaned).
	if out := durations.ReplaceAllString(buf.String(), "X.XXs"); !ok || out != "ok  \t../../policies/library\tX.XXs\n" {
		t.Errorf("got ok=%v and\n%s", ok, out)
	}
}

// noConfigMapsPolicy refuses ConfigMaps whose data has key "forbidden".
const noConfigMapsPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-forbidden-key}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "!('forbidden' in object.?data.orValue({}))"
    message: remove data.forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-forbidden-key}
spec:
  policyName: no-forbidden-key
  validationActions: [Deny]
`

const plainConfigMap = `apiVersion: v1
kind: ConfigMap
metadata: {name: plain, namespace: apps}
data: {ok: "1"}
`

const forbiddenConfigMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: bad
  namespace: apps
  annotations:
    policies.flotilla.dev/expect-message: "remove data.forbidden"
data: {forbidden: "1"}
`

func TestPolicyTestOutput(t *testing.T) {
	dir := writeTree(t, map[string]string{
		// The root's policy applies to every test below it.
		"policy.yaml":                   noConfigMapsPolicy,
		"cms/allowed/plain.yaml":        plainConfigMap,
		"cms/denied/forbidden.yaml":     forbiddenConfigMap,
		"cms/denied/wrongly-plain.yaml": plainConfigMap,
		"cms/denied/other-message.yaml": strings.Replace(forbiddenConfigMap, `"remove data.forbidden"`, `"something else"`, 1),
		// A sibling's policy does not apply here: its fixtures only see the root's.
		"strict/policy.yaml": strings.ReplaceAll(strings.Replace(noConfigMapsPolicy, `"!('forbidden' in object.?data.orValue({}))"`, `"false"`, 1),
			"no-forbidden-key", "no-configmaps"),
		"strict/denied/plain.yaml": plainConfigMap,
	})

	ok, out := runPolicyTestOutput(t, dir, false)
	want := `--- FAIL: cms/denied/other-message.yaml (X.XXs)
    want a denial containing "something else", got: configmaps "bad" is forbidden: ValidatingAdmissionPolicy 'no-forbidden-key' with binding 'no-forbidden-key' denied request: remove data.forbidden
--- FAIL: cms/denied/wrongly-plain.yaml (X.XXs)
    want denied, got admitted
FAIL	DIR	X.XXs
`
	if ok || out != want {
		t.Errorf("got ok=%v and\n%s\nwant\n%s", ok, out, want)
	}

	ok, out = runPolicyTestOutput(t, dir, true)
	want = `=== RUN   cms/allowed/plain.yaml
--- PASS: cms/allowed/plain.yaml (X.XXs)
=== RUN   cms/denied/forbidden.yaml
--- PASS: cms/denied/forbidden.yaml (X.XXs)
=== RUN   cms/denied/other-message.yaml
--- FAIL: cms/denied/other-message.yaml (X.XXs)
    want a denial containing "something else", got: configmaps "bad" is forbidden: ValidatingAdmissionPolicy 'no-forbidden-key' with binding 'no-forbidden-key' denied request: remove data.forbidden
=== RUN   cms/denied/wrongly-plain.yaml
--- FAIL: cms/denied/wrongly-plain.yaml (X.XXs)
    want denied, got admitted
=== RUN   strict/denied/plain.yaml
--- PASS: strict/denied/plain.yaml (X.XXs)
FAIL	DIR	X.XXs
`
	if ok || out != want {
		t.Errorf("verbose: got ok=%v and\n%s\nwant\n%s", ok, out, want)
	}
}

func TestPolicyTestAllowedFails(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"policy.yaml":              noConfigMapsPolicy,
		"allowed/forbidden.yaml":   forbiddenConfigMap,
		"denied/also-plain.yml":    "# two objects: each must be refused\n" + forbiddenConfigMap + "---\n" + plainConfigMap,
		"allowed/not-a-fixture.md": "ignored",
	})
	ok, out := runPolicyTestOutput(t, dir, false)
	want := `--- FAIL: allowed/forbidden.yaml (X.XXs)
    want admitted, got denied: configmaps "bad" is forbidden: ValidatingAdmissionPolicy 'no-forbidden-key' with binding 'no-forbidden-key' denied request: remove data.forbidden
--- FAIL: denied/also-plain.yml (X.XXs)
    ConfigMap plain: want denied, got admitted
FAIL	DIR	X.XXs
`
	if ok || out != want {
		t.Errorf("got ok=%v and\n%s\nwant\n%s", ok, out, want)
	}
}

func TestPolicyTestLoadFailures(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"typed/policy.yaml":        strings.Replace(noConfigMapsPolicy, `"!('forbidden' in object.?data.orValue({}))"`, `"object.spec.replicas > 1"`, 1),
		"typed/allowed/plain.yaml": plainConfigMap,
		"yaml/policy.yaml":         "apiVersion: v1\nkind: [\n",
		"yaml/allowed/plain.yaml":  plainConfigMap,
		"ok/policy.yaml":           noConfigMapsPolicy,
		"ok/allowed/plain.yaml":    plainConfigMap,
	})
	ok, out := runPolicyTestOutput(t, dir, false)
	for _, want := range []string{
		"--- FAIL: typed (X.XXs)\n    typed/policy.yaml: ValidatingAdmissionPolicy no-forbidden-key: spec.validations[0].expression: /v1, Kind=ConfigMap: ERROR: <input>:1:7: undefined field 'spec'",
		"--- FAIL: yaml (X.XXs)\n    yaml/policy.yaml: document 1: ",
		"FAIL\tDIR\tX.XXs\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
	if ok || strings.Contains(out, "ok/") {
		t.Errorf("got ok=%v and\n%s", ok, out)
	}
}

func TestPolicyTestNoTests(t *testing.T) {
	dir := writeTree(t, map[string]string{"policy.yaml": noConfigMapsPolicy})
	_, err := runPolicyTest(context.Background(), dir, false, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no policy tests found") || !strings.Contains(err.Error(), "allowed/*.yaml") {
		t.Errorf("got %v, want an error describing the layout", err)
	}
	if _, err := runPolicyTest(context.Background(), filepath.Join(dir, "missing"), false, &bytes.Buffer{}); err == nil {
		t.Error("a missing directory: want an error")
	}
}
