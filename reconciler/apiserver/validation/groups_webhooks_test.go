package validation

import (
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A defaulted ValidatingWebhookConfiguration, from the dynamic admission control documentation.
const validatingWebhookYAML = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: pod-policy.example.com
webhooks:
- name: pod-policy.example.com
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["pods", "pods/status"]
    scope: "Namespaced"
  clientConfig:
    service:
      namespace: example-namespace
      name: example-service
      path: /validate
      port: 443
    caBundle: Zm9v
  admissionReviewVersions: ["v1"]
  sideEffects: None
  timeoutSeconds: 5
  failurePolicy: Fail
  matchPolicy: Equivalent
  namespaceSelector: {}
  objectSelector:
    matchLabels:
      app: web
  matchConditions:
  - name: exclude-leases
    expression: '!(request.resource.group == "coordination.k8s.io" && request.resource.resource == "leases")'
`

const mutatingWebhookYAML = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: sidecar-injector
webhooks:
- name: sidecar.injector.example.com
  rules:
  - apiGroups: ["*"]
    apiVersions: ["*"]
    operations: ["*"]
    resources: ["*/*"]
    scope: "*"
  clientConfig:
    url: https://injector.example.com:8443/mutate
  admissionReviewVersions: ["v1", "v1beta1"]
  sideEffects: NoneOnDryRun
  timeoutSeconds: 10
  failurePolicy: Ignore
  matchPolicy: Exact
  reinvocationPolicy: IfNeeded
  namespaceSelector: {}
  objectSelector: {}
`

func TestValidateValidatingWebhookConfiguration(t *testing.T) {
	checkErrs(t, ValidateValidatingWebhookConfiguration(fixture[admissionregistrationv1.ValidatingWebhookConfiguration](t, validatingWebhookYAML, false)), none())
	w0 := func(p string) string { return "webhooks[0]." + p }
	cases := []struct {
		name   string
		mutate func(*admissionregistrationv1.ValidatingWebhook)
		want   []string
	}{
		{"name with two segments", func(w *admissionregistrationv1.ValidatingWebhook) { w.Name = "example.com" }, errs(inv(w0("name")))},
		{"name not a DNS subdomain", func(w *admissionregistrationv1.ValidatingWebhook) { w.Name = "Pod_Policy.example.com" }, errs(inv(w0("name")))},
		{"no name", func(w *admissionregistrationv1.ValidatingWebhook) { w.Name = "" }, errs(req(w0("name")))},
		{"no admissionReviewVersions", func(w *admissionregistrationv1.ValidatingWebhook) { w.AdmissionReviewVersions = nil },
			errs(req(w0("admissionReviewVersions")))},
		{"only unknown admissionReviewVersions", func(w *admissionregistrationv1.ValidatingWebhook) { w.AdmissionReviewVersions = []string{"v2"} },
			errs(inv(w0("admissionReviewVersions")))},
		{"duplicate admissionReviewVersions", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.AdmissionReviewVersions = []string{"v1", "v1"}
		}, errs(inv(w0("admissionReviewVersions[1]")))},
		{"admissionReviewVersion not a DNS label", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.AdmissionReviewVersions = []string{"v1", "V_2"}
		}, errs(inv(w0("admissionReviewVersions[1]")))},
		{"no sideEffects", func(w *admissionregistrationv1.ValidatingWebhook) { w.SideEffects = nil }, errs(req(w0("sideEffects")))},
		{"sideEffects Some", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
		}, errs(nsup(w0("sideEffects")))},
		{"sideEffects Unknown", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassUnknown)
		}, errs(nsup(w0("sideEffects")))},
		{"bad failurePolicy", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.FailurePolicy = ptr.To(admissionregistrationv1.FailurePolicyType("Retry"))
		}, errs(nsup(w0("failurePolicy")))},
		{"bad matchPolicy", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.MatchPolicy = ptr.To(admissionregistrationv1.MatchPolicyType("Fuzzy"))
		}, errs(nsup(w0("matchPolicy")))},
		{"timeout 0", func(w *admissionregistrationv1.ValidatingWebhook) { w.TimeoutSeconds = ptr.To[int32](0) }, errs(inv(w0("timeoutSeconds")))},
		{"timeout 31", func(w *admissionregistrationv1.ValidatingWebhook) { w.TimeoutSeconds = ptr.To[int32](31) }, errs(inv(w0("timeoutSeconds")))},
		{"timeout 30", func(w *admissionregistrationv1.ValidatingWebhook) { w.TimeoutSeconds = ptr.To[int32](30) }, none()},
		{"both url and service", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.ClientConfig.URL = ptr.To("https://example.com")
		}, errs(req(w0("clientConfig")))},
		{"neither url nor service", func(w *admissionregistrationv1.ValidatingWebhook) { w.ClientConfig.Service = nil },
			errs(req(w0("clientConfig")))},
		{"http url", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.ClientConfig.Service, w.ClientConfig.URL = nil, ptr.To("http://example.com/validate")
		}, errs(inv(w0("clientConfig.url")))},
		{"url with user, query and fragment", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.ClientConfig.Service, w.ClientConfig.URL = nil, ptr.To("https://u:p@example.com/validate?x=1#top")
		}, errs(inv(w0("clientConfig.url")), inv(w0("clientConfig.url")), inv(w0("clientConfig.url")))},
		{"url without host", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.ClientConfig.Service, w.ClientConfig.URL = nil, ptr.To("https:///validate")
		}, errs(inv(w0("clientConfig.url")))},
		{"service without name and namespace", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.ClientConfig.Service.Name, w.ClientConfig.Service.Namespace = "", ""
		}, errs(req(w0("clientConfig.service.name")), req(w0("clientConfig.service.namespace")))},
		{"service port 0", func(w *admissionregistrationv1.ValidatingWebhook) { w.ClientConfig.Service.Port = ptr.To[int32](0) },
			errs(inv(w0("clientConfig.service.port")))},
		{"service port 65536", func(w *admissionregistrationv1.ValidatingWebhook) { w.ClientConfig.Service.Port = ptr.To[int32](65536) },
			errs(inv(w0("clientConfig.service.port")))},
		{"service port not defaulted", func(w *admissionregistrationv1.ValidatingWebhook) { w.ClientConfig.Service.Port = nil }, none()},
		{"service path relative", func(w *admissionregistrationv1.ValidatingWebhook) { w.ClientConfig.Service.Path = ptr.To("validate") },
			errs(inv(w0("clientConfig.service.path")))},
		{"service path with empty segment", func(w *admissionregistrationv1.ValidatingWebhook) { w.ClientConfig.Service.Path = ptr.To("/a//b") },
			errs(inv(w0("clientConfig.service.path")))},
		{"rule without operations", func(w *admissionregistrationv1.ValidatingWebhook) { w.Rules[0].Operations = nil },
			errs(req(w0("rules[0].operations")))},
		{"rule operation PATCH", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.Rules[0].Operations = []admissionregistrationv1.OperationType{"PATCH"}
		}, errs(nsup(w0("rules[0].operations[0]")))},
		{"rule operations * and CREATE", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.Rules[0].Operations = []admissionregistrationv1.OperationType{"*", "CREATE"}
		}, errs(inv(w0("rules[0].operations")))},
		{"rule without apiGroups and apiVersions", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.Rules[0].APIGroups, w.Rules[0].APIVersions = nil, nil
		}, errs(req(w0("rules[0].apiGroups")), req(w0("rules[0].apiVersions")))},
		{"rule empty apiVersion", func(w *admissionregistrationv1.ValidatingWebhook) { w.Rules[0].APIVersions = []string{""} },
			errs(req(w0("rules[0].apiVersions[0]")))},
		{"rule apiGroups * and apps", func(w *admissionregistrationv1.ValidatingWebhook) { w.Rules[0].APIGroups = []string{"*", "apps"} },
			errs(inv(w0("rules[0].apiGroups")))},
		{"rule without resources", func(w *admissionregistrationv1.ValidatingWebhook) { w.Rules[0].Resources = nil },
			errs(req(w0("rules[0].resources")))},
		{"rule empty resource", func(w *admissionregistrationv1.ValidatingWebhook) { w.Rules[0].Resources = []string{""} },
			errs(req(w0("rules[0].resources[0]")))},
		{"rule * with plain resources", func(w *admissionregistrationv1.ValidatingWebhook) { w.Rules[0].Resources = []string{"*", "pods"} },
			errs(inv(w0("rules[0].resources")))},
		{"rule */* with others", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.Rules[0].Resources = []string{"*/*", "pods/status"}
		},
			errs(inv(w0("rules[0].resources")))},
		{"rule pods/* then pods/log", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.Rules[0].Resources = []string{"pods/*", "pods/log"}
		},
			errs(inv(w0("rules[0].resources[1]")))},
		{"rule */scale then deployments/scale", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.Rules[0].Resources = []string{"*/scale", "deployments/scale"}
		}, errs(inv(w0("rules[0].resources[1]")))},
		{"rule * with subresources is fine", func(w *admissionregistrationv1.ValidatingWebhook) { w.Rules[0].Resources = []string{"*", "pods/log"} }, none()},
		{"rule bad scope", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.Rules[0].Scope = ptr.To(admissionregistrationv1.ScopeType("Global"))
		}, errs(nsup(w0("rules[0].scope")))},
		{"bad selector", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "In"}}}
		}, errs(req(w0("namespaceSelector.matchExpressions[0].values")))},
		{"match condition without name and expression", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.MatchConditions = []admissionregistrationv1.MatchCondition{{}}
		}, errs(req(w0("matchConditions[0].name")), req(w0("matchConditions[0].expression")))},
		{"match condition blank expression", func(w *admissionregistrationv1.ValidatingWebhook) { w.MatchConditions[0].Expression = "  " },
			errs(req(w0("matchConditions[0].expression")))},
		{"match condition bad name", func(w *admissionregistrationv1.ValidatingWebhook) { w.MatchConditions[0].Name = "exclude leases" },
			errs(inv(w0("matchConditions[0].name")))},
		{"match conditions duplicate names", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.MatchConditions = append(w.MatchConditions, w.MatchConditions[0])
		}, errs(dup(w0("matchConditions[1].name")))},
		{"match condition does not compile", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.MatchConditions[0].Expression = "object.metadata.name =="
		},
			errs(inv(w0("matchConditions[0].expression")))},
		{"match condition is not a bool", func(w *admissionregistrationv1.ValidatingWebhook) { w.MatchConditions[0].Expression = "'yes'" },
			errs(inv(w0("matchConditions[0].expression")))},
		{"match condition uses params (webhooks have none)", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.MatchConditions[0].Expression = "params.enabled"
		}, errs(inv(w0("matchConditions[0].expression")))},
		{"match condition with request, object and authorizer", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.MatchConditions[0].Expression = `request.userInfo.username != "system:admin" && has(object.metadata) && authorizer.group("").resource("pods").check("get").allowed()`
		}, none()},
		{"65 match conditions", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.MatchConditions = nil
			for i := range 65 {
				w.MatchConditions = append(w.MatchConditions, admissionregistrationv1.MatchCondition{Name: fmt.Sprintf("c%d", i), Expression: "true"})
			}
		}, errs(many(w0("matchConditions")))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := fixture[admissionregistrationv1.ValidatingWebhookConfiguration](t, validatingWebhookYAML, false)
			c.mutate(&cfg.Webhooks[0])
			checkErrs(t, ValidateValidatingWebhookConfiguration(cfg), c.want)
		})
	}
	t.Run("duplicate webhook names", func(t *testing.T) {
		cfg := fixture[admissionregistrationv1.ValidatingWebhookConfiguration](t, validatingWebhookYAML, false)
		cfg.Webhooks = append(cfg.Webhooks, cfg.Webhooks[0])
		checkErrs(t, ValidateValidatingWebhookConfiguration(cfg), errs(dup("webhooks[1].name")))
	})
	t.Run("messages as upstream", func(t *testing.T) {
		cfg := fixture[admissionregistrationv1.ValidatingWebhookConfiguration](t, validatingWebhookYAML, false)
		cfg.Webhooks[0].Name = "example.com"
		cfg.Webhooks[0].SideEffects = nil
		cfg.Webhooks[0].AdmissionReviewVersions = nil
		got := ValidateValidatingWebhookConfiguration(cfg).ToAggregate().Error()
		for _, want := range []string{
			`webhooks[0].name: Invalid value: "example.com": should be a domain with at least three segments separated by dots`,
			`webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun`,
			`webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1`,
		} {
			if !strings.Contains(got, want) {
				t.Errorf("errors %q\nlack %q", got, want)
			}
		}
	})
}

