package network_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flotilla-dev/flotilla/nodes/network"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestRunRoutesFollowsNodes runs RunRoutes against a real API server: a route appears for a
// peer Node with a pod CIDR and an InternalIP, follows a change of its address and goes when
// the Node is deleted; this host's own Node and a Node without an address get none.
func TestRunRoutesFollowsNodes(t *testing.T) {
	requireNetAdmin(t)
	host := newHost(t, randID(t), "a")
	nl := nlAt(t, host)
	if err := nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "flt-d"}, PeerName: "flt-d-peer"}); err != nil {
		t.Fatalf("veth: %v", err)
	}
	addAddrUp(t, nl, "flt-d", "10.213.250.1/24")
	if peer, err := nl.LinkByName("flt-d-peer"); err != nil || nl.LinkSetUp(peer) != nil {
		t.Fatalf("veth peer up: %v", err)
	}
	n := startNetwork(t, host, network.Config{PodCIDR: "10.244.250.0/24", StateDir: t.TempDir()})

	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	client := a.Client()
	ctx := context.Background()
	node := func(name, cidr, ip string) *corev1.Node {
		nd := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
		if ip != "" {
			nd.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}
		}
		return nd
	}
	for _, nd := range []*corev1.Node{node("me", "10.244.250.0/24", "10.213.250.1"), node("peer-1", "10.244.251.0/24", "10.213.250.2"),
		node("no-address", "10.244.252.0/24", "")} {
		if _, err := client.CoreV1().Nodes().Create(ctx, nd, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create node %s: %v", nd.Name, err)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- network.RunRoutes(rctx, client, "me", n) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunRoutes: %v", err)
		}
	})

	// ours returns our routes other than the unreachable cluster route, as "dst via gw".
	ours := func() (map[string]string, error) {
		list, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: network.RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, r := range list {
			if r.Gw != nil {
				out[r.Dst.String()] = r.Gw.String()
			}
		}
		return out, nil
	}
	waitRoutes := func(what string, want map[string]string) {
		t.Helper()
		var got map[string]string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			var err error
			got, err = ours()
			return err == nil && fmt.Sprint(got) == fmt.Sprint(want), nil
		})
		if err != nil {
			t.Fatalf("%s: routes %v, want %v", what, got, want)
		}
	}
	waitRoutes("peer route", map[string]string{"10.244.251.0/24": "10.213.250.2"})

	cur, err := client.CoreV1().Nodes().Get(ctx, "peer-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.213.250.3"}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRoutes("peer moved", map[string]string{"10.244.251.0/24": "10.213.250.3"})

	if err := client.CoreV1().Nodes().Delete(ctx, "peer-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRoutes("peer deleted", map[string]string{})
}
