package validation

import (
	"fmt"
	"math"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var coreSpecPath = field.NewPath("spec")

// corePodUpdateForbidden is the upstream wording of the rejected pod spec update, followed by
// the fields that did change so the user knows what to revert.
const corePodUpdateForbidden = "pod updates may not change fields other than `spec.containers[*].image`," +
	"`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations)," +
	"`spec.terminationGracePeriodSeconds`,`spec.schedulingGates` (only removals)"

func coreValidatePod(pod *corev1.Pod) field.ErrorList {
	allErrs := coreMeta(&pod.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, ValidatePodSpec(&pod.Spec, &pod.ObjectMeta, coreSpecPath)...)
	if len(pod.Spec.EphemeralContainers) > 0 {
		allErrs = append(allErrs, field.Forbidden(coreSpecPath.Child("ephemeralContainers"), "cannot be set on create; use the pods/ephemeralcontainers subresource"))
	}
	return allErrs
}

// coreValidatePodUpdate checks a spec update. Only the fields that may change are validated
// again, so a stored pod stays updatable (labels, finalizers) even if a rule got stricter.
func coreValidatePodUpdate(pod, old *corev1.Pod) field.ErrorList {
	allErrs := coreMetaUpdate(&pod.ObjectMeta, &old.ObjectMeta)
	spec, oldSpec := &pod.Spec, &old.Spec

	for _, set := range []struct {
		cs []corev1.Container
		p  *field.Path
	}{{spec.InitContainers, coreSpecPath.Child("initContainers")}, {spec.Containers, coreSpecPath.Child("containers")}} {
		for i, c := range set.cs {
			ip := set.p.Index(i).Child("image")
			if c.Image == "" {
				allErrs = append(allErrs, field.Required(ip, "the container image, such as nginx:1.27"))
			} else if strings.TrimSpace(c.Image) != c.Image {
				allErrs = append(allErrs, field.Invalid(ip, c.Image, "must not have leading or trailing whitespace"))
			}
		}
	}

	adPath := coreSpecPath.Child("activeDeadlineSeconds")
	if spec.ActiveDeadlineSeconds != nil {
		v := *spec.ActiveDeadlineSeconds
		switch {
		case v < 0 || v > math.MaxInt32:
			allErrs = append(allErrs, field.Invalid(adPath, v, fmt.Sprintf("must be between 0 and %d, inclusive", math.MaxInt32)))
		case oldSpec.ActiveDeadlineSeconds != nil && v > *oldSpec.ActiveDeadlineSeconds:
			allErrs = append(allErrs, field.Invalid(adPath, v, fmt.Sprintf("must be less than or equal to previous value (%d)", *oldSpec.ActiveDeadlineSeconds)))
		}
	} else if oldSpec.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, field.Invalid(adPath, nil, "must not update from a positive integer to nil value"))
	}
	if g := spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		allErrs = append(allErrs, field.Invalid(coreSpecPath.Child("terminationGracePeriodSeconds"), *g, "must be greater than or equal to 0"))
	}

	tolPath := coreSpecPath.Child("tolerations")
	allErrs = append(allErrs, coreValidateTolerations(spec.Tolerations, tolPath)...)
	allErrs = append(allErrs, coreOnlyAddedTolerations(spec.Tolerations, oldSpec.Tolerations, tolPath)...)

	gatesPath := coreSpecPath.Child("schedulingGates")
	allErrs = append(allErrs, coreValidateSchedulingGates(spec.SchedulingGates, gatesPath)...)
	oldGates := sets.New[string]()
	for _, g := range oldSpec.SchedulingGates {
		oldGates.Insert(g.Name)
	}
	for i, g := range spec.SchedulingGates {
		if !oldGates.Has(g.Name) {
			allErrs = append(allErrs, field.Forbidden(gatesPath.Index(i), fmt.Sprintf("only deletion is allowed, but found new scheduling gate '%s'", g.Name)))
		}
	}

	// Compare what remains once the mutable fields are taken from the old spec.
	munged := spec.DeepCopy()
	if len(munged.Containers) == len(oldSpec.Containers) {
		for i := range munged.Containers {
			munged.Containers[i].Image = oldSpec.Containers[i].Image
		}
	}
	if len(munged.InitContainers) == len(oldSpec.InitContainers) {
		for i := range munged.InitContainers {
			munged.InitContainers[i].Image = oldSpec.InitContainers[i].Image
		}
	}
	munged.ActiveDeadlineSeconds = oldSpec.ActiveDeadlineSeconds
	munged.TerminationGracePeriodSeconds = oldSpec.TerminationGracePeriodSeconds
	munged.Tolerations = oldSpec.Tolerations
	munged.SchedulingGates = oldSpec.SchedulingGates
	if oldSpec.NodeName == "" {
		// Binding is the normal way, but setting an empty nodeName once is harmless.
		munged.NodeName = oldSpec.NodeName
	} else if spec.NodeName != oldSpec.NodeName {
		allErrs = append(allErrs, field.Forbidden(coreSpecPath.Child("nodeName"), fmt.Sprintf("may not be changed once the pod is bound (bound to %q); delete the pod and create a new one", oldSpec.NodeName)))
		munged.NodeName = oldSpec.NodeName
	}
	if len(oldSpec.SchedulingGates) > 0 {
		// While a pod is gated, its placement may be narrowed (upstream: mutable pod
		// scheduling directives): nodeSelector entries may be added and node affinity set.
		nsPath := coreSpecPath.Child("nodeSelector")
		for k, v := range oldSpec.NodeSelector {
			if nv, ok := spec.NodeSelector[k]; !ok || nv != v {
				allErrs = append(allErrs, field.Forbidden(nsPath.Key(k), "only additions to nodeSelector are allowed while the pod has scheduling gates"))
			}
		}
		munged.NodeSelector = oldSpec.NodeSelector
		if munged.Affinity != nil || oldSpec.Affinity != nil {
			var na *corev1.NodeAffinity
			if oldSpec.Affinity != nil {
				na = oldSpec.Affinity.NodeAffinity
			}
			if munged.Affinity == nil {
				munged.Affinity = &corev1.Affinity{}
			}
			munged.Affinity.NodeAffinity = na
			if spec.Affinity != nil && spec.Affinity.NodeAffinity != nil {
				allErrs = append(allErrs, coreValidateAffinity(&corev1.Affinity{NodeAffinity: spec.Affinity.NodeAffinity}, coreSpecPath.Child("affinity"))...)
			}
			if oldSpec.Affinity == nil && apiequality.Semantic.DeepEqual(munged.Affinity, &corev1.Affinity{}) {
				munged.Affinity = nil
			}
		}
	}
	if !apiequality.Semantic.DeepEqual(munged, oldSpec) {
		allErrs = append(allErrs, field.Forbidden(coreSpecPath, corePodUpdateForbidden+"; changed: "+strings.Join(coreChangedFields(munged, oldSpec, "spec"), ", ")))
	}
	return allErrs
}

