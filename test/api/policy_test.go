package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/test/framework"
)

const policyObjects = `
apiVersion: v1
kind: Namespace
metadata:
  name: policed
  labels: {policies: enforced}
---
apiVersion: v1
kind: Namespace
metadata:
  name: free
---
apiVersion: v1
kind: Namespace
metadata:
  name: policy-params
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: require-team
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
  matchConditions:
  - name: not-kube-root-ca
    expression: object.metadata.name != 'kube-root-ca.crt'
  variables:
  - name: labels
    expression: "has(object.metadata.labels) ? object.metadata.labels : {}"
  validations:
  - expression: "'team' in variables.labels"
    messageExpression: "'configmap ' + object.metadata.name + ' has no team label'"
  auditAnnotations:
  - key: team
    valueExpression: "string(has(object.metadata.labels) && 'team' in object.metadata.labels ? object.metadata.labels['team'] : 'none')"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: require-team-deny
spec:
  policyName: require-team
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {policies: enforced}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: require-team-warn
spec:
  policyName: require-team
  validationActions: [Warn]
  matchResources:
    namespaceSelector:
      matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: In, values: [free]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: name-prefix
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [secrets]
  validations:
  - expression: object.metadata.name.startsWith(params.data.prefix)
    messageExpression: "'secret names must start with ' + params.data.prefix"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: name-prefix
spec:
  policyName: name-prefix
  validationActions: [Deny]
  paramRef:
    name: prefix
    namespace: policy-params
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchLabels: {policies: enforced}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: broken-ignored
spec:
  failurePolicy: Ignore
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [services]
  validations:
  - expression: object.metadata.annotations['missing'] == 'x'
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: broken-ignored
spec:
  policyName: broken-ignored
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {policies: enforced}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: type-error
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [deployments]
  validations:
  - expression: object.spec.replicas == 'three'
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: broken-fail
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [serviceaccounts]
  validations:
  - expression: object.metadata.annotations['missing'] == 'x'
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: broken-fail
spec:
  policyName: broken-fail
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {policies: enforced}
`

// TestValidatingAdmissionPolicy applies ValidatingAdmissionPolicies and bindings with kubectl
// and checks that writes are judged by them: Deny and Warn actions per binding, namespace
// selectors, matchConditions, variables, messageExpression, params with
// parameterNotFoundAction, and failurePolicy on a runtime error.
func TestValidatingAdmissionPolicy(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	a.MustKubectl(policyObjects, "apply", "-f", "-")

	apply := func(manifest string) (string, bool) {
		_, errOut, err := a.Kubectl(manifest, "apply", "-f", "-")
		return errOut, err == nil
	}
	cm := func(ns, name, labels string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\n  labels: {" + labels + "}\n"
	}
	// The policies reach the admission plugin through its informers: wait for the first
	// refusal.
	errOut := firstRefusal(t, a, cm("policed", "no-team", ""), "a ConfigMap without a team label is still accepted in a namespace the Deny binding selects")
	if !strings.Contains(errOut, "ValidatingAdmissionPolicy 'require-team' with binding 'require-team-deny' denied request: configmap no-team has no team label") {
		t.Fatalf("refusal:\n%s\nwant the policy, the binding and the message", errOut)
	}
	if out, ok := apply(cm("policed", "with-team", "team: edge")); !ok {
		t.Fatalf("a ConfigMap with a team label refused:\n%s", out)
	}
	out, ok := apply(cm("free", "no-team", ""))
	if !ok || !strings.Contains(out, "Warning: Validation failed for ValidatingAdmissionPolicy 'require-team' with binding 'require-team-warn': configmap no-team has no team label") {
		t.Fatalf("the Warn binding: accepted=%v, stderr:\n%s\nwant accepted with the policy's warning", ok, out)
	}
	if out, ok := apply(cm("default", "no-team", "")); !ok || strings.Contains(out, "Warning") {
		t.Fatalf("a namespace no binding selects: accepted=%v, stderr:\n%s", ok, out)
	}

	secret := func(name string) string {
		return "apiVersion: v1\nkind: Secret\nmetadata:\n  name: " + name + "\n  namespace: policed\nstringData: {k: v}\n"
	}
	out, ok = apply(secret("app-token"))
	if ok || !strings.Contains(out, "name-prefix") || !strings.Contains(out, "no params found") {
		t.Fatalf("a binding whose param is missing (parameterNotFoundAction Deny): accepted=%v, stderr:\n%s", ok, out)
	}
	a.MustKubectl("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: prefix\n  namespace: policy-params\ndata: {prefix: edge-}\n", "apply", "-f", "-")
	waitApplied := func(manifest, what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, ok := apply(manifest)
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s refused:\n%s", what, out)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	waitApplied(secret("edge-token"), "a secret named after the param's prefix")
	out, ok = apply(secret("app-token"))
	if ok || !strings.Contains(out, "secret names must start with edge-") {
		t.Fatalf("a secret not named after the param: accepted=%v, stderr:\n%s", ok, out)
	}

	// Type-checking against the matched kinds' schemas is reported in the policy's status.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := a.MustKubectl("", "get", "validatingadmissionpolicy", "type-error", "-o",
			"jsonpath={.status.observedGeneration} {.status.typeChecking.expressionWarnings[0].fieldRef}: {.status.typeChecking.expressionWarnings[0].warning}")
		if strings.HasPrefix(out, "1 spec.validations[0].expression: ") && strings.Contains(out, "apps/v1, Kind=Deployment") && strings.Contains(out, "no matching overload") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of a policy with a type error: %q, want its warning", out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if out := a.MustKubectl("", "get", "validatingadmissionpolicy", "require-team", "-o", "jsonpath={.status.observedGeneration} {.status.typeChecking}"); out != `1 {}` {
		t.Errorf("status of a policy without type errors: %q", out)
	}

	// A runtime error (no such key): failurePolicy Ignore lets the write through, Fail
	// refuses it naming the policy.
	if out, ok := apply("apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: policed\nspec:\n  ports: [{port: 80}]\n"); !ok {
		t.Fatalf("failurePolicy Ignore with a failing expression refused the write:\n%s", out)
	}
	out, ok = apply("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: robot\n  namespace: policed\n")
	if ok || !strings.Contains(out, "broken-fail") {
		t.Fatalf("failurePolicy Fail with a failing expression: accepted=%v, stderr:\n%s\nwant refused naming the policy", ok, out)
	}
}

