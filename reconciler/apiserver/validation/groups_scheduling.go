package validation

import (
	"fmt"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// schedulingNodeAutoscalingValidators lists the validation of scheduling.k8s.io PriorityClass,
// node.k8s.io RuntimeClass and autoscaling HorizontalPodAutoscaler (both versions validate the
// stored autoscaling/v2 type, see scheme_autoscaling.go).
func schedulingNodeAutoscalingValidators() map[schema.GroupKind]Funcs {
	return map[schema.GroupKind]Funcs{
		{Group: schedulingv1.GroupName, Kind: "PriorityClass"}: {
			Create: typed(ValidatePriorityClass),
			Update: typed2(ValidatePriorityClassUpdate),
		},
		{Group: nodev1.GroupName, Kind: "RuntimeClass"}: {
			Create: typed(ValidateRuntimeClass),
			Update: typed2(ValidateRuntimeClassUpdate),
		},
		{Group: autoscalingv2.GroupName, Kind: "HorizontalPodAutoscaler"}: {
			Create:       typed(ValidateHorizontalPodAutoscaler),
			Update:       typed2(ValidateHorizontalPodAutoscalerUpdate),
			StatusUpdate: typed2(ValidateHorizontalPodAutoscalerStatusUpdate),
		},
	}
}

// Priority values and the built-in PriorityClasses, as upstream (pkg/apis/scheduling).
const (
	// SystemPriorityClassPrefix starts the names reserved for the built-in classes.
	SystemPriorityClassPrefix = "system-"
	// HighestUserDefinablePriority is the largest value a PriorityClass of a user may have.
	HighestUserDefinablePriority = int32(1000000000)
	// SystemCriticalPriority is the value of system-cluster-critical.
	SystemCriticalPriority = 2 * HighestUserDefinablePriority
	// SystemClusterCritical and SystemNodeCritical name the built-in classes.
	SystemClusterCritical = "system-cluster-critical"
	SystemNodeCritical    = "system-node-critical"
)

// SystemPriorityClasses returns the built-in PriorityClasses every site has: created on start,
// never deletable, the only classes whose names may start with "system-".
func SystemPriorityClasses() []*schedulingv1.PriorityClass {
	preempt := corev1.PreemptLowerPriority
	return []*schedulingv1.PriorityClass{
		{
			ObjectMeta:       metav1.ObjectMeta{Name: SystemNodeCritical},
			Value:            SystemCriticalPriority + 1000,
			Description:      "Used for system critical pods that must not be moved from their current node.",
			PreemptionPolicy: &preempt,
		},
		{
			ObjectMeta:       metav1.ObjectMeta{Name: SystemClusterCritical},
			Value:            SystemCriticalPriority,
			Description:      "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
			PreemptionPolicy: &preempt,
		},
	}
}

// IsSystemPriorityClass reports whether name is one of the built-in classes.
func IsSystemPriorityClass(name string) bool {
	for _, pc := range SystemPriorityClasses() {
		if pc.Name == name {
			return true
		}
	}
	return false
}

// isKnownSystemPriorityClass checks a class named like a built-in one against it (upstream
// schedulingapiv1.IsKnownSystemPriorityClass).
func isKnownSystemPriorityClass(name string, value int32, globalDefault bool) error {
	for _, spc := range SystemPriorityClasses() {
		if spc.Name != name {
			continue
		}
		if spc.Value != value {
			return fmt.Errorf("value of %v PriorityClass must be %v", spc.Name, spc.Value)
		}
		if spc.GlobalDefault != globalDefault {
			return fmt.Errorf("globalDefault of %v PriorityClass must be %v", spc.Name, spc.GlobalDefault)
		}
		return nil
	}
	return fmt.Errorf("%v is not a known system priority class", name)
}

// ValidatePriorityClass validates a scheduling.k8s.io/v1 PriorityClass: "system-" names are
// reserved for the built-in classes (with their exact value), other classes may not go above
// HighestUserDefinablePriority. That only one class is the global default is checked by the
// Priority admission plugin, which sees the other classes.
func ValidatePriorityClass(pc *schedulingv1.PriorityClass) field.ErrorList {
	errs := validateMeta(&pc.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	if strings.HasPrefix(pc.Name, SystemPriorityClassPrefix) {
		if err := isKnownSystemPriorityClass(pc.Name, pc.Value, pc.GlobalDefault); err != nil {
			errs = append(errs, field.Forbidden(metaPath.Child("name"),
				"priority class names with '"+SystemPriorityClassPrefix+"' prefix are reserved for system use only. error: "+err.Error()))
		}
	} else if pc.Value > HighestUserDefinablePriority {
		errs = append(errs, field.Forbidden(field.NewPath("value"),
			fmt.Sprintf("maximum allowed value of a user defined priority is %v", HighestUserDefinablePriority)))
	}
	if pc.PreemptionPolicy != nil {
		errs = append(errs, validatePreemptionPolicy(pc.PreemptionPolicy, field.NewPath("preemptionPolicy"))...)
	}
	return errs
}

// ValidatePriorityClassUpdate validates a PriorityClass update: the new object as on create,
// and value and preemptionPolicy unchanged (pods already carry them).
func ValidatePriorityClassUpdate(pc, old *schedulingv1.PriorityClass) field.ErrorList {
	errs := ValidatePriorityClass(pc)
	errs = append(errs, validateMetaUpdate(&pc.ObjectMeta, &old.ObjectMeta)...)
	if pc.Value != old.Value {
		errs = append(errs, field.Forbidden(field.NewPath("value"), "may not be changed in an update."))
	}
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(pc.PreemptionPolicy, old.PreemptionPolicy, field.NewPath("preemptionPolicy"))...)
	return errs
}

// validatePreemptionPolicy is upstream's ValidatePreemptionPolicy.
func validatePreemptionPolicy(p *corev1.PreemptionPolicy, fldPath *field.Path) field.ErrorList {
	switch *p {
	case corev1.PreemptLowerPriority, corev1.PreemptNever:
		return nil
	case "":
		return field.ErrorList{field.Required(fldPath, "set PreemptLowerPriority or Never, or leave preemptionPolicy unset")}
	default:
		return field.ErrorList{field.NotSupported(fldPath, *p, []corev1.PreemptionPolicy{corev1.PreemptLowerPriority, corev1.PreemptNever})}
	}
}
