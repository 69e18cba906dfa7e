package servicelb

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

func node(name, ip string, readyStatus corev1.ConditionStatus, unschedulable bool) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: unschedulable},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: readyStatus}}}}
}

func TestIngress(t *testing.T) {
	lb := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	nodes := []*corev1.Node{node("b", "10.0.0.2", corev1.ConditionTrue, false), node("a", "10.0.0.1", corev1.ConditionTrue, false),
		node("c", "10.0.0.3", corev1.ConditionUnknown, false), node("d", "10.0.0.4", corev1.ConditionTrue, true)}
	got := Ingress(lb, nodes)
	if len(got) != 2 || got[0].IP != "10.0.0.1" || got[1].IP != "10.0.0.2" {
		t.Errorf("ingress = %+v, want the two Ready schedulable hosts, sorted", got)
	}
	if got := Ingress(&corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort}}, nodes); got != nil {
		t.Errorf("NodePort service got ingress %+v", got)
	}
}

func TestLoadBalancerGetsHostAddresses(t *testing.T) {
	a, client, _ := controllertest.StartController(t, func(cc *controllers.Context) (controllers.Runner, error) { return New(cc) })
	ctx := context.Background()
	// A Service of another load balancer implementation (its class) is left to it; it is
	// created first, so it has been seen once the other one has its address.
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "metallb"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
		LoadBalancerClass: new("metallb.io/metallb"), Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
		Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	for _, s := range []*corev1.Service{other, svc} {
		if _, err := client.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The agent registers its own Node (127.0.0.1) within seconds.
	controllertest.Eventually(t, 30*time.Second, "ingress = the host's address", func() (bool, error) {
		got, err := client.CoreV1().Services("default").Get(ctx, "lb", metav1.GetOptions{})
		return err == nil && len(got.Status.LoadBalancer.Ingress) == 1 && got.Status.LoadBalancer.Ingress[0].IP == "127.0.0.1", err
	})
	if got, err := client.CoreV1().Services("default").Get(ctx, "metallb", metav1.GetOptions{}); err != nil || len(got.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("the Service of load balancer class metallb.io/metallb got an address from flotilla: %v %+v", err, got.Status.LoadBalancer)
	}
	out := a.MustKubectl("", "get", "svc", "lb", "--no-headers")
	if want := "127.0.0.1"; !strings.Contains(out, want) {
		t.Errorf("kubectl get svc lb: %q, want EXTERNAL-IP %s", out, want)
	}
}
