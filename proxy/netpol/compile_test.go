package netpol

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func testPodObj(ns, name, node, ip string, labels map[string]string, ports ...corev1.ContainerPort) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: ports}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}
}

func rangesOf(t *testing.T, rs *Ruleset, set string) []string {
	t.Helper()
	spec, ok := rs.Sets[set]
	if !ok || !spec.Interval {
		t.Fatalf("no interval set %q in %v", set, rs.Sets)
	}
	var out []string
	for _, r := range spec.Ranges {
		out = append(out, r.First.String()+"-"+r.Last.String())
	}
	return out
}

func TestBlockRangesExcept(t *testing.T) {
	rr, ok, err := blockRanges(&networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16", "10.0.0.0/24", "192.168.0.0/16"}})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	var got []string
	for _, r := range mergeRanges(rr) {
		got = append(got, r.First.String()+"-"+r.Last.String())
	}
	want := []string{"10.0.1.0-10.0.255.255", "10.2.0.0-10.255.255.255"}
	if !slices.Equal(got, want) {
		t.Errorf("10.0.0.0/8 except 10.1.0.0/16, 10.0.0.0/24: %v, want %v", got, want)
	}
	if _, ok, _ := blockRanges(&networkingv1.IPBlock{CIDR: "fd00::/8"}); ok {
		t.Error("an IPv6 block must match no IPv4 packet")
	}
	if _, _, err := blockRanges(&networkingv1.IPBlock{CIDR: "bad"}); err == nil {
		t.Error("a bad CIDR must be an error")
	}
	// Adjacent and overlapping ranges become one, as an interval set needs.
	m := mergeRanges([]Range{{netip.MustParseAddr("10.0.0.4"), netip.MustParseAddr("10.0.0.7")},
		{netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.0.0.3")}, {netip.MustParseAddr("10.0.0.6"), netip.MustParseAddr("10.0.0.9")}})
	if len(m) != 1 || m[0].First.String() != "10.0.0.0" || m[0].Last.String() != "10.0.0.9" {
		t.Errorf("merge: %v", m)
	}
}

func TestCompile(t *testing.T) {
	tcp := corev1.ProtocolTCP
	named := intstr.FromString("http")
	nss := []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "a"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"team": "b"}}}}
	hostNet := testPodObj("a", "hostnet", "h1", "192.168.1.1", map[string]string{"app": "web"})
	hostNet.Spec.HostNetwork = true
	done := testPodObj("a", "done", "h1", "10.0.0.9", map[string]string{"app": "web"})
	done.Status.Phase = corev1.PodSucceeded
	pods := []*corev1.Pod{
		testPodObj("a", "web-1", "h1", "10.0.0.1", map[string]string{"app": "web"}, corev1.ContainerPort{Name: "http", ContainerPort: 8080}),
		testPodObj("a", "web-2", "h2", "10.0.1.1", map[string]string{"app": "web"}, corev1.ContainerPort{Name: "http", ContainerPort: 8081}),
		testPodObj("a", "db", "h2", "10.0.1.2", map[string]string{"app": "db"}),
		testPodObj("b", "client", "h2", "10.0.1.3", map[string]string{"app": "client"}),
		testPodObj("b", "pending", "h2", "", map[string]string{"app": "client"}),
		hostNet, done,
	}
	nps := []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web"}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &named}},
			}},
		}},
		// Selects only a pod of h2: no chain on h1.
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "db"}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "bad"}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}},
		}},
	}
	nodes := []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "h1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "192.168.1.1"}, {Type: corev1.NodeHostName, Address: "h1"}, {Type: corev1.NodeInternalIP, Address: "fd00::1"}}}}}
	rs, errs := Compile(Input{NodeName: "h1", Nodes: nodes, Pods: pods, Namespaces: nss, Policies: nps})
	if len(rs.Hosts) != 1 || !rs.Hosts[netip.MustParseAddr("192.168.1.1")] {
		t.Errorf("hosts %v, want the IPv4 InternalIP of h1", rs.Hosts)
	}
	if len(errs) != 1 {
		t.Errorf("errors: %v, want one for NetworkPolicy a/bad", errs)
	}
	if len(rs.Egress) != 0 {
		t.Errorf("egress chains: %v; web has no policyTypes and no egress rules, so it isolates for ingress only", rs.Egress)
	}
	podChain := rs.Ingress[netip.MustParseAddr("10.0.0.1")]
	if podChain != "pod-in-a/web-1" || len(rs.Ingress) != 1 {
		t.Fatalf("ingress map %v, want only 10.0.0.1 -> pod-in-a/web-1", rs.Ingress)
	}
	var rules []string
	for _, r := range rs.Chains[podChain].Rules {
		rules = append(rules, r.String(Ingress))
	}
	if want := []string{"jump pol-in-a/web", "drop"}; !slices.Equal(rules, want) {
		t.Errorf("pod chain: %v, want %v", rules, want)
	}
	pol := rs.Chains["pol-in-a/web"].Rules
	// The named port resolves on the selected pods: only web-1 (8080) is local, but web-2
	// (8081) is selected too and gets its own rule.
	got := []string{}
	for _, r := range pol {
		got = append(got, r.String(Ingress))
	}
	want := []string{"ip saddr @pol-in-a/web#0-pods ip daddr @pol-in-a/web#0-port-http-8080 meta l4proto 6 th dport 8080 accept",
		"ip saddr @pol-in-a/web#0-pods ip daddr @pol-in-a/web#0-port-http-8081 meta l4proto 6 th dport 8081 accept"}
	if !slices.Equal(got, want) {
		t.Errorf("policy rules %v, want %v", got, want)
	}
	if peers := rs.Addrs["pol-in-a/web#0-pods"]; len(peers) != 1 || !peers[netip.MustParseAddr("10.0.1.3")] {
		t.Errorf("peers %v, want only b/client (pending, host-network and finished pods have no address here)", peers)
	}
	if _, ok := rs.Chains["pol-in-a/db"]; ok {
		t.Error("a policy selecting no local pod must not be compiled on this host")
	}
}

