//go:build ipvsvm

// Like ipvs_vm_test.go, this needs a kernel with ip_vs: test/ipvsvm runs it inside a small
// virtual machine.

package services

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/proxy/netpol"
)

// TestIPVSNetworkPolicy proves that a NetworkPolicy (proxy/netpol) is enforced on traffic the
// IPVS backend resolves: IPVS sends a ClusterIP connection to its real server through the
// local-out hook, with the client pod's address as source and the server pod's as
// destination, and the policy must judge it there as it judges the same connection made to the
// pod's address directly (forward hook).
//
//	pod-a 10.244.1.2 --vha--+            (client A: allowed)
//	pod-b 10.244.1.3 --vhb--+ host       (client B: not allowed)
//	srv   10.244.1.4 --vhs--+  ClusterIP 10.96.0.60:80 -> srv:8080 (IPVS)
func TestIPVSNetworkPolicy(t *testing.T) {
	const (
		srvIP = "10.244.1.4"
		vip   = "10.96.0.60"
		node  = "n1"
	)
	tp := setupTopo(t)
	// The server pod, cabled like pod-a and pod-b.
	srv := tp.host + "p"
	newNetns(t, srv)
	h := tp.host
	sh(t, "ip", "-n", h, "link", "add", "vhs", "type", "veth", "peer", "name", "eth0", "netns", srv)
	sh(t, "ip", "-n", h, "addr", "add", "10.244.1.1/32", "dev", "vhs")
	sh(t, "ip", "-n", h, "link", "set", "vhs", "up")
	sh(t, "ip", "-n", h, "route", "add", srvIP+"/32", "dev", "vhs")
	sh(t, "ip", "-n", srv, "addr", "add", srvIP+"/32", "dev", "eth0")
	sh(t, "ip", "-n", srv, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", srv, "route", "add", "10.244.1.1/32", "dev", "eth0")
	sh(t, "ip", "-n", srv, "route", "add", "default", "via", "10.244.1.1", "dev", "eth0")
	serve(t, srv, srvIP+":8080", "srv")

	// The Service, in IPVS mode, programmed in the host namespace.
	log := logrus.New()
	log.SetFormatter(&logrus.TextFormatter{DisableColors: true})
	be := NewIPVS(IPVSOptions{NetNS: "/run/netns/" + h, Log: logrus.NewEntry(log)})
	t.Cleanup(func() { _ = be.Cleanup() })
	if err := be.Apply(Compile([]*v1.Service{mkSvc("web", vip, 80)},
		[]*discoveryv1.EndpointSlice{mkSlice("web-1", "web", 8080, readyEP(srvIP, node))}, mkNode(node, hostIP))); err != nil {
		t.Fatalf("apply the Service: %v", err)
	}

	// The policy table, in the host namespace too.
	pt := netpol.NewTable(netpol.Options{NetNSFd: tp.hostFd, Log: logrus.NewEntry(log)})
	t.Cleanup(func() { _ = pt.Cleanup() })
	dump := func() string {
		out := ipvsDump(t, h)
		if nft, err := execOut("nsenter", "--net=/run/netns/"+h, "nft", "list", "table", "ip", netpol.DefaultTable); err == nil {
			out += "\nnetwork policy table:\n" + nft
		} else {
			out += "\nno network policy table: " + strings.TrimSpace(nft)
		}
		return out
	}
	pod := func(name, ip string) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": name}},
			Spec:       v1.PodSpec{NodeName: node},
			Status:     v1.PodStatus{Phase: v1.PodRunning, PodIP: ip, PodIPs: []v1.PodIP{{IP: ip}}},
		}
	}
	in := netpol.Input{
		NodeName:   node,
		Pods:       []*v1.Pod{pod("client-a", podAIP), pod("client-b", podBIP), pod("server", srvIP)},
		Namespaces: []*v1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{"kubernetes.io/metadata.name": "default"}}}},
	}
	allowA := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "server-from-a"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client-a"}}}},
				// The pod's port: only a packet seen after the Service resolved can match it.
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(8080))}},
			}},
		},
	}
	apply := func(policies ...*networkingv1.NetworkPolicy) *netpol.Ruleset {
		t.Helper()
		in.Policies = policies
		rs, errs := netpol.Compile(in)
		if len(errs) > 0 {
			t.Fatalf("compile: %v", errs)
		}
		if err := pt.Apply(rs); err != nil {
			t.Fatalf("apply the policy table: %v", err)
		}
		return rs
	}

	// Positive signals may take a moment (neighbour resolution on a fresh veth): retry them
	// within a bound. Negative ones are probed once per attempt, right after the
	// synchronous Apply, and must fail every time.
	reaches := func(t *testing.T, from, clientIP, addr string) {
		t.Helper()
		want := "srv " + clientIP
		var got string
		var err error
		deadline := time.Now().Add(10 * time.Second)
		for {
			if got, err = dial(t, from, addr, time.Second); err == nil && got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s -> %s: got %q, %v; want %q\n%s", clientIP, addr, got, err, want, dump())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	blocked := func(t *testing.T, from, clientIP, addr string) {
		t.Helper()
		for i := 0; i < 3; i++ {
			start := time.Now()
			got, err := dial(t, from, addr, time.Second)
			if err == nil {
				t.Fatalf("%s -> %s (attempt %d): answered %q, want no connection\n%s", clientIP, addr, i+1, got, dump())
			}
			t.Logf("%s -> %s refused as it should be (after %s): %v", clientIP, addr, time.Since(start).Round(time.Millisecond), err)
		}
	}
	clusterIP := vip + ":80"
	podAddr := srvIP + ":8080"

	// Before any policy both clients reach the server, by its ClusterIP and by its address,
	// with their own source addresses (pod to ClusterIP is not masqueraded).
	apply()
	for _, c := range []struct{ ns, ip string }{{tp.podA, podAIP}, {tp.podB, podBIP}} {
		reaches(t, c.ns, c.ip, clusterIP)
		reaches(t, c.ns, c.ip, podAddr)
	}

	// Only client A may reach the server now: through the Service as well as directly.
	rs := apply(allowA)
	if len(rs.Ingress) != 1 || rs.Ingress[netip.MustParseAddr(srvIP)] == "" {
		t.Fatalf("the server pod is not isolated for ingress: %v", rs.Ingress)
	}
	blocked(t, tp.podB, podBIP, clusterIP)
	blocked(t, tp.podB, podBIP, podAddr)
	reaches(t, tp.podA, podAIP, clusterIP)
	reaches(t, tp.podA, podAIP, podAddr)

	// Removing the policy opens the server again (so B was refused by it, nothing else).
	apply()
	reaches(t, tp.podB, podBIP, clusterIP)
	reaches(t, tp.podB, podBIP, podAddr)
	if testing.Verbose() {
		t.Logf("final state:\n%s", dump())
	}
}
