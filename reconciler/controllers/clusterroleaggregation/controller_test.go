package clusterroleaggregation

import (
	"context"
	"reflect"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
)

const aggregateLabel = "rbac.example.com/aggregate-to-monitoring"

func rule(verb, resource string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: []string{verb}, APIGroups: []string{""}, Resources: []string{resource}}
}

func role(name string, labels map[string]string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rules}
}

func aggregate(name string) *rbacv1.ClusterRole {
	cr := role(name, nil)
	cr.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
		{MatchLabels: map[string]string{aggregateLabel: "true"}}}}
	return cr
}

// start runs the controller against a fake clientset holding roles, until the test ends.
func start(t *testing.T, roles ...*rbacv1.ClusterRole) (*kubefake.Clientset, *Controller) {
	t.Helper()
	client := kubefake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, r := range roles {
		if _, err := client.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	r, err := New(&controllers.Context{Client: client, Informers: factory})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx, 1); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
	return client, r.(*Controller)
}

// waitRules waits until the ClusterRole name, on the server and in the controller's cache,
// holds want.
func waitRules(t *testing.T, client *kubefake.Clientset, c *Controller, name string, want []rbacv1.PolicyRule) {
	t.Helper()
	var got []rbacv1.PolicyRule
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		cr, err := client.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = cr.Rules
		cached, err := c.lister.Get(name)
		return err == nil && reflect.DeepEqual(got, want) && reflect.DeepEqual(cached.Rules, want), nil
	})
	if err != nil {
		t.Fatalf("ClusterRole %s rules = %+v, want %+v (%v)", name, got, want, err)
	}
}

func updates(client *kubefake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "clusterroles" {
			n++
		}
	}
	return n
}

// The rules of labelled roles appear in the aggregate, in name order; removing a label
// removes its rules, a newly labelled or deleted role is followed, and a sync that finds the
// aggregate current writes nothing.
func TestAggregation(t *testing.T) {
	on := map[string]string{aggregateLabel: "true"}
	getPods, getNodes, getSecrets := rule("get", "pods"), rule("get", "nodes"), rule("get", "secrets")
	client, c := start(t,
		aggregate("monitoring"),
		role("pods-reader", on, getPods),
		role("nodes-reader", on, getNodes, getPods),
		role("secrets-reader", nil, getSecrets),
	)
	ctx := context.Background()
	waitRules(t, client, c, "monitoring", []rbacv1.PolicyRule{getNodes, getPods})

	before := updates(client)
	if err := c.sync(ctx, "monitoring"); err != nil {
		t.Fatal(err)
	}
	if n := updates(client) - before; n != 0 {
		t.Errorf("a sync of a current aggregate wrote it %d time(s)", n)
	}

	t.Log("the label of nodes-reader removed: its rules leave, pods-reader's stay")
	nr, err := client.RbacV1().ClusterRoles().Get(ctx, "nodes-reader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nr.Labels = nil
	if _, err := client.RbacV1().ClusterRoles().Update(ctx, nr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRules(t, client, c, "monitoring", []rbacv1.PolicyRule{getPods})

	t.Log("secrets-reader labelled: its rules join")
	sr, err := client.RbacV1().ClusterRoles().Get(ctx, "secrets-reader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sr.Labels = on
	if _, err := client.RbacV1().ClusterRoles().Update(ctx, sr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRules(t, client, c, "monitoring", []rbacv1.PolicyRule{getPods, getSecrets})

	t.Log("a second aggregate created later is filled too")
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, aggregate("monitoring-too"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRules(t, client, c, "monitoring-too", []rbacv1.PolicyRule{getPods, getSecrets})

	t.Log("pods-reader and secrets-reader deleted: both aggregates end empty")
	for _, name := range []string{"pods-reader", "secrets-reader"} {
		if err := client.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitRules(t, client, c, "monitoring", []rbacv1.PolicyRule{})
	waitRules(t, client, c, "monitoring-too", []rbacv1.PolicyRule{})

	if cr, _ := c.lister.Get("nodes-reader"); len(cr.Rules) != 2 {
		t.Errorf("a role without aggregationRule was changed: %+v", cr.Rules)
	}
}

// An aggregate whose rules are the same but in another order is rewritten in the stable
// order once.
func TestAggregationOrder(t *testing.T) {
	on := map[string]string{aggregateLabel: "true"}
	a, b := rule("get", "pods"), rule("list", "pods")
	agg := aggregate("monitoring")
	agg.Rules = []rbacv1.PolicyRule{b, a}
	client, c := start(t, agg, role("a", on, a), role("b", on, b))
	waitRules(t, client, c, "monitoring", []rbacv1.PolicyRule{a, b})
	before := updates(client)
	if err := c.sync(context.Background(), "monitoring"); err != nil {
		t.Fatal(err)
	}
	if n := updates(client) - before; n != 0 {
		t.Errorf("a sync of a current aggregate wrote it %d time(s)", n)
	}
}
