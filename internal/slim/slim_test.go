package slim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDropManagedFields(t *testing.T) {
	for _, obj := range []metav1.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}},
		&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "m", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "flotilla"}}}},
	} {
		out, err := DropManagedFields(obj)
		if err != nil {
			t.Fatal(err)
		}
		m := out.(metav1.Object)
		if m.GetManagedFields() != nil || m.GetName() == "" {
			t.Errorf("%T: managedFields %v, name %q; want none, the name kept", obj, m.GetManagedFields(), m.GetName())
		}
	}
	if out, err := DropManagedFields("not an object"); err != nil || out != "not an object" {
		t.Errorf("a value without metadata: %v %v; want it back unchanged", out, err)
	}
}
