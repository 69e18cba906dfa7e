package validation

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Node

func coreValidateNode(n *corev1.Node) field.ErrorList {
	allErrs := coreMeta(&n.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, coreValidateNodeSpec(&n.Spec)...)
	return append(allErrs, coreValidateNodeStatus(&n.Status)...)
}

func coreValidateNodeSpec(spec *corev1.NodeSpec) field.ErrorList {
	var allErrs field.ErrorList
	cidrPath, cidrsPath := coreSpecPath.Child("podCIDR"), coreSpecPath.Child("podCIDRs")
	if spec.PodCIDR != "" {
		allErrs = append(allErrs, coreCIDR(spec.PodCIDR, cidrPath)...)
	}
	if len(spec.PodCIDRs) > 0 && spec.PodCIDRs[0] != spec.PodCIDR {
		allErrs = append(allErrs, field.Invalid(cidrsPath.Index(0), spec.PodCIDRs[0], fmt.Sprintf("first value must match `podCIDR` (%q)", spec.PodCIDR)))
	}
	families := map[bool]bool{}
	for i, c := range spec.PodCIDRs {
		p := cidrsPath.Index(i)
		if errs := coreCIDR(c, p); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
			continue
		}
		if pfx, err := netip.ParsePrefix(c); err == nil {
			v4 := pfx.Addr().Unmap().Is4()
			if families[v4] {
				allErrs = append(allErrs, field.Invalid(p, c, "may specify no more than one CIDR for each IP family"))
			}
			families[v4] = true
		}
	}
	allErrs = append(allErrs, coreValidateTaints(spec.Taints, coreSpecPath.Child("taints"))...)
	return allErrs
}

func coreValidateTaints(taints []corev1.Taint, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[string]()
	for i, t := range taints {
		p := fldPath.Index(i)
		if t.Key == "" {
			allErrs = append(allErrs, field.Required(p.Child("key"), "a label-style key such as example.com/dedicated"))
		} else {
			allErrs = append(allErrs, coreQualifiedName(t.Key, p.Child("key"))...)
		}
		if t.Value != "" {
			allErrs = append(allErrs, coreLabelValue(t.Value, p.Child("value"))...)
		}
		allErrs = append(allErrs, coreNotSupported(t.Effect, coreTaintEffects, false, p.Child("effect"))...)
		key := t.Key + ":" + string(t.Effect)
		if seen.Has(key) {
			allErrs = append(allErrs, field.Duplicate(p, key))
		}
		seen.Insert(key)
	}
	return allErrs
}

var coreNodeAddressTypes = []corev1.NodeAddressType{
	corev1.NodeHostName, corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeInternalDNS, corev1.NodeExternalDNS,
}

func coreValidateNodeStatus(st *corev1.NodeStatus) field.ErrorList {
	var allErrs field.ErrorList
	sp := field.NewPath("status")
	for i, a := range st.Addresses {
		p := sp.Child("addresses").Index(i)
		allErrs = append(allErrs, coreNotSupported(a.Type, coreNodeAddressTypes, false, p.Child("type"))...)
		if a.Address == "" {
			allErrs = append(allErrs, field.Required(p.Child("address"), "the address of this type"))
		}
	}
	for i, c := range st.Conditions {
		p := sp.Child("conditions").Index(i)
		if c.Type == "" {
			allErrs = append(allErrs, field.Required(p.Child("type"), "such as Ready"))
		}
		allErrs = append(allErrs, coreNotSupported(c.Status, []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}, false, p.Child("status"))...)
	}
	allErrs = append(allErrs, coreResourceList(st.Capacity, coreAnyResource, "node", sp.Child("capacity"))...)
	allErrs = append(allErrs, coreResourceList(st.Allocatable, coreAnyResource, "node", sp.Child("allocatable"))...)
	return allErrs
}

func coreAnyResource(string) bool { return true }

func coreValidateNodeUpdate(n, old *corev1.Node) field.ErrorList {
	allErrs := coreMetaUpdate(&n.ObjectMeta, &old.ObjectMeta)
	allErrs = append(allErrs, coreValidateNodeSpec(&n.Spec)...)
	allErrs = append(allErrs, coreValidateNodeStatus(&n.Status)...)
	return append(allErrs, coreValidateNodeImmutables(n, old)...)
}

