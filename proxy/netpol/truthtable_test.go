package netpol

import (
	"context"
	"fmt"
	osexec "os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// The upstream network-policy truth table: namespaces x, y, z with pods a, b, c each, spread
// over two hosts, every pair probed on ports 80 and 81 over TCP and UDP (81 probes per
// matrix). Each scenario writes the matrix it expects; a mismatch prints both.

var (
	tcp = corev1.ProtocolTCP
	udp = corev1.ProtocolUDP
)

type probeKind struct {
	port  int
	proto string
}

var probeKinds = []probeKind{{80, "tcp"}, {81, "tcp"}, {80, "udp"}, {81, "udp"}}

func (k probeKind) String() string { return fmt.Sprintf("%d/%s", k.port, k.proto) }

// expectation builds a scenario's expected matrix for one probe kind.
type expectation struct {
	m    matrix
	kind probeKind
}

// denyTo closes every pod but itself off from the given pods.
func (e expectation) denyTo(to ...string) expectation {
	for from := range e.m {
		for _, k := range to {
			if from != k {
				e.m[from][k] = false
			}
		}
	}
	return e
}

// denyFrom closes the given pods off from every pod but themselves.
func (e expectation) denyFrom(from ...string) expectation {
	for _, f := range from {
		for to := range e.m[f] {
			if to != f {
				e.m[f][to] = false
			}
		}
	}
	return e
}

// allow opens from -> to (pods given as keys; a key ending in "/*" is a namespace's pods).
func (e expectation) allow(from, to string) expectation {
	for f := range e.m {
		for t := range e.m[f] {
			if match(from, f) && match(to, t) {
				e.m[f][t] = true
			}
		}
	}
	return e
}

func match(pattern, key string) bool {
	if ns, ok := strings.CutSuffix(pattern, "/*"); ok {
		return strings.HasPrefix(key, ns+"/")
	}
	return pattern == "*" || pattern == key
}

type scenario struct {
	name     string
	policies []*networkingv1.NetworkPolicy
	// change, when set, runs once the policies are enforced (and expectBefore holds); its
	// undo is run when the scenario ends.
	change       func(ctx context.Context, c kubernetes.Interface) (undo func())
	expectBefore func(e expectation) expectation
	expect       func(e expectation) expectation
}

func policy(ns, name string, podSel map[string]string, types ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: podSel}, PolicyTypes: types}}
}

func withIngress(np *networkingv1.NetworkPolicy, rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	np.Spec.Ingress = append(np.Spec.Ingress, rules...)
	return np
}

func withEgress(np *networkingv1.NetworkPolicy, rules ...networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	np.Spec.Egress = append(np.Spec.Egress, rules...)
	return np
}

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func port(proto corev1.Protocol, p intstr.IntOrString, end ...int32) networkingv1.NetworkPolicyPort {
	np := networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &p}
	if len(end) > 0 {
		np.EndPort = &end[0]
	}
	return np
}

const (
	in  = networkingv1.PolicyTypeIngress
	out = networkingv1.PolicyTypeEgress
)

func relabel(ctx context.Context, c kubernetes.Interface, kind, ns, name, key, value, old string) func() {
	patch := func(v string) {
		body := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, v)
		var err error
		if kind == "namespace" {
			_, err = c.CoreV1().Namespaces().Patch(ctx, name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{})
		} else {
			_, err = c.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{})
		}
		if err != nil {
			panic(err)
		}
	}
	patch(value)
	return func() { patch(old) }
}