const mutatingPolicyObjects = `
apiVersion: v1
kind: Namespace
metadata:
  name: mutated
  labels: {mutation: enabled, validation: enabled}
---
apiVersion: v1
kind: Namespace
metadata:
  name: validated-only
  labels: {validation: enabled}
---
apiVersion: v1
kind: Namespace
metadata:
  name: untouched
---
apiVersion: v1
kind: Namespace
metadata:
  name: mutation-params
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: defaults
  namespace: mutation-params
data: {owner: platform}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: add-managed-label
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
  matchConditions:
  - name: not-manual
    expression: "!has(object.metadata.labels) || !('manual' in object.metadata.labels)"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"managed-by": "flotilla"}}}'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: add-managed-label
spec:
  policyName: add-managed-label
  matchResources:
    namespaceSelector:
      matchLabels: {mutation: enabled}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: annotate
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [configmaps]
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        has(object.metadata.annotations)
        ? [JSONPatch{op: "add", path: "/metadata/annotations/mutated-by", value: "jsonpatch"}]
        : [JSONPatch{op: "add", path: "/metadata/annotations", value: {"mutated-by": "jsonpatch"}}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: annotate
spec:
  policyName: annotate
  matchResources:
    namespaceSelector:
      matchLabels: {mutation: enabled}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: owner-from-params
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [configmaps]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"owner": params.data.owner}}}'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: owner-from-params
spec:
  policyName: owner-from-params
  paramRef:
    name: defaults
    namespace: mutation-params
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchLabels: {mutation: enabled}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: orphan
spec:
  policyName: no-such-policy
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: untouched}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: broken-fail
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [serviceaccounts]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"x": }}}'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: broken-fail
spec:
  policyName: broken-fail
  matchResources:
    namespaceSelector:
      matchLabels: {mutation: enabled}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: broken-ignored
spec:
  failurePolicy: Ignore
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [services]
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/metadata/labels/x", value: object.missing}]'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: broken-ignored
spec:
  policyName: broken-ignored
  matchResources:
    namespaceSelector:
      matchLabels: {mutation: enabled}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: require-managed
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
  matchConditions:
  - name: not-manual
    expression: "!has(object.metadata.labels) || !('manual' in object.metadata.labels)"
  - name: not-kube-root-ca
    expression: object.metadata.name != 'kube-root-ca.crt'
  validations:
  - expression: "has(object.metadata.labels) && object.metadata.labels[?'managed-by'].orValue('') == 'flotilla'"
    messageExpression: "'configmap ' + object.metadata.name + ' is not managed by flotilla'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: require-managed
spec:
  policyName: require-managed
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {validation: enabled}
`