// coreChangedFields names the top-level fields (by JSON name) that differ between a and b,
// descending one level into container lists so "spec.containers[0].ports" is reported.
func coreChangedFields(a, b *corev1.PodSpec, prefix string) []string {
	var out []string
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	t := va.Type()
	for i := 0; i < t.NumField(); i++ {
		fa, fb := va.Field(i).Interface(), vb.Field(i).Interface()
		if apiequality.Semantic.DeepEqual(fa, fb) {
			continue
		}
		name := prefix + "." + strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
		ca, okA := fa.([]corev1.Container)
		cb, okB := fb.([]corev1.Container)
		if okA && okB && len(ca) == len(cb) {
			for j := range ca {
				out = append(out, coreChangedContainerFields(&ca[j], &cb[j], fmt.Sprintf("%s[%d]", name, j))...)
			}
			continue
		}
		out = append(out, name)
	}
	return out
}

func coreChangedContainerFields(a, b *corev1.Container, prefix string) []string {
	var out []string
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	t := va.Type()
	for i := 0; i < t.NumField(); i++ {
		if !apiequality.Semantic.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, prefix+"."+strings.Split(t.Field(i).Tag.Get("json"), ",")[0])
		}
	}
	return out
}

// coreOnlyAddedTolerations: every old toleration must still be there; only its
// tolerationSeconds may change.
func coreOnlyAddedTolerations(tols, old []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, o := range old {
		oc := o
		oc.TolerationSeconds = nil
		found := false
		for _, n := range tols {
			nc := n
			nc.TolerationSeconds = nil
			if nc == oc {
				found = true
				break
			}
		}
		if !found {
			allErrs = append(allErrs, field.Forbidden(fldPath, fmt.Sprintf("existing toleration can not be modified except its tolerationSeconds (removed or changed: key=%q operator=%q value=%q effect=%q)", o.Key, o.Operator, o.Value, o.Effect)))
		}
	}
	return allErrs
}

