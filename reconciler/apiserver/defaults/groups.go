package defaults

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func setEndpointSlice(s *discoveryv1.EndpointSlice) {
	for i := range s.Ports {
		p := &s.Ports[i]
		if p.Name == nil {
			p.Name = new("")
		}
		if p.Protocol == nil {
			p.Protocol = new(corev1.ProtocolTCP)
		}
	}
}

func setIngressClass(c *networkingv1.IngressClass) {
	if p := c.Spec.Parameters; p != nil && p.Scope == nil {
		p.Scope = new(networkingv1.IngressClassParametersReferenceScopeCluster)
	}
}

// setNetworkPolicy makes the implied policy types explicit: every policy isolates ingress, and
// one with egress rules isolates egress too.
func setNetworkPolicy(np *networkingv1.NetworkPolicy) {
	for i := range np.Spec.Ingress {
		setNetworkPolicyPorts(np.Spec.Ingress[i].Ports)
	}
	for i := range np.Spec.Egress {
		setNetworkPolicyPorts(np.Spec.Egress[i].Ports)
	}
	if len(np.Spec.PolicyTypes) == 0 {
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(np.Spec.Egress) != 0 {
			np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
}

func setNetworkPolicyPorts(ps []networkingv1.NetworkPolicyPort) {
	for i := range ps {
		if ps[i].Protocol == nil {
			ps[i].Protocol = new(corev1.ProtocolTCP)
		}
	}
}

func setValidatingAdmissionPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
	if p.Spec.FailurePolicy == nil {
		p.Spec.FailurePolicy = new(admissionregistrationv1.Fail)
	}
	setMatchResources(p.Spec.MatchConstraints)
}

func setValidatingAdmissionPolicyBinding(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	setMatchResources(b.Spec.MatchResources)
}

// setMutatingAdmissionPolicy fills failurePolicy Fail, as upstream does, and reinvocationPolicy
// Never (what the plugin does when it is unset), and the match constraints' defaults: the
// plugin refuses to match with a nil selector.
func setMutatingAdmissionPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) {
	if p.Spec.FailurePolicy == nil {
		p.Spec.FailurePolicy = new(admissionregistrationv1.Fail)
	}
	if p.Spec.ReinvocationPolicy == "" {
		p.Spec.ReinvocationPolicy = admissionregistrationv1.NeverReinvocationPolicy
	}
	setMatchResources(p.Spec.MatchConstraints)
}

func setMutatingAdmissionPolicyBinding(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	setMatchResources(b.Spec.MatchResources)
}

func setMatchResources(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		m.MatchPolicy = new(admissionregistrationv1.Equivalent)
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				rules[i].Scope = new(admissionregistrationv1.AllScopes)
			}
		}
	}
}

// setStorageClass fills reclaimPolicy Delete and volumeBindingMode Immediate, as upstream does.
func setStorageClass(sc *storagev1.StorageClass) {
	if sc.ReclaimPolicy == nil {
		sc.ReclaimPolicy = new(corev1.PersistentVolumeReclaimDelete)
	}
	if sc.VolumeBindingMode == nil {
		sc.VolumeBindingMode = new(storagev1.VolumeBindingImmediate)
	}
}