// coreValidateNodeImmutables: the pod CIDR and provider ID are assigned once.
func coreValidateNodeImmutables(n, old *corev1.Node) field.ErrorList {
	var allErrs field.ErrorList
	if old.Spec.PodCIDR != "" && n.Spec.PodCIDR != old.Spec.PodCIDR {
		allErrs = append(allErrs, field.Forbidden(coreSpecPath.Child("podCIDR"), fmt.Sprintf("node updates may not change podCIDR except from \"\" to valid (is %q)", old.Spec.PodCIDR)))
	}
	if len(old.Spec.PodCIDRs) > 0 {
		for i, c := range old.Spec.PodCIDRs {
			if i >= len(n.Spec.PodCIDRs) || n.Spec.PodCIDRs[i] != c {
				allErrs = append(allErrs, field.Forbidden(coreSpecPath.Child("podCIDRs"), "node updates may not change podCIDRs except from \"\" to valid"))
				break
			}
		}
	}
	if old.Spec.ProviderID != "" && n.Spec.ProviderID != old.Spec.ProviderID {
		allErrs = append(allErrs, field.Forbidden(coreSpecPath.Child("providerID"), fmt.Sprintf("node updates may not change providerID except from \"\" to valid (is %q)", old.Spec.ProviderID)))
	}
	return allErrs
}

func coreValidateNodeStatusUpdate(n, old *corev1.Node) field.ErrorList {
	allErrs := coreMetaUpdate(&n.ObjectMeta, &old.ObjectMeta)
	return append(allErrs, coreValidateNodeStatus(&n.Status)...)
}

// Event (core/v1)

const (
	coreEventReasonMax  = 128
	coreEventMessageMax = 32 * 1024
	coreEventNameMax    = 128
)

func coreValidateEvent(e *corev1.Event) field.ErrorList {
	allErrs := coreMeta(&e.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(allErrs, coreValidateEventFields(e)...)
}

func coreValidateEventFields(e *corev1.Event) field.ErrorList {
	var allErrs field.ErrorList
	nsPath := field.NewPath("involvedObject", "namespace")
	if e.InvolvedObject.Namespace != "" && e.InvolvedObject.Namespace != e.Namespace {
		allErrs = append(allErrs, field.Invalid(nsPath, e.InvolvedObject.Namespace, fmt.Sprintf("does not match event.namespace (%q)", e.Namespace)))
	}
	if e.InvolvedObject.Namespace == "" && coreIsNamespacedCoreKind(e.InvolvedObject) && e.Namespace != "" && e.Namespace != "default" {
		allErrs = append(allErrs, field.Required(nsPath, fmt.Sprintf("a %s is namespaced: must be the event's namespace (%q)", e.InvolvedObject.Kind, e.Namespace)))
	}
	if e.Type != "" {
		allErrs = append(allErrs, coreNotSupported(e.Type, []string{corev1.EventTypeNormal, corev1.EventTypeWarning}, false, field.NewPath("type"))...)
	}
	if len(e.Reason) > coreEventReasonMax {
		allErrs = append(allErrs, field.TooLong(field.NewPath("reason"), "", coreEventReasonMax))
	}
	if len(e.Message) > coreEventMessageMax {
		allErrs = append(allErrs, field.TooLong(field.NewPath("message"), "", coreEventMessageMax))
	}
	if e.ReportingController != "" {
		allErrs = append(allErrs, coreQualifiedName(e.ReportingController, field.NewPath("reportingComponent"))...)
	}
	for _, f := range []struct{ v, name string }{
		{e.ReportingController, "reportingComponent"}, {e.ReportingInstance, "reportingInstance"}, {e.Action, "action"},
	} {
		if len(f.v) > coreEventNameMax {
			allErrs = append(allErrs, field.TooLong(field.NewPath(f.name), "", coreEventNameMax))
		}
	}
	if e.Count < 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("count"), e.Count, "must be greater than or equal to 0"))
	}
	return allErrs
}

// coreIsNamespacedCoreKind reports involved objects that are surely namespaced (core/v1 and
// the common workload kinds); unknown kinds are given the benefit of the doubt.
func coreIsNamespacedCoreKind(ref corev1.ObjectReference) bool {
	switch ref.APIVersion {
	case "v1", "":
		switch ref.Kind {
		case "Pod", "Service", "ConfigMap", "Secret", "ServiceAccount", "PersistentVolumeClaim", "Endpoints",
			"ResourceQuota", "LimitRange", "ReplicationController", "PodTemplate":
			return true
		}
	case "apps/v1":
		return true
	case "batch/v1":
		return true
	}
	return false
}

func coreValidateEventUpdate(e, old *corev1.Event) field.ErrorList {
	allErrs := coreMetaUpdate(&e.ObjectMeta, &old.ObjectMeta)
	return append(allErrs, coreValidateEventFields(e)...)
}
