package gitsync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// tenantCM is ConfigMap ns/name with data v.
func tenantCM(ns, name, v string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: %s}\ndata: {v: %q}\n", name, ns, v)
}

// TestServiceAccountTenancyAgainstAgent: a GitSource with spec.serviceAccountName applies as
// that ServiceAccount. A team's ServiceAccount bound to edit in namespace web applies the
// team's ConfigMap; a revision that also has an object in kube-system, or a GitSource (the
// root's, to turn its verification off), is refused whole with the API's 403 in the status;
// a GitSource without spec.serviceAccountName outside kube-system/root applies nothing and
// prunes nothing; kube-system/root without one applies as gitsync.
func TestServiceAccountTenancyAgainstAgent(t *testing.T) {
	team := newRepo(t)
	teamHead := team.commit(map[string]string{"cm.yaml": tenantCM("web", "app", "1")})
	other := newRepo(t)
	otherHead := other.commit(map[string]string{"cm.yaml": tenantCM("web", "other", "1")})
	rootRepo := newRepo(t)
	rootHead := rootRepo.commit(map[string]string{"cm.yaml": tenantCM("kube-system", "from-root", "1")})

	e := startWith(t, "clusterroleaggregation")
	ctx := context.Background()
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.serviceAccount("web", "web-deployer", "RoleBinding", "edit")
	// edit gets its rules from the aggregation controller.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cr, err := e.client.RbacV1().ClusterRoles().Get(ctx, "edit", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, r := range cr.Rules {
			if rulesName(r, "configmaps", "patch") {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("ClusterRole edit never got the rules of system:aggregate-to-edit: %v", err)
	}

	create := func(ns, name string, spec map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "flotilla.dev/v1alpha1", "kind": "GitSource",
			"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}}
		if _, err := e.cctx.Dynamic.Resource(GitSourceResource).Namespace(ns).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var last *v1alpha1.GitSource
	waitSource := func(ns, name, what string, cond func(*v1alpha1.GitSource) bool) *v1alpha1.GitSource {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			gs, err := getSource(ctx, e.cctx.Dynamic, ns, name)
			if err != nil {
				return false, nil
			}
			last = gs
			return cond(gs), nil
		})
		if err != nil {
			var st v1alpha1.GitSourceStatus
			if last != nil {
				st = last.Status
			}
			t.Fatalf("waiting for %s: %v; status of %s/%s: %+v", what, err, ns, name, st)
		}
		return last
	}
	appliedAt := func(head string) func(*v1alpha1.GitSource) bool {
		return func(gs *v1alpha1.GitSource) bool {
			c := apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionTrue && gs.Status.LastAppliedRevision == "main@sha1:"+head
		}
	}
	refused := func(head, reason string) func(*v1alpha1.GitSource) bool {
		return func(gs *v1alpha1.GitSource) bool {
			ready := apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionReady)
			stalled := apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionStalled)
			return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == reason &&
				stalled != nil && stalled.Status == metav1.ConditionTrue && gs.Status.LastAttemptedRevision == "main@sha1:"+head
		}
	}
	cmData := func(ns, name string) string {
		t.Helper()
		cm, err := e.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "<none>"
		}
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data["v"]
	}

	t.Log("kube-system/root without a ServiceAccount applies as gitsync")
	create("kube-system", "root", map[string]any{"url": "file://" + rootRepo.dir, "interval": "2s"})
	waitSource("kube-system", "root", "root applied", appliedAt(rootHead))
	if v := cmData("kube-system", "from-root"); v != "1" {
		t.Errorf("ConfigMap kube-system/from-root: %s, want applied", v)
	}

	t.Log("the team's source applies its ConfigMap in web as web-deployer")
	create("web", "app", map[string]any{"url": "file://" + team.dir, "interval": "2s", "serviceAccountName": "web-deployer"})
	waitSource("web", "app", "the team's first revision applied", appliedAt(teamHead))
	if v := cmData("web", "app"); v != "1" {
		t.Fatalf("ConfigMap web/app: %s, want 1", v)
	}

	t.Log("a revision with an object in kube-system (and a namespace of its own) is refused whole, naming the 403s")
	good := teamHead
	teamHead = team.commit(map[string]string{"cm.yaml": tenantCM("web", "app", "2"), "system.yaml": tenantCM("kube-system", "team", "1"),
		"web2.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: web2}\n---\n" + tenantCM("web2", "x", "1")})
	gs := waitSource("web", "app", "the revision refused as Forbidden", refused(teamHead, ReasonForbidden))
	msg := apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionReady).Message
	t.Logf("refusal: %s", msg)
	for _, want := range []string{
		"Revision main@sha1:" + teamHead + " not applied: ServiceAccount web/web-deployer may not change 3 of its objects",
		`system.yaml: ConfigMap kube-system/team: configmaps "team" is forbidden: User "system:serviceaccount:web:web-deployer" cannot patch resource "configmaps" in API group "" in the namespace "kube-system"`,
		`web2.yaml: Namespace web2: namespaces "web2" is forbidden: User "system:serviceaccount:web:web-deployer" cannot patch resource "namespaces" in API group "" in the namespace "web2"`,
		`web2.yaml: ConfigMap web2/x: configmaps "x" is forbidden: User "system:serviceaccount:web:web-deployer" cannot patch resource "configmaps" in API group "" in the namespace "web2"`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal does not say %q", want)
		}
	}
	if strings.Contains(msg, "web/app") {
		t.Errorf("refusal lists the allowed ConfigMap web/app: %s", msg)
	}
	if gs.Status.LastAppliedRevision != "main@sha1:"+good {
		t.Errorf("lastAppliedRevision = %s, want the previous one", gs.Status.LastAppliedRevision)
	}
	if v := cmData("web", "app"); v != "1" {
		t.Errorf("ConfigMap web/app = %s: the allowed change of a refused revision was applied", v)
	}
	if v := cmData("kube-system", "team"); v != "<none>" {
		t.Errorf("ConfigMap kube-system/team = %s: applied against RBAC", v)
	}
	if _, err := e.client.CoreV1().Namespaces().Get(ctx, "web2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Namespace web2: %v, want NotFound", err)
	}

	t.Log("a revision with GitSource kube-system/root (verification off) is refused: the GitSource is applied as web-deployer")
	teamHead = team.commit(map[string]string{"system.yaml": "", "web2.yaml": "", "root.yaml": `apiVersion: flotilla.dev/v1alpha1
kind: GitSource
metadata: {name: root, namespace: kube-system}
spec:
  url: file:///elsewhere
  verify: {mode: none}
`})
	gs = waitSource("web", "app", "the GitSource refused as Forbidden", refused(teamHead, ReasonForbidden))
	msg = apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionReady).Message
	if want := `root.yaml: GitSource kube-system/root: gitsources.flotilla.dev "root" is forbidden: User "system:serviceaccount:web:web-deployer" cannot patch resource "gitsources" in API group "flotilla.dev" in the namespace "kube-system"`; !strings.Contains(msg, want) {
		t.Errorf("refusal %q does not say %q", msg, want)
	}
	if root, err := getSource(ctx, e.cctx.Dynamic, "kube-system", "root"); err != nil || root.Spec.URL != "file://"+rootRepo.dir {
		t.Errorf("GitSource kube-system/root changed: %+v, %v", root, err)
	}

	t.Log("the next revision the ServiceAccount may apply is applied")
	teamHead = team.commit(map[string]string{"root.yaml": "", "cm.yaml": tenantCM("web", "app", "3")})
	waitSource("web", "app", "the fixed revision applied", appliedAt(teamHead))
	if v := cmData("web", "app"); v != "3" {
		t.Errorf("ConfigMap web/app = %s, want 3", v)
	}

	t.Log("a source without spec.serviceAccountName is refused: nothing applied, nothing pruned")
	create("web", "other", map[string]any{"url": "file://" + other.dir, "interval": "2s", "serviceAccountName": "web-deployer"})
	waitSource("web", "other", "other applied as web-deployer", appliedAt(otherHead))
	if _, err := e.cctx.Dynamic.Resource(GitSourceResource).Namespace("web").Patch(ctx, "other", types.MergePatchType,
		[]byte(`{"spec":{"serviceAccountName":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	otherHead = other.commit(map[string]string{"cm.yaml": "", "cm2.yaml": tenantCM("web", "other2", "1")})
	gs = waitSource("web", "other", "other refused for want of a ServiceAccount", refused(otherHead, ReasonServiceAccountRequired))
	msg = apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionReady).Message
	t.Logf("refusal: %s", msg)
	if !strings.Contains(msg, "spec.serviceAccountName is not set") || !strings.Contains(msg, "set spec.serviceAccountName to a ServiceAccount of namespace web") {
		t.Errorf("refusal %q does not say to set spec.serviceAccountName", msg)
	}
	if v := cmData("web", "other"); v != "1" {
		t.Errorf("ConfigMap web/other = %s: pruned by a source without a ServiceAccount", v)
	}
	if v := cmData("web", "other2"); v != "<none>" {
		t.Errorf("ConfigMap web/other2 = %s: applied by a source without a ServiceAccount", v)
	}
	if inv := gs.Status.Inventory; inv == nil || len(inv.Entries) != 1 || inv.Entries[0].ID != "web_other__ConfigMap" {
		t.Errorf("inventory = %+v, want the ConfigMap applied before", inv)
	}

	t.Log("root still applies as gitsync")
	rootHead = rootRepo.commit(map[string]string{"cm.yaml": tenantCM("kube-system", "from-root", "2")})
	waitSource("kube-system", "root", "root's next revision applied", appliedAt(rootHead))
	if v := cmData("kube-system", "from-root"); v != "2" {
		t.Errorf("ConfigMap kube-system/from-root = %s, want 2", v)
	}
}

// rulesName reports whether rule r grants verb on core resource resource.
func rulesName(r rbacv1.PolicyRule, resource, verb string) bool {
	has := func(list []string, s string) bool { return slices.Contains(list, s) || slices.Contains(list, "*") }
	return has(r.APIGroups, "") && has(r.Resources, resource) && has(r.Verbs, verb)
}
