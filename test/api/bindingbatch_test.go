package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// bindingBatchClient is a REST client for flotilla.dev/v1alpha1 (JSON), as user when not empty.
func bindingBatchClient(t *testing.T, a *framework.Agent, asUser string) rest.Interface {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := flotillav1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cfg := a.RESTConfig()
	cfg.GroupVersion = &flotillav1alpha1.SchemeGroupVersion
	cfg.APIPath = "/apis"
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if asUser != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: asUser}
	}
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func postBindingBatch(ctx context.Context, c rest.Interface, ns string, dryRun bool, bs ...flotillav1alpha1.PodBinding) (*flotillav1alpha1.BindingBatch, error) {
	out := &flotillav1alpha1.BindingBatch{}
	req := c.Post().Namespace(ns).Resource("bindingbatches").Body(&flotillav1alpha1.BindingBatch{Spec: flotillav1alpha1.BindingBatchSpec{Bindings: bs}})
	if dryRun {
		req = req.Param("dryRun", "All")
	}
	return out, req.Do(ctx).Into(out)
}

// TestBindingBatch: a BindingBatch binds each pod exactly as pods/binding would (the same
// answers for bound, missing and replaced pods, the same authorization and admission), and
// reports each outcome in order.
func TestBindingBatch(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := a.Client()
	admin := bindingBatchClient(t, a, "")
	newPod := func(name string) *corev1.Pod {
		p, err := c.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/app:1"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	nodeOf := func(name string) string {
		p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Spec.NodeName
	}
	type want struct {
		code int32
		msg  string
	}
	check := func(t *testing.T, got *flotillav1alpha1.BindingBatch, wants ...want) {
		t.Helper()
		if len(got.Status.Results) != len(wants) {
			t.Fatalf("%d results, want %d: %+v", len(got.Status.Results), len(wants), got.Status.Results)
		}
		for i, w := range wants {
			r := got.Status.Results[i]
			if r.Code != w.code || !strings.Contains(r.Message, w.msg) {
				t.Errorf("result %d (%s) = %d %q, want %d containing %q", i, r.Pod, r.Code, r.Message, w.code, w.msg)
			}
		}
	}

	t.Run("each binding answered as pods/binding answers it", func(t *testing.T) {
		newPod("one")
		two, bound, replaced := newPod("two"), newPod("bound-before"), newPod("replaced")
		if err := c.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: bound.Name},
			Target: corev1.ObjectReference{Kind: "Node", Name: "host-1"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := postBindingBatch(ctx, admin, "default", false,
			flotillav1alpha1.PodBinding{Pod: "one", Node: "host-a"},
			flotillav1alpha1.PodBinding{Pod: "two", UID: two.UID, Node: "host-b"},
			flotillav1alpha1.PodBinding{Pod: "bound-before", Node: "host-b"},
			flotillav1alpha1.PodBinding{Pod: "missing", Node: "host-b"},
			flotillav1alpha1.PodBinding{Pod: "replaced", UID: "not-" + replaced.UID, Node: "host-b"})
		if err != nil {
			t.Fatal(err)
		}
		check(t, got, want{http.StatusCreated, ""}, want{http.StatusCreated, ""},
			want{http.StatusConflict, `already assigned to node "host-1"`}, want{http.StatusNotFound, `"missing" not found`},
			want{http.StatusConflict, "Precondition failed: UID"})
		err = c.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "missing"},
			Target: corev1.ObjectReference{Kind: "Node", Name: "host-b"}}, metav1.CreateOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("pods/binding of a missing pod: %v, want 404 as in the batch", err)
		}
		for pod, node := range map[string]string{"one": "host-a", "two": "host-b", "bound-before": "host-1", "replaced": ""} {
			if got := nodeOf(pod); got != node {
				t.Errorf("pod %s on %q, want %q", pod, got, node)
			}
		}
		p, _ := c.CoreV1().Pods("default").Get(ctx, "one", metav1.GetOptions{})
		scheduled := false
		for _, cond := range p.Status.Conditions {
			scheduled = scheduled || cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionTrue
		}
		if !scheduled {
			t.Errorf("bound pod has no PodScheduled=True condition: %+v", p.Status.Conditions)
		}
	})

	t.Run("dry run binds nothing", func(t *testing.T) {
		newPod("dry")
		got, err := postBindingBatch(ctx, admin, "default", true, flotillav1alpha1.PodBinding{Pod: "dry", Node: "host-a"})
		if err != nil {
			t.Fatal(err)
		}
		check(t, got, want{http.StatusCreated, ""})
		if n := nodeOf("dry"); n != "" {
			t.Errorf("dry run bound the pod to %q", n)
		}
	})

	t.Run("bad batches are refused whole", func(t *testing.T) {
		many := make([]flotillav1alpha1.PodBinding, flotillav1alpha1.MaxBindingsPerBatch+1)
		for i := range many {
			many[i] = flotillav1alpha1.PodBinding{Pod: fmt.Sprintf("p%d", i), Node: "n"}
		}
		for _, tc := range []struct {
			name string
			bs   []flotillav1alpha1.PodBinding
			msg  string
		}{
			{"empty", nil, "spec.bindings: Required value"},
			{"too many", many, "spec.bindings: Too many: 1001: must have at most 1000 items"},
			{"pod twice", []flotillav1alpha1.PodBinding{{Pod: "dry", Node: "a"}, {Pod: "dry", Node: "b"}}, `spec.bindings[1].pod: Duplicate value: "dry"`},
			{"no node", []flotillav1alpha1.PodBinding{{Pod: "dry"}}, "spec.bindings[0].node: Required value"},
		} {
			_, err := postBindingBatch(ctx, admin, "default", false, tc.bs...)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%s: %v, want 422 with %q", tc.name, err, tc.msg)
			}
		}
		err := admin.Post().Namespace("default").Resource("bindingbatches").Body(&flotillav1alpha1.BindingBatch{
			ObjectMeta: metav1.ObjectMeta{Namespace: "other"},
			Spec:       flotillav1alpha1.BindingBatchSpec{Bindings: []flotillav1alpha1.PodBinding{{Pod: "dry", Node: "a"}}}}).Do(ctx).Error()
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "does not match the namespace sent on the request") {
			t.Errorf("namespace mismatch: %v, want 400", err)
		}
		if n := nodeOf("dry"); n != "" {
			t.Errorf("a refused batch bound the pod to %q", n)
		}
	})

	t.Run("authorized binding by binding as pods/binding", func(t *testing.T) {
		newPod("mine")
		newPod("theirs")
		rbac := c.RbacV1()
		role := func(name string, rules ...rbacv1.PolicyRule) {
			if _, err := rbac.Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := rbac.RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "bob"}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		bob := bindingBatchClient(t, a, "bob")
		_, err := postBindingBatch(ctx, bob, "default", false, flotillav1alpha1.PodBinding{Pod: "mine", Node: "host-a"})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("batch without RBAC for bindingbatches: %v, want 403", err)
		}
		role("batches", rbacv1.PolicyRule{APIGroups: []string{"flotilla.dev"}, Resources: []string{"bindingbatches"}, Verbs: []string{"create"}})
		role("bind-mine", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/binding"}, Verbs: []string{"create"}, ResourceNames: []string{"mine"}})
		var got *flotillav1alpha1.BindingBatch
		eventually(t, time.Minute, "bob may create bindingbatches", func() (bool, string) {
			got, err = postBindingBatch(ctx, bob, "default", false,
				flotillav1alpha1.PodBinding{Pod: "theirs", Node: "host-a"}, flotillav1alpha1.PodBinding{Pod: "mine", Node: "host-a"})
			return err == nil, fmt.Sprint(err)
		})
		check(t, got, want{http.StatusForbidden, `cannot create pods/binding`}, want{http.StatusCreated, ""})
		if nodeOf("theirs") != "" || nodeOf("mine") != "host-a" {
			t.Errorf("theirs on %q, mine on %q: want unbound and host-a", nodeOf("theirs"), nodeOf("mine"))
		}
	})

	t.Run("admission sees each binding as pods/binding", func(t *testing.T) {
		a.MustKubectl(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-quarantine}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods/binding]}
  validations:
  - {expression: "object.target.name != 'quarantine'", message: "no pods go to quarantine"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-quarantine}
