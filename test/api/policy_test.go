package api

import (
	"strings"
	"testing"
	"time"

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
	var errOut string
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, ok := apply(cm("policed", "no-team", ""))
		if !ok {
			errOut = out
			break
		}
		a.MustKubectl("", "delete", "configmap", "-n", "policed", "no-team")
		if time.Now().After(deadline) {
			t.Fatal("a ConfigMap without a team label is still accepted in a namespace the Deny binding selects")
		}
		time.Sleep(500 * time.Millisecond)
	}
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
	deadline = time.Now().Add(30 * time.Second)
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
