package policies_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/policies"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
)

func TestMain(m *testing.M) {
	// The plugin's informers log their progress at info.
	klog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// objects decodes a multi-document YAML.
func objects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := policies.DecodeYAML([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func object(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	objs := objects(t, manifest)
	if len(objs) != 1 {
		t.Fatalf("want 1 object, got %d", len(objs))
	}
	return objs[0]
}

func newEngine(t *testing.T, manifest string) *policies.Engine {
	t.Helper()
	e, err := policies.NewEngine(objects(t, manifest), apiserver.OfflineRESTMapper())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func evaluate(t *testing.T, e *policies.Engine, manifest string) policies.Result {
	t.Helper()
	res, err := e.Evaluate(context.Background(), object(t, manifest))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

const configMapInApps = `
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: apps}
data: {mode: fast}
`

// maxKeysPolicy refuses ConfigMaps with more data keys than its param's data.max; bound in
// namespaces labelled team=a (with action ACTION).
const maxKeysPolicy = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: max-keys}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: object.?data.orValue({}).size() <= int(params.data.max)
    messageExpression: "'at most ' + params.data.max + ' keys'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: max-keys-team-a}
spec:
  policyName: max-keys
  validationActions: [ACTION]
  paramRef: {name: limits, namespace: policy-params, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector:
      matchLabels: {team: a}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: limits, namespace: policy-params}
data: {max: "0"}
---
apiVersion: v1
kind: Namespace
metadata:
  name: apps
  labels: {team: a}
`

func TestEngineParamsAndNamespaceSelector(t *testing.T) {
	e := newEngine(t, strings.Replace(maxKeysPolicy, "ACTION", "Deny", 1))

	res := evaluate(t, e, configMapInApps)
	want := `configmaps "settings" is forbidden: ValidatingAdmissionPolicy 'max-keys' with binding 'max-keys-team-a' denied request: at most 0 keys`
	if res.Denied == nil || res.Denied.Error() != want {
		t.Errorf("in a namespace the binding selects: got %v, want %s", res.Denied, want)
	}
	// A namespace not among the objects exists without the team label: not selected.
	if res := evaluate(t, e, strings.Replace(configMapInApps, "namespace: apps", "namespace: other", 1)); res.Denied != nil {
		t.Errorf("in a namespace the binding does not select: got %v, want admitted", res.Denied)
	}
	// Policies and bindings themselves are not evaluated against policies.
	for _, o := range objects(t, maxKeysPolicy)[:2] {
		if res, err := e.Evaluate(context.Background(), o); err != nil || res.Denied != nil {
			t.Errorf("%s: got %v, %v; want admitted", o.GetKind(), res.Denied, err)
		}
	}
}

func TestEngineParamNotFound(t *testing.T) {
	manifest := strings.Replace(maxKeysPolicy, "ACTION", "Deny", 1)
	manifest = strings.Replace(manifest, "name: limits,", "name: missing,", 1)
	res := evaluate(t, newEngine(t, manifest), configMapInApps)
	if res.Denied == nil || !strings.Contains(res.Denied.Error(), "ValidatingAdmissionPolicy 'max-keys' with binding 'max-keys-team-a' denied request: failed to configure binding: no params found") {
		t.Errorf("got %v, want a denial for the missing param", res.Denied)
	}
}

func TestEngineWarn(t *testing.T) {
	e := newEngine(t, strings.Replace(maxKeysPolicy, "ACTION", "Warn", 1))
	res := evaluate(t, e, configMapInApps)
	if res.Denied != nil {
		t.Errorf("got %v, want admitted", res.Denied)
	}
	want := []string{"Validation failed for ValidatingAdmissionPolicy 'max-keys' with binding 'max-keys-team-a': at most 0 keys"}
	if strings.Join(res.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings: got %q, want %q", res.Warnings, want)
	}
}

// A policy whose expression does not compile: the API accepts it, and its failurePolicy
// decides every request it matches.
const typeErrorPolicy = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: broken}
spec:
  failurePolicy: FAILURE
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "1 + 'a' == 2"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: broken}
spec:
  policyName: broken
  validationActions: [Deny]
`

func TestEngineTypeErrorFailurePolicy(t *testing.T) {
	res := evaluate(t, newEngine(t, strings.Replace(typeErrorPolicy, "FAILURE", "Fail", 1)), configMapInApps)
	if res.Denied == nil || !strings.Contains(res.Denied.Error(), "ValidatingAdmissionPolicy 'broken' with binding 'broken' denied request") ||
		!strings.Contains(res.Denied.Error(), "found no matching overload for '_+_'") {
		t.Errorf("failurePolicy Fail: got %v, want a denial naming the policy and the error", res.Denied)
	}
	res = evaluate(t, newEngine(t, strings.Replace(typeErrorPolicy, "FAILURE", "Ignore", 1)), configMapInApps)
	if res.Denied != nil {
		t.Errorf("failurePolicy Ignore: got %v, want admitted", res.Denied)
	}
}

func TestCheckPolicy(t *testing.T) {
	objs := objects(t, strings.Replace(typeErrorPolicy, "FAILURE", "Fail", 1))
	var p admissionregistrationv1.ValidatingAdmissionPolicy
	toTyped(t, objs[0], &p)
	problems := policies.CheckPolicy(&p, apiserver.OfflineRESTMapper())
	if len(problems) != 1 || !strings.HasPrefix(problems[0], "spec.validations[0].expression: compilation failed") {
		t.Errorf("got %q, want a compilation failure of spec.validations[0].expression", problems)
	}

	// Typed against the matched kind's schema: ConfigMaps have no spec.
	objs[0].Object["spec"].(map[string]any)["validations"] = []any{map[string]any{"expression": "object.spec.replicas > 1"}}
	toTyped(t, objs[0], &p)
	problems = policies.CheckPolicy(&p, apiserver.OfflineRESTMapper())
	if len(problems) != 1 || !strings.Contains(problems[0], "undefined field 'spec'") {
		t.Errorf("got %q, want undefined field 'spec'", problems)
	}

	// The library type-checks.
	lib, err := policies.Library(policies.SetRestricted)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range lib {
		if o.GetKind() != "ValidatingAdmissionPolicy" {
			continue
		}
		toTyped(t, o, &p)
		if problems := policies.CheckPolicy(&p, apiserver.OfflineRESTMapper()); len(problems) > 0 {
			t.Errorf("%s: %q", o.GetName(), problems)
		}
	}
}

func TestEngineNamespaceLabel(t *testing.T) {
	// Given Namespaces get kubernetes.io/metadata.name, so a NotIn selector on it excludes them.
	e := newEngine(t, `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-configmaps}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "false"
    message: no ConfigMaps here
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-configmaps}
spec:
  policyName: no-configmaps
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: NotIn, values: [apps]}
---
apiVersion: v1
kind: Namespace
metadata: {name: apps}
`)
	if res := evaluate(t, e, configMapInApps); res.Denied != nil {
		t.Errorf("excluded namespace: got %v, want admitted", res.Denied)
	}
	res := evaluate(t, e, strings.Replace(configMapInApps, "namespace: apps", "namespace: other", 1))
	if res.Denied == nil || !strings.Contains(res.Denied.Error(), "no ConfigMaps here") {
		t.Errorf("namespace not given: got %v, want denied", res.Denied)
	}
	// Without a namespace, a namespaced object is in "default", which exists.
	res = evaluate(t, e, strings.Replace(configMapInApps, "namespace: apps", "", 1))
	if res.Denied == nil || !strings.Contains(res.Denied.Error(), "no ConfigMaps here") {
		t.Errorf("no namespace: got %v, want denied", res.Denied)
	}
}

func TestEngineConcurrent(t *testing.T) {
	objs, err := policies.Library(policies.SetRestricted)
	if err != nil {
		t.Fatal(err)
	}
	e, err := policies.NewEngine(objs, apiserver.OfflineRESTMapper())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	pod := `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: NS}
spec:
  containers:
  - name: c
    image: nginx:latest
    securityContext: {privileged: true}
`
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			ns := []string{"a", "b", "c", "d"}[i%4]
			res, err := e.Evaluate(context.Background(), object(t, strings.Replace(pod, "NS", ns, 1)))
			if err != nil || res.Denied == nil {
				t.Errorf("%s: got %v, %v; want denied", ns, res.Denied, err)
			}
		})
	}
	wg.Wait()
}

func TestEngineUnknownKind(t *testing.T) {
	e := newEngine(t, "")
	_, err := e.Evaluate(context.Background(), object(t, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n"))
	if err == nil || !strings.Contains(err.Error(), `Widget "w": kind not known`) {
		t.Errorf("got %v, want an error for the unknown kind", err)
	}
}

func TestEngineCustomResources(t *testing.T) {
	e := newEngine(t, `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: small-widgets}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [example.com], apiVersions: [v1], operations: [CREATE], resources: [widgets]}
  validations:
  - expression: object.spec.size < 10
    message: widgets must be smaller than 10
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: small-widgets}
spec:
  policyName: small-widgets
  validationActions: [Deny]
`)
	res := evaluate(t, e, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: apps}\nspec: {size: 12}\n")
	want := `widgets.example.com "w" is forbidden: ValidatingAdmissionPolicy 'small-widgets' with binding 'small-widgets' denied request: widgets must be smaller than 10`
	if res.Denied == nil || res.Denied.Error() != want {
		t.Errorf("got %v, want %s", res.Denied, want)
	}
}

func toTyped(t *testing.T, o *unstructured.Unstructured, typed any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, typed); err != nil {
		t.Fatal(err)
	}
}