spec: {policyName: no-quarantine, validationActions: [Deny]}
`, "apply", "-f", "-")
		newPod("probe")
		eventually(t, time.Minute, "the policy to refuse pods/binding", func() (bool, string) {
			err := c.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "probe"},
				Target: corev1.ObjectReference{Kind: "Node", Name: "quarantine"}}, metav1.CreateOptions{})
			return err != nil && strings.Contains(err.Error(), "no pods go to quarantine"), fmt.Sprint(err)
		})
		newPod("q1")
		newPod("q2")
		got, err := postBindingBatch(ctx, admin, "default", false,
			flotillav1alpha1.PodBinding{Pod: "q1", Node: "quarantine"}, flotillav1alpha1.PodBinding{Pod: "q2", Node: "host-a"})
		if err != nil {
			t.Fatal(err)
		}
		check(t, got, want{http.StatusUnprocessableEntity, "no pods go to quarantine"}, want{http.StatusCreated, ""})
		if nodeOf("q1") != "" || nodeOf("q2") != "host-a" {
			t.Errorf("q1 on %q, q2 on %q: want unbound and host-a", nodeOf("q1"), nodeOf("q2"))
		}
	})
}

// eventually polls cond every 200 ms until it holds, failing the test after d with cond's
// last explanation.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %s", what, d, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
