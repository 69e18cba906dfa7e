package printers

import (
	"fmt"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

var endpointSlicePrinter = named([]metav1.TableColumnDefinition{
	col("AddressType", "string", "addressType specifies the type of address carried by this EndpointSlice."),
	col("Ports", "string", "ports specifies the list of network ports exposed by each endpoint in this slice."),
	col("Endpoints", "string", "endpoints is a list of unique endpoints in this slice."),
	ageColumn,
}, func(s *discoveryv1.EndpointSlice, c clock) []any {
	var ports []string
	for _, p := range s.Ports {
		switch {
		case p.Port != nil:
			ports = append(ports, strconv.Itoa(int(*p.Port)))
		case p.Name != nil:
			ports = append(ports, *p.Name)
		default:
			ports = append(ports, "*")
		}
	}
	var addrs []string
	for _, e := range s.Endpoints {
		addrs = append(addrs, e.Addresses...)
	}
	return []any{string(s.AddressType), firstThree(ports), firstThree(addrs), c.age(s.CreationTimestamp)}
})

// firstThree joins up to three entries, then "+ N more...", and "<unset>" for none.
func firstThree(list []string) string {
	const max = 3
	if len(list) == 0 {
		return "<unset>"
	}
	if len(list) > max {
		return fmt.Sprintf("%s + %d more...", strings.Join(list[:max], ","), len(list)-max)
	}
	return strings.Join(list, ",")
}

var ingressPrinter = named([]metav1.TableColumnDefinition{
	col("Class", "string", "The name of the IngressClass resource that should be used for ingress."),
	col("Hosts", "string", "Hosts that incoming requests are matched against before the ingress rule"),
	col("Address", "string", "Address is a list containing ingress points for the load-balancer"),
	col("Ports", "string", "Ports of TLS configurations that open"),
	ageColumn,
}, func(ing *networkingv1.Ingress, c clock) []any {
	class := none
	if ing.Spec.IngressClassName != nil {
		class = *ing.Spec.IngressClassName
	}
	ports := "80"
	if len(ing.Spec.TLS) != 0 {
		ports = "80, 443"
	}
	var addrs []string
	for _, lb := range ing.Status.LoadBalancer.Ingress {
		if lb.IP != "" {
			addrs = append(addrs, lb.IP)
		} else if lb.Hostname != "" {
			addrs = append(addrs, lb.Hostname)
		}
	}
	return []any{class, ingressHosts(ing.Spec.Rules), strings.Join(addrs, ","), ports, c.age(ing.CreationTimestamp)}
})

// ingressHosts lists the hosts of the first three rules ("*" when none names a host).
func ingressHosts(rules []networkingv1.IngressRule) string {
	const max = 3
	var list []string
	for i, r := range rules {
		if i == max {
			break
		}
		if r.Host != "" {
			list = append(list, r.Host)
		}
	}
	if len(list) == 0 {
		return "*"
	}
	if len(rules) > max {
		return fmt.Sprintf("%s + %d more...", strings.Join(list, ","), len(rules)-max)
	}
	return strings.Join(list, ",")
}

var ingressClassPrinter = named([]metav1.TableColumnDefinition{
	col("Controller", "string", "Controller that is responsible for handling this class"),
	col("Parameters", "string", "A reference to a resource with additional parameters"),
	ageColumn,
}, func(ic *networkingv1.IngressClass, c clock) []any {
	params := none
	if p := ic.Spec.Parameters; p != nil {
		params = p.Kind
		if p.APIGroup != nil {
			params += "." + *p.APIGroup
		}
		params += "/" + p.Name
	}
	return []any{ic.Spec.Controller, params, c.age(ic.CreationTimestamp)}
})

var networkPolicyPrinter = named([]metav1.TableColumnDefinition{
	col("Pod-Selector", "string", "Selects the pods to which this NetworkPolicy object applies."),
	ageColumn,
}, func(np *networkingv1.NetworkPolicy, c clock) []any {
	return []any{metav1.FormatLabelSelector(&np.Spec.PodSelector), c.age(np.CreationTimestamp)}
})

var leasePrinter = named([]metav1.TableColumnDefinition{
	col("Holder", "string", "holderIdentity contains the identity of the holder of a current lease."),
	ageColumn,
}, func(l *coordinationv1.Lease, c clock) []any {
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	return []any{holder, c.age(l.CreationTimestamp)}
})

var pdbPrinter = named([]metav1.TableColumnDefinition{
	col("Min Available", "string", "The minimum number of pods that must be available."),
	col("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
	col("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time."),
	ageColumn,
}, func(pdb *policyv1.PodDisruptionBudget, c clock) []any {
	minAvailable, maxUnavailable := "N/A", "N/A"
	if pdb.Spec.MinAvailable != nil {
		minAvailable = pdb.Spec.MinAvailable.String()
	}
	if pdb.Spec.MaxUnavailable != nil {
		maxUnavailable = pdb.Spec.MaxUnavailable.String()
	}
	return []any{minAvailable, maxUnavailable, int64(pdb.Status.DisruptionsAllowed), c.age(pdb.CreationTimestamp)}
})

var vapPrinter = named([]metav1.TableColumnDefinition{
	col("Validations", "integer", "Validations indicate the number of validation rules defined in this configuration"),
	col("ParamKind", "string", "ParamKind specifies the kind of resources used to parameterize this policy"),
	ageColumn,
}, func(p *admissionregistrationv1.ValidatingAdmissionPolicy, c clock) []any {
	paramKind := "<unset>"
	if pk := p.Spec.ParamKind; pk != nil {
		paramKind = pk.APIVersion + "/" + pk.Kind
	}
	return []any{int64(len(p.Spec.Validations)), paramKind, c.age(p.CreationTimestamp)}
})

var vapBindingPrinter = named([]metav1.TableColumnDefinition{
	col("PolicyName", "string", "PolicyName indicates the policy definition which the policy binding binded to"),
	col("ParamRef", "string", "ParamRef indicates the param resource which sets the configration param"),
	ageColumn,
}, func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, c clock) []any {
	param := "<unset>"
	if pr := b.Spec.ParamRef; pr != nil {
		switch {
		case pr.Name != "" && pr.Namespace != "":
			param = pr.Namespace + "/" + pr.Name
		case pr.Name != "":
			// Whether the param kind is namespaced is not known here.
			param = "*/" + pr.Name
		case pr.Selector != nil:
			param = metav1.FormatLabelSelector(pr.Selector)
		}
	}
	return []any{b.Spec.PolicyName, param, c.age(b.CreationTimestamp)}
})

// isDefaultStorageClassAnnotation marks the class a claim without storageClassName gets; the
// beta spelling is still honoured upstream.
const (
	isDefaultStorageClassAnnotation     = "storageclass.kubernetes.io/is-default-class"
	betaIsDefaultStorageClassAnnotation = "storageclass.beta.kubernetes.io/is-default-class"
)

// storageClassPrinter prints NAME with kubectl's " (default)" suffix for the default class, so it
// cannot use named.
var storageClassPrinter = printer{
	columns: []metav1.TableColumnDefinition{
		nameColumn,
		col("Provisioner", "string", "Indicates the type of the provisioner."),
		col("ReclaimPolicy", "string", "Indicates the type of the reclaim policy."),
		col("VolumeBindingMode", "string", "Indicates the mode of the volume binding."),
		col("AllowVolumeExpansion", "string", "Indicates the flag of allowing volume expansion."),
		ageColumn,
	},
	row: func(obj runtime.Object, c clock) (metav1.TableRow, error) {
		sc, ok := obj.(*storagev1.StorageClass)
		if !ok {
			return metav1.TableRow{}, fmt.Errorf("table printer: unexpected object %T", obj)
		}
		name := sc.Name
		if sc.Annotations[isDefaultStorageClassAnnotation] == "true" || sc.Annotations[betaIsDefaultStorageClassAnnotation] == "true" {
			name += " (default)"
		}
		reclaim := string(corev1.PersistentVolumeReclaimDelete)
		if sc.ReclaimPolicy != nil {
			reclaim = string(*sc.ReclaimPolicy)
		}
		mode := string(storagev1.VolumeBindingImmediate)
		if sc.VolumeBindingMode != nil {
			mode = string(*sc.VolumeBindingMode)
		}
		expansion := false
		if sc.AllowVolumeExpansion != nil {
			expansion = *sc.AllowVolumeExpansion
		}
		return metav1.TableRow{Cells: []any{name, sc.Provisioner, reclaim, mode, expansion, c.age(sc.CreationTimestamp)}}, nil
	},
}
