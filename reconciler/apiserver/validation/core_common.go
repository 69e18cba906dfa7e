package validation

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Shared helpers of the core/v1 validation. Enum fields that the defaulting package always fills
// (restartPolicy, dnsPolicy, imagePullPolicy, protocol, ...) accept the empty string here: an
// empty value can only reach validation if it means "the default", and rejecting it would blame
// the user for a field they never wrote.

var coreMetadataPath = field.NewPath("metadata")

// coreTyped adapts a coreTyped create validator to Funcs.Create.
func coreTyped[T any, PT interface {
	*T
	runtime.Object
}](f func(PT) field.ErrorList) func(runtime.Object) field.ErrorList {
	return func(obj runtime.Object) field.ErrorList {
		o, ok := obj.(PT)
		if !ok {
			return field.ErrorList{field.InternalError(nil, fmt.Errorf("validation: expected %T, got %T", o, obj))}
		}
		return f(o)
	}
}

// coreTyped2 adapts a coreTyped update validator to Funcs.Update / Funcs.StatusUpdate.
func coreTyped2[T any, PT interface {
	*T
	runtime.Object
}](f func(obj, old PT) field.ErrorList) func(runtime.Object, runtime.Object) field.ErrorList {
	return func(obj, old runtime.Object) field.ErrorList {
		o, ok := obj.(PT)
		if !ok {
			return field.ErrorList{field.InternalError(nil, fmt.Errorf("validation: expected %T, got %T", o, obj))}
		}
		p, ok := old.(PT)
		if !ok {
			return field.ErrorList{field.InternalError(nil, fmt.Errorf("validation: expected old %T, got %T", p, old))}
		}
		return f(o, p)
	}
}

// ValidateLabelsAndAnnotations checks label keys/values and annotation keys/total size, for
// metadata that is not a whole ObjectMeta (pod templates, selectors in templates).
func ValidateLabelsAndAnnotations(labels, annotations map[string]string, fldPath *field.Path) field.ErrorList {
	allErrs := metav1validation.ValidateLabels(labels, fldPath.Child("labels"))
	return append(allErrs, apimachineryvalidation.ValidateAnnotations(annotations, fldPath.Child("annotations"))...)
}

func coreMeta(m *metav1.ObjectMeta, namespaced bool, nameFn apimachineryvalidation.ValidateNameFunc) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMeta(m, namespaced, nameFn, coreMetadataPath)
}

func coreMetaUpdate(m, old *metav1.ObjectMeta) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMetaUpdate(m, old, coreMetadataPath)
}

// coreNotSupported reports value unless it is one of allowed. The empty value is accepted when
// emptyOK (a defaulted field).
func coreNotSupported[T ~string](value T, allowed []T, emptyOK bool, fldPath *field.Path) field.ErrorList {
	if value == "" && emptyOK {
		return nil
	}
	for _, a := range allowed {
		if value == a {
			return nil
		}
	}
	if value == "" {
		return field.ErrorList{field.Required(fldPath, fmt.Sprintf("must be one of %s", coreQuoteAll(allowed)))}
	}
	return field.ErrorList{field.NotSupported(fldPath, value, allowed)}
}

func coreQuoteAll[T ~string](values []T) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = fmt.Sprintf("%q", string(v))
	}
	return strings.Join(q, ", ")
}

func coreInvalidEach(fldPath *field.Path, value any, msgs []string) field.ErrorList {
	var allErrs field.ErrorList
	for _, m := range msgs {
		allErrs = append(allErrs, field.Invalid(fldPath, value, m))
	}
	return allErrs
}

func coreDNSLabel(value string, fldPath *field.Path) field.ErrorList {
	return coreInvalidEach(fldPath, value, utilvalidation.IsDNS1123Label(value))
}

func coreDNSSubdomain(value string, fldPath *field.Path) field.ErrorList {
	return coreInvalidEach(fldPath, value, utilvalidation.IsDNS1123Subdomain(value))
}

func coreQualifiedName(value string, fldPath *field.Path) field.ErrorList {
	return coreInvalidEach(fldPath, value, content.IsLabelKey(value))
}

func coreLabelValue(value string, fldPath *field.Path) field.ErrorList {
	return coreInvalidEach(fldPath, value, content.IsLabelValue(value))
}

// corePortNumber checks 1-65535; zero is reported as missing.
func corePortNumber(port int32, fldPath *field.Path) field.ErrorList {
	if port == 0 {
		return field.ErrorList{field.Required(fldPath, "must be a port number between 1 and 65535")}
	}
	return coreInvalidEach(fldPath, port, utilvalidation.IsValidPortNum(int(port)))
}

var coreProtocols = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}

func coreProtocol(p corev1.Protocol, fldPath *field.Path) field.ErrorList {
	return coreNotSupported(p, coreProtocols, true, fldPath)
}

// coreIP checks an address in a field that predates strict IP parsing upstream (leading zeros
// and IPv4-mapped IPv6 are still rejected, non-canonical IPv6 spelling is accepted).
func coreIP(value string, fldPath *field.Path) field.ErrorList {
	if value == "" {
		return field.ErrorList{field.Required(fldPath, "must be an IPv4 or IPv6 address")}
	}
	return utilvalidation.IsValidIPForLegacyField(fldPath, value, true, nil)
}

