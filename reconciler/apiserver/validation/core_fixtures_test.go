package validation

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// Test helpers of the core/v1 validation (prefixed: the package is shared with groups_*).

// coreFixture decodes a manifest strictly; namespaced objects without a namespace get
// "default", as the API server would give them from the request path.
func coreFixture[T any, PT interface {
	*T
	metav1.Object
}](t *testing.T, manifest string) PT {
	t.Helper()
	var obj T
	if err := yaml.UnmarshalStrict([]byte(manifest), &obj); err != nil {
		t.Fatalf("decode fixture: %v\n%s", err, manifest)
	}
	p := PT(&obj)
	if p.GetNamespace() == "" && coreNamespaced(any(p).(runtime.Object)) {
		p.SetNamespace("default")
	}
	return p
}

func coreNamespaced(obj runtime.Object) bool {
	switch fmt.Sprintf("%T", obj) {
	case "*v1.Namespace", "*v1.Node", "*v1.PersistentVolume":
		return false
	}
	return true
}

// coreWant is one expected error: its type and its field path.
type coreWant struct {
	Type field.ErrorType
	Path string
}

func (w coreWant) String() string { return fmt.Sprintf("%s %s", w.Type, w.Path) }

func cInv(p string) coreWant  { return coreWant{field.ErrorTypeInvalid, p} }
func cReq(p string) coreWant  { return coreWant{field.ErrorTypeRequired, p} }
func cNsup(p string) coreWant { return coreWant{field.ErrorTypeNotSupported, p} }
func cDup(p string) coreWant  { return coreWant{field.ErrorTypeDuplicate, p} }
func cForb(p string) coreWant { return coreWant{field.ErrorTypeForbidden, p} }
func cNotF(p string) coreWant { return coreWant{field.ErrorTypeNotFound, p} }
func cLong(p string) coreWant { return coreWant{field.ErrorTypeTooLong, p} }
func cMany(p string) coreWant { return coreWant{field.ErrorTypeTooMany, p} }

// coreCheck asserts that got holds exactly the wanted errors (type and path), in any order.
func coreCheck(t *testing.T, got field.ErrorList, want ...coreWant) {
	t.Helper()
	var g, w []string
	for _, e := range got {
		g = append(g, coreWant{e.Type, e.Field}.String())
		// metadata errors come from apimachinery's own ObjectMeta validation.
		if e.Detail == "" && !strings.HasPrefix(e.Field, "metadata.") && e.Type != field.ErrorTypeDuplicate && e.Type != field.ErrorTypeNotFound && e.Type != field.ErrorTypeTooLong && e.Type != field.ErrorTypeTooMany {
			t.Errorf("error without a message (the user is not told what to change): %v", e)
		}
	}
	for _, x := range want {
		w = append(w, x.String())
	}
	sort.Strings(g)
	sort.Strings(w)
	if strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Errorf("errors mismatch\n got: %q\nwant: %q\nfull: %v", g, w, got)
	}
}

// coreFuncs returns the validation registered for a core kind.
func coreFuncs(t *testing.T, kind string, opts Options) Funcs {
	t.Helper()
	f, ok := For(schema.GroupKind{Kind: kind}, opts)
	if !ok {
		t.Fatalf("no validation registered for core kind %s", kind)
	}
	return f
}

func TestCoreValidatorsCoverKinds(t *testing.T) {
	withStatus := map[string]bool{"Pod": true, "Service": true, "Namespace": true, "Node": true,
		"PersistentVolumeClaim": true, "PersistentVolume": true, "ResourceQuota": true}
	for _, kind := range []string{"Pod", "Service", "Namespace", "ConfigMap", "Secret", "ServiceAccount", "Node", "Event",
		"PersistentVolume", "PersistentVolumeClaim", "ResourceQuota", "LimitRange", "Endpoints"} {
		f := coreFuncs(t, kind, DefaultOptions())
		if f.Create == nil || f.Update == nil {
			t.Errorf("%s: Create and Update must be set", kind)
		}
		if withStatus[kind] && f.StatusUpdate == nil {
			t.Errorf("%s: StatusUpdate must be set (the kind has a status subresource)", kind)
		}
	}
}

func TestCoreWrongTypeIsInternalError(t *testing.T) {
	f := coreFuncs(t, "Pod", DefaultOptions())
	errs := f.Create(&metav1.Status{})
	if len(errs) != 1 || errs[0].Type != field.ErrorTypeInternal {
		t.Fatalf("want one internal error, got %v", errs)
	}
}
