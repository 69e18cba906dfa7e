package validation

import (
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// fixture decodes a YAML manifest (mostly examples from the Kubernetes documentation);
// namespaced objects without a namespace get "default", as the API server would assign from the request path.
func fixture[T any](t *testing.T, manifest string, namespaced bool) *T {
	t.Helper()
	obj := new(T)
	if err := yaml.UnmarshalStrict([]byte(manifest), obj); err != nil {
		t.Fatalf("decode fixture: %v", err)
	}
	if m, ok := any(obj).(metav1.Object); ok {
		if namespaced && m.GetNamespace() == "" {
			m.SetNamespace("default")
		}
		// Updates need the stored version; creates ignore it.
		m.SetResourceVersion("1")
	}
	return obj
}

// Short names for expected errors: "<type> <field path>".
func inv(p string) string       { return string(field.ErrorTypeInvalid) + " " + p }
func req(p string) string       { return string(field.ErrorTypeRequired) + " " + p }
func nsup(p string) string      { return string(field.ErrorTypeNotSupported) + " " + p }
func dup(p string) string       { return string(field.ErrorTypeDuplicate) + " " + p }
func forb(p string) string      { return string(field.ErrorTypeForbidden) + " " + p }
func long(p string) string      { return string(field.ErrorTypeTooLong) + " " + p }
func many(p string) string      { return string(field.ErrorTypeTooMany) + " " + p }
func none() []string            { return nil }
func errs(s ...string) []string { return s }

// checkErrs asserts that got holds exactly the wanted "<type> <path>" errors, and that every
// error explains itself (a detail, or a list of supported values).
func checkErrs(t *testing.T, got field.ErrorList, want []string) {
	t.Helper()
	var g []string
	for _, e := range got {
		g = append(g, string(e.Type)+" "+e.Field)
		if e.Type == field.ErrorTypeInvalid && e.Detail == "" {
			t.Errorf("%s has no message saying what to change", e.Error())
		}
	}
	w := append([]string(nil), want...)
	sort.Strings(g)
	sort.Strings(w)
	if strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Errorf("errors:\n  got  %q\n  want %q\n  full: %v", g, w, got.ToAggregate())
	}
}

func TestGroupValidatorsCoverKinds(t *testing.T) {
	kinds := []schema.GroupKind{
		{Group: "apps", Kind: "Deployment"}, {Group: "apps", Kind: "ReplicaSet"}, {Group: "apps", Kind: "StatefulSet"},
		{Group: "apps", Kind: "DaemonSet"}, {Group: "apps", Kind: "ControllerRevision"},
		{Group: "batch", Kind: "Job"}, {Group: "batch", Kind: "CronJob"},
		{Group: "discovery.k8s.io", Kind: "EndpointSlice"},
		{Group: "networking.k8s.io", Kind: "Ingress"}, {Group: "networking.k8s.io", Kind: "IngressClass"},
		{Group: "networking.k8s.io", Kind: "NetworkPolicy"},
		{Group: "coordination.k8s.io", Kind: "Lease"}, {Group: "policy", Kind: "PodDisruptionBudget"},
		{Group: "events.k8s.io", Kind: "Event"},
		{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"},
		{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"},
		{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"},
		{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"},
		{Group: "storage.k8s.io", Kind: "StorageClass"},
	}
	for _, gk := range kinds {
		f, ok := For(gk, DefaultOptions())
		if !ok || f.Create == nil || f.Update == nil {
			t.Errorf("%s: no Create/Update validation", gk)
		}
	}
	f, _ := For(schema.GroupKind{Group: "apps", Kind: "Deployment"}, DefaultOptions())
	if got := f.Create(&metav1.Status{}); len(got) != 1 || got[0].Type != field.ErrorTypeInternal {
		t.Errorf("wrong object type: got %v, want one internal error", got)
	}
}
