package validation

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// coreValidators lists the validation of the core/v1 kinds.
func coreValidators(opts Options) map[schema.GroupKind]Funcs {
	return map[schema.GroupKind]Funcs{}
}

// ValidatePodTemplateSpec validates a pod template as embedded in workload kinds.
// TODO(core validation): replace this placeholder.
func ValidatePodTemplateSpec(spec *corev1.PodTemplateSpec, fldPath *field.Path) field.ErrorList {
	return nil
}