func TestValidateValidatingWebhookConfigurationUpdate(t *testing.T) {
	old := fixture[admissionregistrationv1.ValidatingWebhookConfiguration](t, validatingWebhookYAML, false)
	cfg := old.DeepCopy()
	cfg.Webhooks[0].TimeoutSeconds = ptr.To[int32](20)
	checkErrs(t, ValidateValidatingWebhookConfigurationUpdate(cfg, old), none())

	t.Run("stored side effects, unknown versions and duplicate names stay accepted", func(t *testing.T) {
		old := fixture[admissionregistrationv1.ValidatingWebhookConfiguration](t, validatingWebhookYAML, false)
		old.Webhooks[0].SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
		old.Webhooks[0].AdmissionReviewVersions = []string{"v0"}
		old.Webhooks = append(old.Webhooks, old.Webhooks[0])
		cfg := old.DeepCopy()
		cfg.Webhooks[1].TimeoutSeconds = ptr.To[int32](3)
		checkErrs(t, ValidateValidatingWebhookConfigurationUpdate(cfg, old), none())
		// The same object is refused on create.
		checkErrs(t, ValidateValidatingWebhookConfiguration(cfg), errs(nsup("webhooks[0].sideEffects"), nsup("webhooks[1].sideEffects"),
			inv("webhooks[0].admissionReviewVersions"), inv("webhooks[1].admissionReviewVersions"), dup("webhooks[1].name")))
	})
	t.Run("unchanged match conditions are not checked again", func(t *testing.T) {
		old := fixture[admissionregistrationv1.ValidatingWebhookConfiguration](t, validatingWebhookYAML, false)
		old.Webhooks[0].MatchConditions[0].Name = "bad name"
		cfg := old.DeepCopy()
		cfg.Webhooks[0].TimeoutSeconds = ptr.To[int32](3)
		checkErrs(t, ValidateValidatingWebhookConfigurationUpdate(cfg, old), none())
		cfg.Webhooks[0].MatchConditions[0].Expression = "true"
		checkErrs(t, ValidateValidatingWebhookConfigurationUpdate(cfg, old), errs(inv("webhooks[0].matchConditions[0].name")))
	})
	t.Run("name is immutable", func(t *testing.T) {
		cfg := old.DeepCopy()
		cfg.Name = "renamed"
		checkErrs(t, ValidateValidatingWebhookConfigurationUpdate(cfg, old), errs(inv("metadata.name")))
	})
}

