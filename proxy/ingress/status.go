package ingress

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// NodeIPs returns the InternalIP addresses of a Node.
func NodeIPs(n *corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out = append(out, a.Address)
		}
	}
	return out
}

// MergeStatus returns status.loadBalancer.ingress with this host's addresses present.
// Every host runs the proxy and writes the same list, so it merges rather than replaces:
// entries of other hosts stay, and IP entries that belong to no existing Node (a host that
// left) are dropped. Hostname-only entries are not ours to judge and stay. The result is
// sorted so that equal sets compare equal.
func MergeStatus(cur []networkingv1.IngressLoadBalancerIngress, mine []string, nodeIPs map[string]bool) []networkingv1.IngressLoadBalancerIngress {
	var out []networkingv1.IngressLoadBalancerIngress
	seen := map[string]bool{}
	for _, e := range cur {
		if e.IP != "" && (!nodeIPs[e.IP] || seen[e.IP]) {
			continue
		}
		seen[e.IP] = true
		out = append(out, e)
	}
	for _, ip := range mine {
		if !seen[ip] {
			seen[ip] = true
			out = append(out, networkingv1.IngressLoadBalancerIngress{IP: ip})
		}
	}
	slices.SortStableFunc(out, func(a, b networkingv1.IngressLoadBalancerIngress) int {
		return cmp.Or(cmp.Compare(a.IP, b.IP), cmp.Compare(a.Hostname, b.Hostname))
	})
	return out
}
