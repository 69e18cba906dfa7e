package gitsync

import (
	"context"
	"slices"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// TestHealthAndDependsOn: the health of applied objects is reported (what still progresses is
// listed), and a source that depends on another waits until that one is Ready and Healthy.
func TestHealthAndDependsOn(t *testing.T) {
	base := newRepo(t)
	base.commit(map[string]string{"ns.yaml": nsYAML, "deploy.yaml": deployYAML, "svc.yaml": svcYAML})
	apps := newRepo(t)
	appsHead := apps.commit(map[string]string{"cm.yaml": newCMYAML})
	e := start(t)
	ctx := context.Background()
	res := e.cctx.Dynamic.Resource(GitSourceResource).Namespace("default")
	for _, spec := range []map[string]any{
		{"name": "base", "spec": map[string]any{"url": "file://" + base.dir, "interval": "1m", "serviceAccountName": testSA}},
		{"name": "apps", "spec": map[string]any{"url": "file://" + apps.dir, "interval": "1m", "serviceAccountName": testSA,
			"dependsOn": []any{map[string]any{"name": "base"}}}},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "flotilla.dev/v1alpha1", "kind": "GitSource",
			"metadata": map[string]any{"name": spec["name"], "namespace": "default"}, "spec": spec["spec"]}}
		if _, err := res.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	getBase := func() *v1alpha1.GitSource {
		u, err := res.Get(ctx, "base", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gs := &v1alpha1.GitSource{}
		if err := runtimeFromUnstructured(u, gs); err != nil {
			t.Fatal(err)
		}
		return gs
	}
	const progressingLine = "Deployment demo/web: not yet observed by the deployment controller"
	e.waitFor("base applied, its Deployment progressing", func() bool {
		st := getBase().Status
		ready := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
		h := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionHealthy)
		return ready != nil && ready.Status == metav1.ConditionTrue && h != nil && h.Status == metav1.ConditionFalse &&
			st.Health == v1alpha1.HealthProgressing && slices.Equal(st.Progressing, []string{progressingLine}) &&
			strings.Contains(h.Message, progressingLine)
	})
	e.waitFor("apps waiting for base", func() bool {
		c := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonDependencyNotReady &&
			strings.Contains(c.Message, "dependency GitSource default/base is not Healthy") && strings.Contains(c.Message, progressingLine)
	})
	t.Logf("apps: %s", apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionReady).Message)
	cmExists := func() bool {
		return e.exists(func() (metav1.Object, error) {
			return e.client.CoreV1().ConfigMaps("demo").Get(ctx, "fresh", metav1.GetOptions{})
		})
	}
	if cmExists() {
		t.Fatal("dependent source applied before its dependency was healthy")
	}

	t.Log("the Deployment becomes available (status written as its controller would): base Healthy, apps applies")
	d, err := e.client.AppsV1().Deployments("demo").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Status.ObservedGeneration = d.Generation
	d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = 2, 1, 1, 1
	if d, err = e.client.AppsV1().Deployments("demo").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("progress reported", func() bool {
		return slices.Equal(getBase().Status.Progressing, []string{"Deployment demo/web: 1 of 2 replicas updated"})
	})
	d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = 2, 2, 2
	if _, err := e.client.AppsV1().Deployments("demo").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("base healthy", func() bool {
		st := getBase().Status
		h := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionHealthy)
		return h != nil && h.Status == metav1.ConditionTrue && st.Health == v1alpha1.HealthHealthy && len(st.Progressing) == 0
	})
	e.waitFor("apps applied", e.readyAt(appsHead))
	if !cmExists() {
		t.Fatal("dependent source's ConfigMap missing")
	}

	t.Log("a dependsOn cycle stalls with the cycle spelled out")
	for name, dep := range map[string]string{"loop-a": "loop-b", "loop-b": "loop-a"} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "flotilla.dev/v1alpha1", "kind": "GitSource",
			"metadata": map[string]any{"name": name, "namespace": "default"},
			"spec": map[string]any{"url": "file://" + apps.dir, "interval": "1m", "serviceAccountName": testSA,
				"dependsOn": []any{map[string]any{"name": dep}}}}}
		if _, err := res.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("cycle reported", func() bool {
		u, err := res.Get(ctx, "loop-a", metav1.GetOptions{})
		if err != nil {
			return false
		}
		var gs v1alpha1.GitSource
		if runtimeFromUnstructured(u, &gs) != nil {
			return false
		}
		c := apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue &&
			strings.Contains(c.Message, "spec.dependsOn forms a cycle (default/loop-a -> default/loop-b -> default/loop-a)")
	})
}

func runtimeFromUnstructured(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}
