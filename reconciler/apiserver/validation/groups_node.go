package validation

import (
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateRuntimeClass validates a node.k8s.io/v1 RuntimeClass: handler is a DNS label,
// overhead a valid list of container resources, scheduling a valid node selector and
// tolerations (upstream pkg/apis/node/validation).
func ValidateRuntimeClass(rc *nodev1.RuntimeClass) field.ErrorList {
	errs := validateMeta(&rc.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	for _, msg := range apimachineryvalidation.NameIsDNSLabel(rc.Handler, false) {
		errs = append(errs, field.Invalid(field.NewPath("handler"), rc.Handler, msg))
	}
	if rc.Overhead != nil {
		// Upstream reuses the container resource rules, so errors point at overhead.limits.
		errs = append(errs, coreValidateResources(&corev1.ResourceRequirements{Limits: rc.Overhead.PodFixed}, field.NewPath("overhead"))...)
	}
	if s := rc.Scheduling; s != nil {
		sp := field.NewPath("scheduling")
		if s.NodeSelector != nil {
			errs = append(errs, metav1validation.ValidateLabels(s.NodeSelector, sp.Child("nodeSelector"))...)
		}
		errs = append(errs, coreValidateTolerations(s.Tolerations, sp.Child("tolerations"))...)
	}
	return errs
}

// ValidateRuntimeClassUpdate validates a RuntimeClass update: handler may not change (running
// pods were started with it).
func ValidateRuntimeClassUpdate(rc, old *nodev1.RuntimeClass) field.ErrorList {
	errs := ValidateRuntimeClass(rc)
	errs = append(errs, validateMetaUpdate(&rc.ObjectMeta, &old.ObjectMeta)...)
	return append(errs, apimachineryvalidation.ValidateImmutableField(rc.Handler, old.Handler, field.NewPath("handler"))...)
}
