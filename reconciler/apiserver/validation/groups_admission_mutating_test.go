package validation

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A MutatingAdmissionPolicy and binding in the shape of the upstream documentation's
// examples: a param-driven ApplyConfiguration and a JSONPatch.
const (
	mapYAML = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: sidecar-policy.example.com
spec:
  failurePolicy: Fail
  reinvocationPolicy: IfNeeded
  paramKind:
    apiVersion: v1
    kind: ConfigMap
  matchConstraints:
    resourceRules:
    - apiGroups:   [""]
      apiVersions: ["v1"]
      operations:  ["CREATE"]
      resources:   ["pods"]
  matchConditions:
  - name: does-not-already-have-sidecar
    expression: "!object.spec.initContainers.exists(ic, ic.name == \"mesh-proxy\")"
  variables:
  - name: image
    expression: "params.data.image"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{
          spec: Object.spec{
            initContainers: [Object.spec.initContainers{name: "mesh-proxy", image: variables.image}]
          }
        }
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "add", path: "/metadata/labels/meshed", value: "true"}]
`
	mapBindingYAML = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: sidecar-binding-test.example.com
spec:
  policyName: sidecar-policy.example.com
  paramRef:
    name: sidecar-test.example.com
    namespace: default
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchLabels:
        environment: test
`
)

func TestValidateMutatingAdmissionPolicy(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*admissionregistrationv1.MutatingAdmissionPolicy)
		want   []string
	}{
		{"documented example", func(*admissionregistrationv1.MutatingAdmissionPolicy) {}, none()},
		{"failurePolicy and reinvocationPolicy unset", func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.FailurePolicy, p.Spec.ReinvocationPolicy = nil, ""
		}, none()},
		{"failurePolicy", func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.FailurePolicy = ptr.To[admissionregistrationv1.FailurePolicyType]("Retry")
		}, errs(nsup("spec.failurePolicy"))},
		{"reinvocationPolicy", func(p *admissionregistrationv1.MutatingAdmissionPolicy) { p.Spec.ReinvocationPolicy = "Always" },
			errs(nsup("spec.reinvocationPolicy"))},
		{"no matchConstraints", func(p *admissionregistrationv1.MutatingAdmissionPolicy) { p.Spec.MatchConstraints = nil },
			errs(req("spec.matchConstraints"))},
		{"no resourceRules", func(p *admissionregistrationv1.MutatingAdmissionPolicy) { p.Spec.MatchConstraints.ResourceRules = nil },
			errs(req("spec.matchConstraints.resourceRules"))},
		{"DELETE", func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
		}, errs(nsup("spec.matchConstraints.resourceRules[0].operations[0]"))},
		{"DELETE excluded", func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}
		}, none()},
		{"no mutations", func(p *admissionregistrationv1.MutatingAdmissionPolicy) { p.Spec.Mutations = nil },
			errs(req("spec.mutations"))},
		{"no patchType", func(p *admissionregistrationv1.MutatingAdmissionPolicy) { p.Spec.Mutations[0].PatchType = "" },
			errs(req("spec.mutations[0].patchType"))},
		{"unknown patchType", func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.Mutations[0].PatchType = "StrategicMerge"
		},
			errs(nsup("spec.mutations[0].patchType"))},
		{"ApplyConfiguration without applyConfiguration", func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.Mutations[0].ApplyConfiguration = nil
		}, errs(req("spec.mutations[0].applyConfiguration"))},
		{"ApplyConfiguration with jsonPatch", func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.Mutations[0].JSONPatch = p.Spec.Mutations[1].JSONPatch
		}, errs(forb("spec.mutations[0].jsonPatch"))},
		{"JSONPatch with an empty expression", func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.Mutations[1].JSONPatch.Expression = " "
		}, errs(req("spec.mutations[1].jsonPatch.expression"))},
		{"JSONPatch without jsonPatch, with applyConfiguration", func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.Mutations[1].JSONPatch = nil
			p.Spec.Mutations[1].ApplyConfiguration = p.Spec.Mutations[0].ApplyConfiguration
		}, errs(req("spec.mutations[1].jsonPatch"), forb("spec.mutations[1].applyConfiguration"))},
		{"paramKind without kind", func(p *admissionregistrationv1.MutatingAdmissionPolicy) { p.Spec.ParamKind.Kind = "" },
			errs(req("spec.paramKind.kind"))},
		{"variable name", func(p *admissionregistrationv1.MutatingAdmissionPolicy) { p.Spec.Variables[0].Name = "sidecar-image" },
			errs(inv("spec.variables[0].name"))},
		{"duplicate match condition", func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConditions = append(p.Spec.MatchConditions, p.Spec.MatchConditions[0])
		}, errs(dup("spec.matchConditions[1].name"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := fixture[admissionregistrationv1.MutatingAdmissionPolicy](t, mapYAML, false)
			c.mutate(p)
			checkErrs(t, ValidateMutatingAdmissionPolicy(p), c.want)
			old := fixture[admissionregistrationv1.MutatingAdmissionPolicy](t, mapYAML, false)
			checkErrs(t, ValidateMutatingAdmissionPolicyUpdate(p, old), c.want)
		})
	}
}

func TestValidateMutatingAdmissionPolicyBinding(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*admissionregistrationv1.MutatingAdmissionPolicyBinding)
		want   []string
	}{
		{"documented example", func(*admissionregistrationv1.MutatingAdmissionPolicyBinding) {}, none()},
		{"no paramRef nor matchResources", func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
			b.Spec.ParamRef, b.Spec.MatchResources = nil, nil
		}, none()},
		{"no policyName", func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) { b.Spec.PolicyName = "" },
			errs(req("spec.policyName"))},
		{"bad policyName", func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) { b.Spec.PolicyName = "Sidecar_Policy" },
			errs(inv("spec.policyName"))},
		{"paramRef name and selector", func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
			b.Spec.ParamRef.Selector = &metav1.LabelSelector{}
		}, errs(forb("spec.paramRef.name"))},
		{"paramRef without notFound action", func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
			b.Spec.ParamRef.ParameterNotFoundAction = nil
		}, errs(req("spec.paramRef.parameterNotFoundAction"))},
		{"DELETE in matchResources", func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
			b.Spec.MatchResources.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}
		}, errs(nsup("spec.matchResources.resourceRules[0].operations[0]"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := fixture[admissionregistrationv1.MutatingAdmissionPolicyBinding](t, mapBindingYAML, false)
			c.mutate(b)
			checkErrs(t, ValidateMutatingAdmissionPolicyBinding(b), c.want)
		})
	}
}