// TestMutatingAdmissionPolicy applies MutatingAdmissionPolicies and bindings with kubectl and
// checks that writes are mutated by them: an ApplyConfiguration and a JSONPatch mutation,
// matchConditions, a param-driven mutation, a binding to a policy that does not exist, and
// failurePolicy Fail and Ignore on a broken expression. A ValidatingAdmissionPolicy that
// requires the mutated label accepts the mutated object: the mutations run first.
func TestMutatingAdmissionPolicy(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	a.MustKubectl(mutatingPolicyObjects, "apply", "-f", "-")
	client := a.Client()
	ctx := context.Background()

	apply := func(manifest string) (string, bool) {
		_, errOut, err := a.Kubectl(manifest, "apply", "-f", "-")
		return errOut, err == nil
	}
	cm := func(ns, name, labels string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\n  labels: {" + labels + "}\n"
	}
	get := func(ns, name string) *corev1.ConfigMap {
		t.Helper()
		c, err := client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get configmap %s/%s: %v", ns, name, err)
		}
		return c
	}

	// The validating policy refuses an unmutated ConfigMap where only it applies.
	errOut := firstRefusal(t, a, cm("validated-only", "plain", ""), "a ConfigMap without the managed-by label is still accepted where the ValidatingAdmissionPolicy applies")
	if !strings.Contains(errOut, "configmap plain is not managed by flotilla") {
		t.Fatalf("refusal:\n%s\nwant the ValidatingAdmissionPolicy's message", errOut)
	}

	// The policies reach the mutating plugin through its informers, and the plugin reads the
	// schemas from /openapi/v3: until both are there a write is refused or not mutated. The
	// same ConfigMap passes the validating policy where it is mutated first.
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, ok := apply(cm("mutated", "plain", ""))
		if ok {
			c := get("mutated", "plain")
			if c.Labels["managed-by"] == "flotilla" && c.Labels["owner"] == "platform" && c.Annotations["mutated-by"] == "jsonpatch" {
				break
			}
			a.MustKubectl("", "delete", "configmap", "-n", "mutated", "plain")
			out = "accepted with labels " + strings.Join(mapPairs(c.Labels), ",") + " and annotations " + strings.Join(mapPairs(c.Annotations), ",")
		}
		if time.Now().After(deadline) {
			t.Fatalf("a ConfigMap where the mutating policies apply: %s\nwant managed-by=flotilla (ApplyConfiguration), owner=platform (params) and annotation mutated-by=jsonpatch (JSONPatch)", out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// An update is mutated too: a label removed by the user is put back.
	a.MustKubectl("", "label", "configmap", "-n", "mutated", "plain", "managed-by-")
	if l := get("mutated", "plain").Labels; l["managed-by"] != "flotilla" {
		t.Errorf("after removing managed-by the labels are %v, want it set again by the UPDATE mutation", l)
	}

	// matchConditions: a ConfigMap labelled manual is left alone by add-managed-label (and
	// by the validating policy) but still gets the param's owner.
	if out, ok := apply(cm("mutated", "hand-made", "manual: \"true\"")); !ok {
		t.Fatalf("a ConfigMap the matchConditions exclude refused:\n%s", out)
	}
	if l := get("mutated", "hand-made").Labels; l["managed-by"] != "" || l["owner"] != "platform" {
		t.Errorf("labels of a ConfigMap excluded by matchConditions: %v, want no managed-by and owner=platform", l)
	}

	// A binding whose policy does not exist changes nothing.
	if out, ok := apply(cm("untouched", "plain", "")); !ok {
		t.Fatalf("a ConfigMap where only a binding without policy applies refused:\n%s", out)
	}
	if c := get("untouched", "plain"); len(c.Labels) != 0 || c.Annotations["mutated-by"] != "" {
		t.Errorf("a ConfigMap where only a binding without policy applies: labels %v, annotations %v, want none added", c.Labels, c.Annotations)
	}

	// An expression that does not compile is stored; failurePolicy Fail refuses the writes the
	// policy matches, naming it, and Ignore lets them through unmutated.
	out, ok := apply("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: robot\n  namespace: mutated\n")
	if ok || !strings.Contains(out, "policy 'broken-fail' with binding 'broken-fail' denied request") {
		t.Fatalf("failurePolicy Fail with a broken expression: accepted=%v, stderr:\n%s\nwant refused naming the policy", ok, out)
	}
	if out, ok := apply("apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: mutated\nspec:\n  ports: [{port: 80}]\n"); !ok {
		t.Fatalf("failurePolicy Ignore with a failing expression refused the write:\n%s", out)
	}

	// A policy whose mutation lacks the field of its patchType is refused at create.
	out, ok = apply(`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: mismatched
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [DELETE]
      resources: [configmaps]
  mutations:
  - patchType: JSONPatch
    applyConfiguration:
      expression: 'Object{}'
`)
	for _, want := range []string{"spec.mutations[0].jsonPatch: Required value", "spec.mutations[0].applyConfiguration: Forbidden",
		`spec.matchConstraints.resourceRules[0].operations[0]: Unsupported value: "DELETE"`} {
		if ok || !strings.Contains(out, want) {
			t.Errorf("an invalid MutatingAdmissionPolicy: accepted=%v, stderr:\n%s\nwant %q", ok, out, want)
		}
	}
	if out := a.MustKubectl("", "get", "mutatingadmissionpolicies,mutatingadmissionpolicybindings", "-o", "name"); !strings.Contains(out, "mutatingadmissionpolicy.admissionregistration.k8s.io/add-managed-label") ||
		!strings.Contains(out, "mutatingadmissionpolicybinding.admissionregistration.k8s.io/orphan") {
		t.Errorf("kubectl get of the policies and bindings:\n%s", out)
	}
	out = a.MustKubectl("", "api-resources", "--categories=api-extensions", "--no-headers", "-o", "name")
	for _, want := range []string{"mutatingadmissionpolicies.admissionregistration.k8s.io", "mutatingadmissionpolicybindings.admissionregistration.k8s.io"} {
		if !strings.Contains(out, want) {
			t.Errorf("api-extensions category lacks %s:\n%s", want, out)
		}
	}
}

// reinvocationPolicies are pairs of MutatingAdmissionPolicies for namespace "reinvoked":
// setter-N labels a ConfigMap step-N, copier-N (reinvocationPolicy IfNeeded) annotates it
// copied-N "yes" when it has label step-N, else "no". The plugin runs its policies in no
// set order (a map's): a copier that runs before its setter writes "no", and only the
// second run of the mutations, which it asked for, writes "yes". With 6 independent pairs, a chain that never reinvokes
// leaves an annotation missing in all but 1 of 64 orders.
func reinvocationPolicies(pairs int) string {
	var docs []string
	docs = append(docs, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: reinvoked\n")
	rules := `  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [configmaps]
`
	bind := func(name string) string {
		return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: %[1]s
spec:
  policyName: %[1]s
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: reinvoked}
`, name)
	}
	for i := range pairs {
		docs = append(docs, fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: setter-%[1]d
spec:
  failurePolicy: Fail
%[2]s  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"step-%[1]d": "1"}}}'
`, i, rules), bind(fmt.Sprintf("setter-%d", i)), fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: copier-%[1]d
spec:
  failurePolicy: Fail
  reinvocationPolicy: IfNeeded
%[2]s  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{annotations: {"copied-%[1]d":
        has(object.metadata.labels) && 'step-%[1]d' in object.metadata.labels ? "yes" : "no"}}}
`, i, rules), bind(fmt.Sprintf("copier-%d", i)))
	}
	return strings.Join(docs, "---\n")
}

// TestMutatingAdmissionPolicyReinvocation: a MutatingAdmissionPolicy of reinvocationPolicy
// IfNeeded is called again when a policy that ran after it changed the object.
func TestMutatingAdmissionPolicyReinvocation(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	const pairs = 6
	a.MustKubectl(reinvocationPolicies(pairs), "apply", "-f", "-")
	client := a.Client()
	ctx := context.Background()
	// The policies and bindings reach the plugin through separate informers within a second or
	// so: retry until every setter and every copier ran (a copier not yet loaded leaves no
	// annotation; one loaded but not reinvoked writes "no").
	var got *corev1.ConfigMap
	deadline := time.Now().Add(60 * time.Second)
	for n := 0; ; n++ {
		cm, err := client.CoreV1().ConfigMaps("reinvoked").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", n)}}, metav1.CreateOptions{})
		if err == nil && len(cm.Labels) == pairs && len(cm.Annotations) == pairs {
			got = cm
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ConfigMaps in namespace reinvoked do not get the %d setters' labels and copiers' annotations: %v, %v", pairs, cm, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	for i := range pairs {
		if got.Annotations[fmt.Sprintf("copied-%d", i)] != "yes" {
			t.Errorf("ConfigMap %s: labels %v, annotations %v: copier-%d did not annotate (not reinvoked after setter-%d)", got.Name, got.Labels, got.Annotations, i, i)
		}
	}
}

// firstRefusal applies manifest (one ConfigMap) until the API refuses it, deleting it after
// each acceptance: policies reach the admission plugin through its informers, a moment after
// they are created. It returns kubectl's error output, and fails the test with notYet after
// 30 s.
func firstRefusal(t *testing.T, a *framework.Agent, manifest, notYet string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, errOut, err := a.Kubectl(manifest, "apply", "-f", "-")
		if err != nil {
			return errOut
		}
		a.MustKubectl(manifest, "delete", "-f", "-")
		if time.Now().After(deadline) {
			t.Fatal(notYet)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// mapPairs lists a map as key=value pairs, for messages.
func mapPairs(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}