func scenarios(s *site) []scenario {
	ip := func(key string) string {
		for _, p := range s.pods {
			if p.key() == key {
				return p.ip
			}
		}
		panic(key)
	}
	onlyKind := func(e expectation, kinds ...string) bool { return slices.Contains(kinds, e.kind.String()) }
	return []scenario{
		{name: "default deny ingress", policies: []*networkingv1.NetworkPolicy{policy("x", "deny", nil, in)},
			expect: func(e expectation) expectation { return e.denyTo("x/a", "x/b", "x/c") }},
		{name: "default deny egress", policies: []*networkingv1.NetworkPolicy{policy("x", "deny", nil, out)},
			expect: func(e expectation) expectation { return e.denyFrom("x/a", "x/b", "x/c") }},
		{name: "deny all ingress and egress", policies: []*networkingv1.NetworkPolicy{policy("x", "deny", nil, in, out)},
			expect: func(e expectation) expectation { return e.denyTo("x/a", "x/b", "x/c").denyFrom("x/a", "x/b", "x/c") }},
		{name: "allow all ingress beside a default deny", policies: []*networkingv1.NetworkPolicy{
			policy("x", "deny", nil, in), withIngress(policy("x", "allow-all", nil, in), networkingv1.NetworkPolicyIngressRule{})},
			expect: func(e expectation) expectation { return e }},
		{name: "allow from namespace", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "from-y", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}}})},
			expect: func(e expectation) expectation { return e.denyTo("x/a").allow("y/*", "x/a") }},
		{name: "allow from pod in the same namespace", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "from-b", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b")}}})},
			expect: func(e expectation) expectation { return e.denyTo("x/a").allow("x/b", "x/a") }},
		{name: "allow from pod in another namespace (namespaceSelector and podSelector)", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "from-y-c", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y"), PodSelector: sel("pod", "c")}}})},
			expect: func(e expectation) expectation { return e.denyTo("x/a").allow("y/c", "x/a") }},
		{name: "allow from namespace or pod (two peers)", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "from-y-or-b", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}, {PodSelector: sel("pod", "b")}}})},
			expect: func(e expectation) expectation { return e.denyTo("x/a").allow("y/*", "x/a").allow("x/b", "x/a") }},
		{name: "allow from namespaces by matchExpressions NotIn", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "not-y", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "ns", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"y"}}}}}}})},
			expect: func(e expectation) expectation { return e.denyTo("x/a").allow("x/*", "x/a").allow("z/*", "x/a") }},
		{name: "allow ingress on port 80/TCP only", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "port-80", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{port(tcp, intstr.FromInt32(80))}})},
			expect: func(e expectation) expectation {
				if onlyKind(e, "80/tcp") {
					return e
				}
				return e.denyTo("x/a")
			}},
		{name: "named port", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "named", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{port(udp, intstr.FromString("serve-81-udp"))}})},
			expect: func(e expectation) expectation {
				if onlyKind(e, "81/udp") {
					return e
				}
				return e.denyTo("x/a")
			}},
		{name: "endPort", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "range", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{
					port(tcp, intstr.FromInt32(75), 80), port(udp, intstr.FromInt32(81), 90)}})},
			expect: func(e expectation) expectation {
				if onlyKind(e, "80/tcp", "81/udp") {
					return e
				}
				return e.denyTo("x/a")
			}},
		{name: "ipBlock with except", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "cidr", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
					CIDR: "10.244.0.0/16", Except: []string{ip("y/b") + "/32"}}}}})},
			expect: func(e expectation) expectation {
				e.m["y/b"]["x/a"] = false
				return e
			}},
		{name: "egress to DNS only", policies: []*networkingv1.NetworkPolicy{
			withEgress(policy("x", "dns", map[string]string{"pod": "a"}, out),
				networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{port(udp, intstr.FromInt32(53)), port(tcp, intstr.FromInt32(53))}})},
			expect: func(e expectation) expectation { return e.denyFrom("x/a") }},
		{name: "egress to a pod in another namespace", policies: []*networkingv1.NetworkPolicy{
			withEgress(policy("x", "to-y-a", map[string]string{"pod": "a"}, out),
				networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y"), PodSelector: sel("pod", "a")}}})},
			expect: func(e expectation) expectation { return e.denyFrom("x/a").allow("x/a", "y/a") }},
		{name: "egress to ipBlock with except", policies: []*networkingv1.NetworkPolicy{
			withEgress(policy("x", "to-host-2", map[string]string{"pod": "a"}, out),
				networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
					CIDR: "10.244.2.0/24", Except: []string{ip("x/b") + "/32"}}}}})},
			expect: func(e expectation) expectation {
				e = e.denyFrom("x/a")
				for _, p := range s.pods {
					if p.host == 1 && p.key() != "x/b" {
						e.m["x/a"][p.key()] = true
					}
				}
				return e
			}},
		{name: "egress to a named port of the destination", policies: []*networkingv1.NetworkPolicy{
			withEgress(policy("x", "to-80", map[string]string{"pod": "a"}, out),
				networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{port(tcp, intstr.FromString("serve-80-tcp"))}})},
			expect: func(e expectation) expectation {
				if onlyKind(e, "80/tcp") {
					return e
				}
				return e.denyFrom("x/a")
			}},
		{name: "multiple policies union", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "from-b", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b")}}}),
			withIngress(policy("x", "from-z", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "z")}}})},
			expect: func(e expectation) expectation { return e.denyTo("x/a").allow("x/b", "x/a").allow("z/*", "x/a") }},
		{name: "ingress and egress in one policy", policies: []*networkingv1.NetworkPolicy{
			withEgress(withIngress(policy("x", "both", map[string]string{"pod": "a"}, in, out),
				networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}}}),
				networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "z")}}})},
			expect: func(e expectation) expectation {
				return e.denyTo("x/a").denyFrom("x/a").allow("y/*", "x/a").allow("x/a", "z/*")
			}},
		{name: "peer pod that changes labels", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "from-any-b", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(), PodSelector: sel("pod", "b")}}})},
			expectBefore: func(e expectation) expectation {
				return e.denyTo("x/a").allow("x/b", "x/a").allow("y/b", "x/a").allow("z/b", "x/a")
			},
			change: func(ctx context.Context, c kubernetes.Interface) func() {
				return relabel(ctx, c, "pod", "z", "c", "pod", "b", "c")
			},
			expect: func(e expectation) expectation {
				return e.denyTo("x/a").allow("x/b", "x/a").allow("y/b", "x/a").allow("z/b", "x/a").allow("z/c", "x/a")
			}},
		{name: "policy on a pod that changes labels", policies: []*networkingv1.NetworkPolicy{policy("x", "deny-a", map[string]string{"pod": "a"}, in)},
			expectBefore: func(e expectation) expectation { return e.denyTo("x/a") },
			change: func(ctx context.Context, c kubernetes.Interface) func() {
				return relabel(ctx, c, "pod", "x", "b", "pod", "a", "b")
			},
			expect: func(e expectation) expectation { return e.denyTo("x/a", "x/b") }},
		{name: "namespace that changes labels", policies: []*networkingv1.NetworkPolicy{
			withIngress(policy("x", "from-team", map[string]string{"pod": "a"}, in),
				networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "blue")}}})},
			expectBefore: func(e expectation) expectation { return e.denyTo("x/a") },
			change: func(ctx context.Context, c kubernetes.Interface) func() {
				return relabel(ctx, c, "namespace", "", "z", "team", "blue", "none")
			},
			expect: func(e expectation) expectation { return e.denyTo("x/a").allow("z/*", "x/a") }},
	}
}

