package netpol

import (
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// benchInput is a site of 3 hosts with 50 namespaces of 100 pods (5,000, a third on the
// host compiled for) and 20 policies per namespace (1,000): a default deny, ten ingress
// policies by app from other apps and from a labelled namespace, five egress policies, two
// on named ports and two with ipBlocks.
func benchInput() Input {
	in := Input{NodeName: "host-0"}
	for n := range 50 {
		ns := fmt.Sprintf("ns-%02d", n)
		in.Namespaces = append(in.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"team": fmt.Sprintf("team-%d", n%5)}}})
		for i := range 100 {
			id := n*100 + i
			in.Pods = append(in.Pods, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pod-%d", i), Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%10)}},
				Spec: corev1.PodSpec{NodeName: fmt.Sprintf("host-%d", id%3), Containers: []corev1.Container{{Name: "c",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}}}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.%d.%d.%d", 244+id/65536, (id/256)%256, id%256)},
			})
		}
		add := func(name string, spec networkingv1.NetworkPolicySpec) {
			in.Policies = append(in.Policies, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec})
		}
		add("default-deny", networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{in2, out2}})
		tcp := corev1.ProtocolTCP
		for k := range 10 {
			p8080 := intstr.FromInt32(8080)
			add(fmt.Sprintf("app-%d", k), networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", k)}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{
						{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", (k+1)%10)}}},
						{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "team-0"}},
							PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app-0"}}},
					},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p8080}},
				}}})
		}
		for k := range 5 {
			add(fmt.Sprintf("egress-%d", k), networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", k)}},
				PolicyTypes: []networkingv1.PolicyType{out2},
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
					{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("team-%d", k)}}}}}}})
		}
		for k, name := range []string{"http", "metrics"} {
			port := intstr.FromString(name)
			add("named-"+name, networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", 5+k)}},
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}}}})
		}
		for k := range 2 {
			add(fmt.Sprintf("cidr-%d", k), networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", 7+k)}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
					CIDR: "10.0.0.0/8", Except: []string{"10.244.0.0/16", fmt.Sprintf("10.%d.0.0/16", 100+n)}}}}}}})
		}
	}
	return in
}

const (
	in2  = networkingv1.PolicyTypeIngress
	out2 = networkingv1.PolicyTypeEgress
)

func benchTable(b *testing.B) *Table {
	requireNetAdmin(b)
	name := fmt.Sprintf("fnpbench%d", os.Getpid())
	newNetns(b, name)
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return NewTable(Options{NetNSFd: int(f.Fd())})
}

// BenchmarkFullSync compiles the 1,000 policies and 5,000 pods and writes the whole table
// (as at start or after drift), replacing the previous one.
func BenchmarkFullSync(b *testing.B) {
	in := benchInput()
	t := benchTable(b)
	var compile, apply time.Duration
	var rs *Ruleset
	for b.Loop() {
		start := time.Now()
		rs, _ = Compile(in)
		compile += time.Since(start)
		start = time.Now()
		t.applied = nil
		if err := t.Apply(rs); err != nil {
			b.Fatal(err)
		}
		apply += time.Since(start)
	}
	elems := 0
	for _, a := range rs.Addrs {
		elems += len(a)
	}
	b.ReportMetric(float64(compile.Milliseconds())/float64(b.N), "compile-ms/op")
	b.ReportMetric(float64(apply.Milliseconds())/float64(b.N), "apply-ms/op")
	b.ReportMetric(float64(len(rs.Chains)), "chains")
	b.ReportMetric(float64(elems), "set-elements")
}

// BenchmarkOnePodChange relabels one pod (it leaves the peers of 10 policies and joins
// those of 10 others) and syncs: a full compile, then only the changed elements and chains.
func BenchmarkOnePodChange(b *testing.B) {
	in := benchInput()
	t := benchTable(b)
	rs, _ := Compile(in)
	if err := t.Apply(rs); err != nil {
		b.Fatal(err)
	}
	pod := in.Pods[0] // a local pod
	var compile, apply time.Duration
	i := 0
	for b.Loop() {
		i++
		pod.Labels = map[string]string{"app": fmt.Sprintf("app-%d", i%2)}
		start := time.Now()
		rs, _ = Compile(in)
		compile += time.Since(start)
		start = time.Now()
		if err := t.Apply(rs); err != nil {
			b.Fatal(err)
		}
		apply += time.Since(start)
	}
	b.ReportMetric(float64(compile.Microseconds())/1000/float64(b.N), "compile-ms/op")
	b.ReportMetric(float64(apply.Microseconds())/1000/float64(b.N), "apply-ms/op")
}