func TestValidateMutatingWebhookConfiguration(t *testing.T) {
	checkErrs(t, ValidateMutatingWebhookConfiguration(fixture[admissionregistrationv1.MutatingWebhookConfiguration](t, mutatingWebhookYAML, false)), none())
	cases := []struct {
		name   string
		mutate func(*admissionregistrationv1.MutatingWebhook)
		want   []string
	}{
		{"bad reinvocationPolicy", func(w *admissionregistrationv1.MutatingWebhook) {
			w.ReinvocationPolicy = ptr.To(admissionregistrationv1.ReinvocationPolicyType("Always"))
		}, errs(nsup("webhooks[0].reinvocationPolicy"))},
		{"no sideEffects", func(w *admissionregistrationv1.MutatingWebhook) { w.SideEffects = nil }, errs(req("webhooks[0].sideEffects"))},
		{"url with query", func(w *admissionregistrationv1.MutatingWebhook) {
			w.ClientConfig.URL = ptr.To("https://x.example.com/?a=b")
		},
			errs(inv("webhooks[0].clientConfig.url"))},
		{"name with two segments", func(w *admissionregistrationv1.MutatingWebhook) { w.Name = "injector.example" },
			errs(inv("webhooks[0].name"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := fixture[admissionregistrationv1.MutatingWebhookConfiguration](t, mutatingWebhookYAML, false)
			c.mutate(&cfg.Webhooks[0])
			checkErrs(t, ValidateMutatingWebhookConfiguration(cfg), c.want)
		})
	}
	old := fixture[admissionregistrationv1.MutatingWebhookConfiguration](t, mutatingWebhookYAML, false)
	cfg := old.DeepCopy()
	cfg.Webhooks[0].SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
	checkErrs(t, ValidateMutatingWebhookConfigurationUpdate(cfg, old), errs(nsup("webhooks[0].sideEffects")))
	checkErrs(t, ValidateMutatingWebhookConfiguration(&admissionregistrationv1.MutatingWebhookConfiguration{}), errs(req("metadata.name")))
}
