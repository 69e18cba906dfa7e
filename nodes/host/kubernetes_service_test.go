package host

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func node(name, ip string, ready corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ControlPlaneLabel: "true"}}, Status: corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}},
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
	}}
}

func TestKubernetesServiceListsReadyHosts(t *testing.T) {
	ctx := context.Background()
	client := fake.NewSimpleClientset(
		node("host-2", "10.0.0.2", corev1.ConditionTrue),
		node("host-1", "10.0.0.1", corev1.ConditionTrue),
		node("host-3", "10.0.0.3", corev1.ConditionUnknown),
		worker("host-4", "10.0.0.4"),
	)
	if _, err := syncKubernetesService(ctx, client, net.ParseIP("10.96.0.1"), 6443, "host-0"); err != nil {
		t.Fatal(err)
	}
	svc, err := client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "10.96.0.1" || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.IntValue() != 6443 {
		t.Fatalf("Service = %+v", svc.Spec)
	}
	got := sliceAddresses(ctx, t, client)
	if len(got) != 2 || got[0] != "10.0.0.1" || got[1] != "10.0.0.2" {
		t.Fatalf("endpoints = %v, want the Ready servers in order [10.0.0.1 10.0.0.2], not the worker", got)
	}

	// host-1 goes not ready: the slice follows.
	n, _ := client.CoreV1().Nodes().Get(ctx, "host-1", metav1.GetOptions{})
	n.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := syncKubernetesService(ctx, client, net.ParseIP("10.96.0.1"), 6443, "host-0"); err != nil {
		t.Fatal(err)
	}
	if got := sliceAddresses(ctx, t, client); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Fatalf("after host-1 went not ready: endpoints = %v, want [10.0.0.2]", got)
	}
}

// worker is a Ready Node without ControlPlaneLabel.
func worker(name, ip string) *corev1.Node {
	n := node(name, ip, corev1.ConditionTrue)
	n.Labels = nil
	return n
}

// TestKubernetesServiceWaitsForALabelledServer: before any server labelled its Node, the
// slice is neither created empty nor emptied.
func TestKubernetesServiceWaitsForALabelledServer(t *testing.T) {
	ctx := context.Background()
	client := fake.NewSimpleClientset(worker("host-1", "10.0.0.1"))
	if _, err := syncKubernetesService(ctx, client, net.ParseIP("10.96.0.1"), 6443, "host-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err == nil {
		t.Fatal("an EndpointSlice was written with no server labelled")
	}
	if err := labelControlPlane(ctx, client, "host-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := syncKubernetesService(ctx, client, net.ParseIP("10.96.0.1"), 6443, "host-0"); err != nil {
		t.Fatal(err)
	}
	slice, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || len(slice.Endpoints) != 1 || slice.Endpoints[0].Addresses[0] != "10.0.0.1" {
		t.Fatalf("after labelling: %+v, %v", slice, err)
	}
}

// TestKubernetesServiceListsItsOwnServerAtOnce: the server running the loop counts before
// its label is set, and reports when the slice lists it.
func TestKubernetesServiceListsItsOwnServerAtOnce(t *testing.T) {
	ctx := context.Background()
	client := fake.NewSimpleClientset(worker("host-1", "10.0.0.1"), worker("host-2", "10.0.0.2"))
	listed, err := syncKubernetesService(ctx, client, net.ParseIP("10.96.0.1"), 6443, "host-1")
	if err != nil || !listed {
		t.Fatalf("sync as host-1: listed %v, %v", listed, err)
	}
	slice, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || len(slice.Endpoints) != 1 || slice.Endpoints[0].Addresses[0] != "10.0.0.1" {
		t.Fatalf("slice %+v, %v: want host-1 only", slice, err)
	}
}

// TestKubernetesServiceReadsOnlyServers: on a site of many workers, each sync reads the
// servers' Nodes and this host's own, not every Node of the site (every server runs it every
// 10 s).
func TestKubernetesServiceReadsOnlyServers(t *testing.T) {
	ctx := context.Background()
	objs := []runtime.Object{node("host-1", "10.0.0.1", corev1.ConditionTrue), node("host-2", "10.0.0.2", corev1.ConditionTrue)}
	for i := range 500 {
		objs = append(objs, worker(fmt.Sprintf("worker-%03d", i), fmt.Sprintf("10.0.%d.%d", 1+i/250, i%250)))
	}
	self := worker("host-3", "10.0.0.3") // a server that has not labelled its Node yet
	objs = append(objs, self)
	client := fake.NewSimpleClientset(objs...)
	read := 0
	serve := k8stesting.ObjectReaction(client.Tracker())
	count := func(action k8stesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := serve(action)
		switch o := obj.(type) {
		case *corev1.NodeList:
			// What the API serves: the tracker leaves the label selector to the typed client.
			sel := action.(k8stesting.ListAction).GetListRestrictions().Labels
			for _, n := range o.Items {
				if sel.Matches(labels.Set(n.Labels)) {
					read++
				}
			}
		case *corev1.Node:
			read++
		}
		return handled, obj, err
	}
	client.PrependReactor("list", "nodes", count)
	client.PrependReactor("get", "nodes", count)

	listed, err := syncKubernetesService(ctx, client, net.ParseIP("10.96.0.1"), 6443, "host-3")
	if err != nil || !listed {
		t.Fatalf("sync as host-3: listed %v, %v", listed, err)
	}
	got := sliceAddresses(ctx, t, client)
	if !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}) {
		t.Fatalf("endpoints = %v, want the two labelled servers and host-3 itself", got)
	}
	if read > 3 {
		t.Fatalf("the sync read %d Nodes on a site of 3 servers and 500 workers: want the servers' only", read)
	}
}

// sliceAddresses returns the first address of each endpoint of the EndpointSlice
// default/kubernetes.
func sliceAddresses(ctx context.Context, t *testing.T, client *fake.Clientset) []string {
	t.Helper()
	slice, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range slice.Endpoints {
		got = append(got, e.Addresses[0])
	}
	return got
}
