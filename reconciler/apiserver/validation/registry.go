// Package validation holds the per-kind validation of every object the API server stores,
// written from the requirement lists in shared/spec (Kubernetes' own validation lives in
// k8s.io/kubernetes, which we do not import).
package validation

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Funcs validates one kind. Create is required; Update and StatusUpdate may be nil, in which
// case the server validates updates with Create on the new object.
type Funcs struct {
	Create       func(obj runtime.Object) field.ErrorList
	Update       func(obj, old runtime.Object) field.ErrorList
	StatusUpdate func(obj, old runtime.Object) field.ErrorList
}

// For returns the validation for a kind, and false when the kind has none.
func For(gk schema.GroupKind) (Funcs, bool) {
	if f, ok := coreValidators()[gk]; ok {
		return f, true
	}
	f, ok := groupValidators()[gk]
	return f, ok
}
