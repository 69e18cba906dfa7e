package validation

import "k8s.io/apimachinery/pkg/runtime/schema"

// groupValidators lists the validation of the kinds outside core/v1.
func groupValidators(opts Options) map[schema.GroupKind]Funcs {
	return map[schema.GroupKind]Funcs{}
}