var corePodPhases = []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown}

// coreValidatePodStatusUpdate checks what the node agent and controllers write to pods/status.
func coreValidatePodStatusUpdate(pod, old *corev1.Pod) field.ErrorList {
	allErrs := coreMetaUpdate(&pod.ObjectMeta, &old.ObjectMeta)
	sp := field.NewPath("status")
	st := &pod.Status
	allErrs = append(allErrs, coreNotSupported(st.Phase, corePodPhases, true, sp.Child("phase"))...)
	if (old.Status.Phase == corev1.PodSucceeded || old.Status.Phase == corev1.PodFailed) && st.Phase != old.Status.Phase {
		allErrs = append(allErrs, field.Forbidden(sp.Child("phase"), fmt.Sprintf("cannot transition from terminal phase %q to %q", old.Status.Phase, st.Phase)))
	}
	allErrs = append(allErrs, coreValidateStatusIPs(st.PodIP, corePodIPStrings(st.PodIPs), sp.Child("podIP"), sp.Child("podIPs"))...)
	allErrs = append(allErrs, coreValidateStatusIPs(st.HostIP, coreHostIPStrings(st.HostIPs), sp.Child("hostIP"), sp.Child("hostIPs"))...)
	for i, c := range st.Conditions {
		if c.Type == "" {
			allErrs = append(allErrs, field.Required(sp.Child("conditions").Index(i).Child("type"), "such as Ready"))
		}
		allErrs = append(allErrs, coreNotSupported(c.Status, []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}, false, sp.Child("conditions").Index(i).Child("status"))...)
	}
	allErrs = append(allErrs, coreContainerStatusNames(st.ContainerStatuses, pod.Spec.Containers, sp.Child("containerStatuses"))...)
	allErrs = append(allErrs, coreContainerStatusNames(st.InitContainerStatuses, pod.Spec.InitContainers, sp.Child("initContainerStatuses"))...)
	return allErrs
}

func corePodIPStrings(ips []corev1.PodIP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.IP
	}
	return out
}

func coreHostIPStrings(ips []corev1.HostIP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.IP
	}
	return out
}

// coreValidateStatusIPs checks the single-IP field and its dual-stack list.
func coreValidateStatusIPs(single string, list []string, singlePath, listPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if single != "" {
		allErrs = append(allErrs, coreIP(single, singlePath)...)
	}
	if len(list) > 0 && single != list[0] {
		allErrs = append(allErrs, field.Invalid(listPath.Index(0), list[0], fmt.Sprintf("must match %s (%q)", singlePath.String(), single)))
	}
	if len(list) > 2 {
		allErrs = append(allErrs, field.TooMany(listPath, len(list), 2))
	}
	seen := sets.New[string]()
	for i, ip := range list {
		p := listPath.Index(i).Child("ip")
		allErrs = append(allErrs, coreIP(ip, p)...)
		if seen.Has(ip) {
			allErrs = append(allErrs, field.Duplicate(p, ip))
		}
		seen.Insert(ip)
	}
	return allErrs
}

func coreContainerStatusNames(statuses []corev1.ContainerStatus, cs []corev1.Container, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := sets.New[string]()
	for _, c := range cs {
		names.Insert(c.Name)
	}
	for i, s := range statuses {
		if !names.Has(s.Name) {
			allErrs = append(allErrs, field.NotFound(fldPath.Index(i).Child("name"), s.Name))
		}
	}
	return allErrs
}
