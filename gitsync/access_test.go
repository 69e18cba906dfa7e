package gitsync

import (
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestMayApply: where a dry-run cannot be made (a custom resource of a definition the
// revision brings, an object of a namespace that does not exist yet), an impersonating
// Applier asks the API whether its identity may create and patch the object, and words a
// refusal as the API's 403; an Applier acting as gitsync asks nothing.
func TestMayApply(t *testing.T) {
	var asked []authorizationv1.ResourceAttributes
	kube := kubefake.NewClientset()
	kube.PrependReactor("create", "selfsubjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		r := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		ra := *r.Spec.ResourceAttributes
		asked = append(asked, ra)
		r.Status.Allowed = ra.Namespace == "web" || (ra.Namespace == "web2" && ra.Verb == "patch")
		if !r.Status.Allowed {
			r.Status.Reason = "no rule allows it"
		}
		return true, r, nil
	})
	a := &Applier{Access: kube.AuthorizationV1().SelfSubjectAccessReviews(), User: "system:serviceaccount:web:deployer"}
	widgets := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	ctx := context.Background()

	if err := a.mayApply(ctx, widgets, "web", "w1"); err != nil {
		t.Errorf("allowed in web: %v", err)
	}
	if len(asked) != 2 || asked[0].Verb != "create" || asked[1].Verb != "patch" || asked[1].Group != "example.com" ||
		asked[1].Resource != "widgets" || asked[1].Name != "w1" || asked[1].Namespace != "web" {
		t.Errorf("reviews asked: %+v", asked)
	}
	err := a.mayApply(ctx, widgets, "web2", "w1")
	want := `widgets.example.com "w1" is forbidden: User "system:serviceaccount:web:deployer" cannot create resource "widgets" in API group "example.com" in the namespace "web2": no rule allows it`
	if !apierrors.IsForbidden(err) || errorText(err) != want {
		t.Errorf("create refused in web2: %v, want 403 %q", err, want)
	}
	err = a.mayApply(ctx, schema.GroupResource{Group: "example.com", Resource: "clusterwidgets"}, "", "c1")
	if want := `cannot create resource "clusterwidgets" in API group "example.com": no rule allows it`; !apierrors.IsForbidden(err) || !strings.Contains(errorText(err), want) {
		t.Errorf("cluster-scoped: %v, want 403 saying %q", err, want)
	}

	asked = nil
	if err := (&Applier{}).mayApply(ctx, widgets, "web2", "w1"); err != nil || len(asked) != 0 {
		t.Errorf("gitsync's own Applier: %v, %d reviews", err, len(asked))
	}
}