func TestTruthTable(t *testing.T) {
	s := newSite(t)
	for i, ns := range []string{"x", "y", "z"} {
		for j, name := range []string{"a", "b", "c"} {
			s.addPod(ns, name, (i*3+j)%2)
		}
	}
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	client := a.Client()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s.registerPods(ctx, client)
	s.startController(ctx, client, 0)
	s.startController(ctx, client, 1)

	all := func(k probeKind) matrix { return s.newMatrix(true) }
	// waitFor probes until every kind shows its expected matrix, or fails with both.
	waitFor := func(t *testing.T, what string, want func(k probeKind) matrix) time.Duration {
		t.Helper()
		start := time.Now()
		for _, k := range probeKinds {
			exp := want(k)
			var got matrix
			for deadline := time.Now().Add(20 * time.Second); ; {
				got = s.probeAll(k.port, k.proto)
				if got.equal(exp) {
					break
				}
				if time.Now().After(deadline) {
					tables := ""
					for _, h := range s.hosts {
						out, _ := osexec.Command("ip", "netns", "exec", h, "nft", "list", "table", "ip", DefaultTable).CombinedOutput()
						tables += "\ntable of " + h + ":\n" + string(out)
					}
					t.Fatalf("%s, port %s: probed matrix differs from the expected one (X = reached)\nexpected:\n%s\nprobed:\n%s%s",
						what, k, s.format(exp), s.format(got), tables)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		return time.Since(start)
	}
	waitFor(t, "no policy", all)

	for _, sc := range scenarios(s) {
		t.Run(sc.name, func(t *testing.T) {
			var created []*networkingv1.NetworkPolicy
			var undo func()
			defer func() {
				if undo != nil {
					undo()
				}
				for _, np := range created {
					_ = client.NetworkingV1().NetworkPolicies(np.Namespace).Delete(ctx, np.Name, metav1.DeleteOptions{})
				}
				waitFor(t, "policies deleted", all)
			}()
			for _, np := range sc.policies {
				c, err := client.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("create NetworkPolicy %s/%s: %v", np.Namespace, np.Name, err)
				}
				created = append(created, c)
			}
			expect := func(f func(expectation) expectation) func(k probeKind) matrix {
				return func(k probeKind) matrix { return f(expectation{m: s.newMatrix(true), kind: k}).m }
			}
			if sc.change != nil {
				waitFor(t, "before the change", expect(sc.expectBefore))
				start := time.Now()
				undo = sc.change(ctx, client)
				// The first kind's matrix shows when the rules followed the change.
				first := probeKinds[0]
				want := expect(sc.expect)(first)
				for !s.probeAll(first.port, first.proto).equal(want) && time.Since(start) < 20*time.Second {
				}
				framework.Figure(t, "%s: rules followed the change in %v", sc.name, time.Since(start).Round(10*time.Millisecond))
			}
			waitFor(t, "policies applied", expect(sc.expect))
		})
	}

	// What the site's hosts send a pod is never refused: probes from its own host, and the
	// Ingress proxy or NodePorts of the others.
	t.Run("hosts reach pods isolated by a default deny", func(t *testing.T) {
		np, err := client.NetworkingV1().NetworkPolicies("x").Create(ctx, policy("x", "deny", nil, in), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = client.NetworkingV1().NetworkPolicies("x").Delete(ctx, np.Name, metav1.DeleteOptions{})
			waitFor(t, "policies deleted", all)
		}()
		waitFor(t, "default deny in x", func(k probeKind) matrix {
			return expectation{m: s.newMatrix(true), kind: k}.denyTo("x/a", "x/b", "x/c").m
		})
		for _, p := range s.pods {
			if p.ns != "x" {
				continue
			}
			for i, h := range s.hosts {
				for _, k := range probeKinds {
					if !probeFrom(h, fmt.Sprintf("%s:%d", p.ip, k.port), k.proto) {
						t.Errorf("host %d (%s) cannot reach %s (on host %d) on %s under a default deny", i+1, h, p.key(), p.host+1, k)
					}
				}
			}
		}
	})
}