func TestCompileSelectedOnBothHostsNamedPorts(t *testing.T) {
	tcp := corev1.ProtocolTCP
	named := intstr.FromString("http")
	pods := []*corev1.Pod{
		testPodObj("a", "web-1", "h1", "10.0.0.1", map[string]string{"app": "web"}, corev1.ContainerPort{Name: "http", ContainerPort: 8080}),
		testPodObj("a", "web-2", "h1", "10.0.0.2", map[string]string{"app": "web"}, corev1.ContainerPort{Name: "http", ContainerPort: 8081}),
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web"}, Spec: networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &named}},
			From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.9.0.0/16"}}}}}},
	}}
	rs, errs := Compile(Input{NodeName: "h1", Pods: pods, Policies: []*networkingv1.NetworkPolicy{np}})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	var got []string
	for _, r := range rs.Chains["pol-in-a/web"].Rules {
		got = append(got, r.String(Ingress))
	}
	want := []string{
		"ip saddr @pol-in-a/web#0-cidrs ip daddr @pol-in-a/web#0-port-http-8080 meta l4proto 6 th dport 8080 accept",
		"ip saddr @pol-in-a/web#0-cidrs ip daddr @pol-in-a/web#0-port-http-8081 meta l4proto 6 th dport 8081 accept",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rules:\n%v\nwant\n%v", got, want)
	}
	if r := rangesOf(t, rs, "pol-in-a/web#0-cidrs"); !slices.Equal(r, []string{"10.0.0.0-10.8.255.255", "10.10.0.0-10.255.255.255"}) {
		t.Errorf("cidr set %v", r)
	}
	if a := rs.Addrs["pol-in-a/web#0-port-http-8081"]; len(a) != 1 || !a[netip.MustParseAddr("10.0.0.2")] {
		t.Errorf("named port 8081 set %v, want web-2", a)
	}
}
