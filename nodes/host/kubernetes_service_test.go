package host

import (
	"context"
	"net"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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
	slice, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range slice.Endpoints {
		got = append(got, e.Addresses[0])
	}
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
	slice, _ = client.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if len(slice.Endpoints) != 1 || slice.Endpoints[0].Addresses[0] != "10.0.0.2" {
		t.Fatalf("after host-1 went not ready: endpoints = %+v", slice.Endpoints)
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
