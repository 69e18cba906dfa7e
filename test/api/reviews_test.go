package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestAccessReviews drives the review APIs of authentication.k8s.io/v1 and
// authorization.k8s.io/v1 with kubectl auth and client-go: who the admin is, what it may do,
// TokenReviews of the kubeconfig's token and of a bogus one, and a 422 for a
// SubjectAccessReview that names no subject.
func TestAccessReviews(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	client := a.Client()
	ctx := context.Background()

	t.Run("kubectl auth whoami", func(t *testing.T) {
		out := a.MustKubectl("", "auth", "whoami")
		for _, want := range []string{`(?m)^Username\s+admin$`, `(?m)^UID\s+admin$`, `(?m)^Groups\s+\[system:masters system:authenticated\]$`} {
			if !regexpMatch(want, out) {
				t.Errorf("whoami lacks %s:\n%s", want, out)
			}
		}
	})

	t.Run("kubectl auth can-i", func(t *testing.T) {
		if out := a.MustKubectl("", "auth", "can-i", "create", "deployments"); out != "yes\n" {
			t.Errorf("can-i create deployments = %q, want yes", out)
		}
		if out := a.MustKubectl("", "auth", "can-i", "get", "/healthz"); out != "yes\n" {
			t.Errorf("can-i get /healthz = %q, want yes", out)
		}
		out := a.MustKubectl("", "auth", "can-i", "--list", "--namespace", "kube-system")
		if !regexpMatch(`(?m)^\*\.\*\s+\[\]\s+\[\]\s+\[\*\]$`, out) || !regexpMatch(`(?m)^\s+\[\*\]\s+\[\]\s+\[\*\]$`, out) {
			t.Errorf("can-i --list lacks the * rules:\n%s", out)
		}
	})

	t.Run("discovery", func(t *testing.T) {
		out := a.MustKubectl("", "api-resources", "--no-headers")
		for _, want := range []string{
			`(?m)^tokenreviews\s+authentication.k8s.io/v1\s+false\s+TokenReview$`,
			`(?m)^selfsubjectreviews\s+authentication.k8s.io/v1\s+false\s+SelfSubjectReview$`,
			`(?m)^localsubjectaccessreviews\s+authorization.k8s.io/v1\s+true\s+LocalSubjectAccessReview$`,
			`(?m)^selfsubjectaccessreviews\s+authorization.k8s.io/v1\s+false\s+SelfSubjectAccessReview$`,
			`(?m)^selfsubjectrulesreviews\s+authorization.k8s.io/v1\s+false\s+SelfSubjectRulesReview$`,
			`(?m)^subjectaccessreviews\s+authorization.k8s.io/v1\s+false\s+SubjectAccessReview$`,
		} {
			if !regexpMatch(want, out) {
				t.Errorf("api-resources lacks %s:\n%s", want, out)
			}
		}
	})

	t.Run("tokenreview", func(t *testing.T) {
		token := a.RESTConfig().BearerToken
		if token == "" {
			t.Fatal("the kubeconfig has no token")
		}
		got, err := client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st := got.Status; !st.Authenticated || st.User.Username != "admin" || st.Error != "" {
			t.Errorf("review of the kubeconfig's token: %+v, want admin", st)
		}
		got, err = client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: "bogus-" + token}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st := got.Status; st.Authenticated || st.User.Username != "" || st.Error == "" {
			t.Errorf("review of a bogus token: %+v, want unauthenticated with an error", st)
		}
	})

	t.Run("subjectaccessreview", func(t *testing.T) {
		sar := func(spec authorizationv1.SubjectAccessReviewSpec) (*authorizationv1.SubjectAccessReview, error) {
			return client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		}
		pods := &authorizationv1.ResourceAttributes{Namespace: "default", Verb: "list", Resource: "pods"}
		got, err := sar(authorizationv1.SubjectAccessReviewSpec{User: "jane", ResourceAttributes: pods})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed || !strings.Contains(got.Status.Reason, "no binding applies") {
			t.Errorf("jane without a binding: status %+v, want denied, no binding", got.Status)
		}
		if _, err := client.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
			Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "jane-view"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if got, err = sar(authorizationv1.SubjectAccessReviewSpec{User: "jane", ResourceAttributes: pods}); err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !got.Status.Allowed || !strings.Contains(got.Status.Reason, "jane-view") {
			t.Errorf("jane bound to pod-reader: status %+v, want allowed by RoleBinding default/jane-view", got.Status)
		}
		_, err = sar(authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: pods})
		var st apierrors.APIStatus
		if !errors.As(err, &st) || st.Status().Code != http.StatusUnprocessableEntity || !strings.Contains(err.Error(), "spec.user") {
			t.Errorf("without user or groups: %v, want 422 on spec.user", err)
		}
		out, errOut, err := a.Kubectl(`apiVersion: authorization.k8s.io/v1
kind: LocalSubjectAccessReview
metadata:
  namespace: default
spec:
  user: jane
  resourceAttributes:
    namespace: kube-system
    verb: get
    resource: secrets
`, "create", "-f", "-")
		if err == nil || !strings.Contains(errOut, "spec.resourceAttributes.namespace") {
			t.Errorf("LocalSubjectAccessReview for another namespace: %v\nstdout: %s\nstderr: %s", err, out, errOut)
		}
	})
}
