package policyinventory_test

import (
	"context"
	"maps"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/flotilla-dev/flotilla/policies"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/policyinventory"
)

// start runs the controller on a fake clientset until the test ends.
func start(t *testing.T) kubernetes.Interface {
	t.Helper()
	client := fake.NewClientset()
	cctx := &controllers.Context{Client: client, Informers: informers.NewSharedInformerFactory(client, 0)}
	r, err := policyinventory.New(cctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cctx.Informers.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx, 1); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cctx.Informers.Shutdown()
	})
	return client
}

// holds waits until the inventory's data is want.
func holds(t *testing.T, client kubernetes.Interface, want map[string]string) {
	t.Helper()
	var last map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		cm, err := client.CoreV1().ConfigMaps(policies.InventoryNamespace).Get(ctx, policies.InventoryName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		last = cm.Data
		return maps.Equal(cm.Data, want) && cm.Annotations[policyinventory.DescriptionAnnotation] == policyinventory.Description, nil
	})
	if err != nil {
		t.Fatalf("inventory: %v: have %v, want %v", err, last, want)
	}
}

func ingress(ns, name string, hosts ...string) *networkingv1.Ingress {
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, h := range hosts {
		ing.Spec.Rules = append(ing.Spec.Rules, networkingv1.IngressRule{Host: h})
	}
	return ing
}

func TestInventory(t *testing.T) {
	client := start(t)
	ctx := context.Background()
	// An empty site has an empty inventory.
	holds(t, client, map[string]string{})

	for _, ing := range []*networkingv1.Ingress{
		ingress("a", "shop", "shop.example.com", "*.apps.example.com", ""),
		ingress("b", "shop", "shop.example.com"),
		ingress("a", "api", "shop.example.com"),
	} {
		if _, err := client.NetworkingV1().Ingresses(ing.Namespace).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"app": "web", "app.kubernetes.io/part-of": "shop"},
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a", "b"}},
				{Key: "canary", Operator: metav1.LabelSelectorOpDoesNotExist},
			},
		}},
	}
	all := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "all"},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{}}}
	none := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "none"}}
	for _, p := range []*policyv1.PodDisruptionBudget{pdb, all, none} {
		if _, err := client.PolicyV1().PodDisruptionBudgets(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{
		"ingress.shop.example.com":   "a/api,a/shop,b/shop",
		"ingress._.apps.example.com": "a/shop",
		"pdb.a.web":                  "app in web;app.kubernetes.io/part-of in shop;tier notin a|b;canary !exists",
		"pdb.b.all":                  "",
	}
	holds(t, client, want)

	// Deleting an Ingress takes its hosts out.
	if err := client.NetworkingV1().Ingresses("b").Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want["ingress.shop.example.com"] = "a/api,a/shop"
	holds(t, client, want)

	// An edit of the inventory is undone, a deleted one comes back.
	cm, err := client.CoreV1().ConfigMaps(policies.InventoryNamespace).Get(ctx, policies.InventoryName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["ingress.shop.example.com"] = "b/mine"
	if _, err := client.CoreV1().ConfigMaps(policies.InventoryNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	holds(t, client, want)
	if err := client.CoreV1().ConfigMaps(policies.InventoryNamespace).Delete(ctx, policies.InventoryName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	holds(t, client, want)

}