// coreNonSpecialIP rejects addresses that can never be a backend or an external IP.
func coreNonSpecialIP(value string, fldPath *field.Path) field.ErrorList {
	if errs := coreIP(value, fldPath); len(errs) > 0 {
		return errs
	}
	ip, err := netip.ParseAddr(value)
	if err != nil {
		return nil
	}
	ip = ip.Unmap()
	switch {
	case ip.IsUnspecified():
		return field.ErrorList{field.Invalid(fldPath, value, "may not be unspecified (0.0.0.0 or ::)")}
	case ip.IsLoopback():
		return field.ErrorList{field.Invalid(fldPath, value, "may not be in the loopback range (127.0.0.0/8, ::1/128)")}
	case ip.IsLinkLocalUnicast():
		return field.ErrorList{field.Invalid(fldPath, value, "may not be in the link-local range (169.254.0.0/16, fe80::/10)")}
	case ip.IsLinkLocalMulticast():
		return field.ErrorList{field.Invalid(fldPath, value, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)")}
	}
	return nil
}

func coreCIDR(value string, fldPath *field.Path) field.ErrorList {
	return utilvalidation.IsValidCIDRForLegacyField(fldPath, value, true, nil)
}

func coreNonnegQuantity(q resource.Quantity, fldPath *field.Path) field.ErrorList {
	if q.Sign() < 0 {
		return field.ErrorList{field.Invalid(fldPath, q.String(), "must be greater than or equal to 0")}
	}
	return nil
}

func corePositiveQuantity(q resource.Quantity, fldPath *field.Path) field.ErrorList {
	if q.Sign() <= 0 {
		return field.ErrorList{field.Invalid(fldPath, q.String(), "must be greater than zero")}
	}
	return nil
}

func coreNonneg(value int64, fldPath *field.Path) field.ErrorList {
	if value < 0 {
		return field.ErrorList{field.Invalid(fldPath, value, "must be greater than or equal to 0")}
	}
	return nil
}

// coreResourceName checks a key of a ResourceList: either a qualified name with a domain
// prefix (extended resources) or one of the names in standard.
func coreResourceName(name corev1.ResourceName, standard func(string) bool, what string, fldPath *field.Path) field.ErrorList {
	s := string(name)
	if errs := coreQualifiedName(s, fldPath); len(errs) > 0 {
		return errs
	}
	if !strings.Contains(s, "/") && !standard(s) {
		return field.ErrorList{field.Invalid(fldPath, s, fmt.Sprintf("must be a standard %s resource name (such as cpu, memory) or a domain-prefixed name (example.com/%s)", what, s))}
	}
	return nil
}

func coreIsContainerResource(s string) bool {
	switch s {
	case "cpu", "memory", "ephemeral-storage", "storage":
		return true
	}
	return strings.HasPrefix(s, corev1.ResourceHugePagesPrefix)
}

// coreResourceList checks names and non-negative values of a ResourceList.
func coreResourceList(list corev1.ResourceList, standard func(string) bool, what string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, name := range coreSortedKeys(list) {
		q := list[name]
		p := fldPath.Key(string(name))
		allErrs = append(allErrs, coreResourceName(name, standard, what, p)...)
		allErrs = append(allErrs, coreNonnegQuantity(q, p)...)
	}
	return allErrs
}

// coreNodeSelector checks a required node selector (node affinity, PV node affinity).
func coreNodeSelector(ns *corev1.NodeSelector, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	terms := fldPath.Child("nodeSelectorTerms")
	if len(ns.NodeSelectorTerms) == 0 {
		return append(allErrs, field.Required(terms, "must have at least one node selector term"))
	}
	for i := range ns.NodeSelectorTerms {
		allErrs = append(allErrs, coreNodeSelectorTerm(&ns.NodeSelectorTerms[i], terms.Index(i))...)
	}
	return allErrs
}

var coreNodeSelectorOps = []corev1.NodeSelectorOperator{
	corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists,
	corev1.NodeSelectorOpDoesNotExist, corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt,
}

func coreNodeSelectorTerm(term *corev1.NodeSelectorTerm, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for j, req := range term.MatchExpressions {
		p := fldPath.Child("matchExpressions").Index(j)
		allErrs = append(allErrs, coreQualifiedName(req.Key, p.Child("key"))...)
		vp := p.Child("values")
		switch req.Operator {
		case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
			if len(req.Values) == 0 {
				allErrs = append(allErrs, field.Required(vp, "must be specified when `operator` is 'In' or 'NotIn'"))
			}
			for k, v := range req.Values {
				allErrs = append(allErrs, coreLabelValue(v, vp.Index(k))...)
			}
		case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
			if len(req.Values) > 0 {
				allErrs = append(allErrs, field.Forbidden(vp, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
			}
		case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
			if len(req.Values) != 1 {
				allErrs = append(allErrs, field.Required(vp, "must be specified single value when `operator` is 'Lt' or 'Gt'"))
			}
		default:
			allErrs = append(allErrs, coreNotSupported(req.Operator, coreNodeSelectorOps, false, p.Child("operator"))...)
		}
	}
	for j, req := range term.MatchFields {
		p := fldPath.Child("matchFields").Index(j)
		if req.Key != "metadata.name" {
			allErrs = append(allErrs, field.NotSupported(p.Child("key"), req.Key, []string{"metadata.name"}))
		}
		if req.Operator != corev1.NodeSelectorOpIn && req.Operator != corev1.NodeSelectorOpNotIn {
			allErrs = append(allErrs, field.NotSupported(p.Child("operator"), req.Operator, []corev1.NodeSelectorOperator{corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn}))
		}
		if len(req.Values) != 1 {
			allErrs = append(allErrs, field.Required(p.Child("values"), "must have exactly one value, the node name"))
		} else {
			allErrs = append(allErrs, coreDNSSubdomain(req.Values[0], p.Child("values").Index(0))...)
		}
	}
	return allErrs
}

// coreLabelSelector checks a metav1.LabelSelector (syntax only; an empty selector is valid).
func coreLabelSelector(sel *metav1.LabelSelector, fldPath *field.Path) field.ErrorList {
	return metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, fldPath)
}

func coreSortedKeys[K ~string, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}
