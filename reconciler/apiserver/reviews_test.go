package apiserver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
)

const (
	aliceToken = "alice-token"
	bobToken   = "bob-token"
	apiAud     = "https://flotilla.test"
)

var reviewTokens = map[string]*user.DefaultInfo{
	aliceToken: {Name: "alice", UID: "alice-uid", Groups: []string{"dev", user.AllAuthenticated}},
	bobToken:   {Name: "bob", UID: "bob-uid", Groups: []string{user.AllAuthenticated}},
}

// newReviewTestServer builds a generic API server with the scheme and OpenAPI definitions of
// the real one, the bearer tokens of reviewTokens, authz, and the review APIs installed.
// It returns a client that authenticates with token.
func newReviewTestServer(t *testing.T, authz authorizer.Authorizer) func(token string) kubernetes.Interface {
	t.Helper()
	scheme, codecs, gc := newTestGenericConfig()
	rules, _ := authz.(authorizer.RuleResolver)
	gc.Authentication.Authenticator = bearertoken.New(tokenfile.New(reviewTokens))
	gc.Authorization.Authorizer = authz
	s, err := gc.Complete(nil).New("reviews-test", genericapiserver.NewEmptyDelegate())
	if err != nil {
		t.Fatal(err)
	}
	if err := installReviewAPIs(s, scheme, codecs, gc.Authentication.Authenticator, authenticator.Audiences{apiAud}, gc.Authorization.Authorizer, rules); err != nil {
		t.Fatalf("installReviewAPIs: %v", err)
	}
	srv := httptest.NewServer(s.Handler)
	t.Cleanup(srv.Close)
	return func(token string) kubernetes.Interface {
		return kubernetes.NewForConfigOrDie(&restclient.Config{Host: srv.URL, BearerToken: token, QPS: 1000, Burst: 1000})
	}
}

// wantInvalid checks that err is a 422 naming the field.
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Errorf("error %v, want 422 Invalid on %s", err, field)
		return
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		t.Fatalf("error %T is not an API status", err)
	}
	var got []string
	if d := st.Status().Details; d != nil {
		for _, c := range d.Causes {
			if c.Field == field {
				return
			}
			got = append(got, c.Field)
		}
	}
	t.Errorf("422 causes %v lack %s: %v", got, field, err)
}

func TestReviewDiscovery(t *testing.T) {
	client := newReviewTestServer(t, authorizerfactory.NewAlwaysAllowAuthorizer())(aliceToken)
	for gv, want := range map[string]map[string]bool{
		"authentication.k8s.io/v1": {"tokenreviews": false, "selfsubjectreviews": false},
		"authorization.k8s.io/v1": {"subjectaccessreviews": false, "selfsubjectaccessreviews": false,
			"localsubjectaccessreviews": true, "selfsubjectrulesreviews": false},
	} {
		list, err := client.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			t.Fatalf("discovery of %s: %v", gv, err)
		}
		got := map[string]bool{}
		for _, r := range list.APIResources {
			got[r.Name] = r.Namespaced
			if !reflect.DeepEqual([]string(r.Verbs), []string{"create"}) {
				t.Errorf("%s %s verbs %v, want [create]", gv, r.Name, r.Verbs)
			}
			if r.SingularName != strings.TrimSuffix(r.Name, "s") {
				t.Errorf("%s %s singular name %q", gv, r.Name, r.SingularName)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s resources (namespaced) %v, want %v", gv, got, want)
		}
	}
}

func TestAuthenticationReviews(t *testing.T) {
	clients := newReviewTestServer(t, authorizerfactory.NewAlwaysAllowAuthorizer())
	alice := clients(aliceToken)
	ctx := context.Background()

	t.Run("selfsubjectreview", func(t *testing.T) {
		got, err := alice.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := authenticationv1.UserInfo{Username: "alice", UID: "alice-uid", Groups: []string{"dev", user.AllAuthenticated}}
		if !reflect.DeepEqual(got.Status.UserInfo, want) {
			t.Errorf("user %+v, want %+v", got.Status.UserInfo, want)
		}
		if got.CreationTimestamp.IsZero() {
			t.Errorf("no creationTimestamp")
		}
		got, err = clients(bobToken).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.UserInfo.Username != "bob" {
			t.Errorf("bob's review says %+v", got.Status.UserInfo)
		}
		_, err = clients("bogus").AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("with a bogus token: %v, want 401", err)
		}
	})

	review := func(t *testing.T, token string, auds ...string) *authenticationv1.TokenReview {
		t.Helper()
		got, err := alice.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: auds},
			// A status sent by the client is not kept.
			Status: authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "root"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenReview: %v", err)
		}
		return got
	}
	t.Run("tokenreview", func(t *testing.T) {
		got := review(t, bobToken)
		want := authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{apiAud},
			User: authenticationv1.UserInfo{Username: "bob", UID: "bob-uid", Groups: []string{user.AllAuthenticated}}}
		if !reflect.DeepEqual(got.Status, want) {
			t.Errorf("status %+v, want %+v", got.Status, want)
		}
		if got.Spec.Token != bobToken {
			t.Errorf("spec.token %q not echoed", got.Spec.Token)
		}

		got = review(t, "bogus")
		if got.Status.Authenticated || got.Status.User.Username != "" || got.Status.Error == "" {
			t.Errorf("bogus token: status %+v, want unauthenticated with an error", got.Status)
		}

		// The token is valid for the API audiences only.
		got = review(t, bobToken, "https://vault.example")
		if got.Status.Authenticated || got.Status.User.Username != "" {
			t.Errorf("other audience: status %+v, want unauthenticated", got.Status)
		}
		got = review(t, bobToken, "https://vault.example", apiAud)
		if !got.Status.Authenticated || got.Status.User.Username != "bob" || !reflect.DeepEqual(got.Status.Audiences, []string{apiAud}) {
			t.Errorf("audiences including the API's: status %+v, want bob for %s", got.Status, apiAud)
		}

		_, err := alice.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{}, metav1.CreateOptions{})
		if !apierrors.IsBadRequest(err) {
			t.Errorf("without a token: %v, want 400", err)
		}
	})
}

func TestAuthorizationReviewsAlwaysAllow(t *testing.T) {
	alice := newReviewTestServer(t, authorizerfactory.NewAlwaysAllowAuthorizer())(aliceToken)
	az := alice.AuthorizationV1()
	ctx := context.Background()
	deployments := &authorizationv1.ResourceAttributes{Namespace: "shop", Verb: "create", Group: "apps", Resource: "deployments"}

	t.Run("selfsubjectaccessreview", func(t *testing.T) {
		got, err := az.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: deployments}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Status.Allowed || got.Status.Denied {
			t.Errorf("status %+v, want allowed", got.Status)
		}
		_, err = az.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{}, metav1.CreateOptions{})
		wantInvalid(t, err, "spec")
		_, err = az.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			ObjectMeta: metav1.ObjectMeta{Name: "mine"},
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: deployments,
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/healthz", Verb: "get"}}}, metav1.CreateOptions{})
		wantInvalid(t, err, "spec")
		wantInvalid(t, err, "metadata")
	})

	t.Run("subjectaccessreview", func(t *testing.T) {
		got, err := az.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: "carol", NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}},
			// A status sent by the client is not kept.
			Status: authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "client"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Status.Allowed || got.Status.Denied || got.Status.Reason != "" {
			t.Errorf("status %+v, want allowed", got.Status)
		}
		_, err = az.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: deployments}}, metav1.CreateOptions{})
		wantInvalid(t, err, "spec.user")
		_, err = az.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{Groups: []string{"dev"}, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "list", Resource: "pods",
				FieldSelector: &authorizationv1.FieldSelectorAttributes{RawSelector: "spec.nodeName=a",
					Requirements: []metav1.FieldSelectorRequirement{{Key: "spec.nodeName", Operator: metav1.FieldSelectorOpIn, Values: []string{"a"}}}},
				LabelSelector: &authorizationv1.LabelSelectorAttributes{},
			}}}, metav1.CreateOptions{})
		wantInvalid(t, err, "spec.resourceAttributes.fieldSelector.rawSelector")
		wantInvalid(t, err, "spec.resourceAttributes.labelSelector.requirements")
	})

	t.Run("localsubjectaccessreview", func(t *testing.T) {
		got, err := az.LocalSubjectAccessReviews("shop").Create(ctx, &authorizationv1.LocalSubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: "carol", ResourceAttributes: deployments}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Status.Allowed || got.Namespace != "shop" {
			t.Errorf("review %+v, want allowed in shop", got)
		}
		_, err = az.LocalSubjectAccessReviews("other").Create(ctx, &authorizationv1.LocalSubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: "carol", ResourceAttributes: deployments}}, metav1.CreateOptions{})
		wantInvalid(t, err, "spec.resourceAttributes.namespace")
		_, err = az.LocalSubjectAccessReviews("shop").Create(ctx, &authorizationv1.LocalSubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: "carol", NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/", Verb: "get"}}}, metav1.CreateOptions{})
		wantInvalid(t, err, "spec.nonResourceAttributes")
	})

	t.Run("selfsubjectrulesreview", func(t *testing.T) {
		got, err := az.SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
			Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "shop"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := authorizationv1.SubjectRulesReviewStatus{
			ResourceRules:    []authorizationv1.ResourceRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}},
			NonResourceRules: []authorizationv1.NonResourceRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
		}
		if !reflect.DeepEqual(got.Status, want) {
			t.Errorf("status %+v, want %+v", got.Status, want)
		}
		_, err = az.SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{}, metav1.CreateOptions{})
		if !apierrors.IsBadRequest(err) {
			t.Errorf("without a namespace: %v, want 400", err)
		}
	})
}

// recordingAuthorizer allows get, denies delete and has no opinion on anything else (with an
// error for patch); it records what it is asked.
type recordingAuthorizer struct {
	mu    sync.Mutex
	asked []authorizer.Attributes
}

func (r *recordingAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The server asks too, about the review requests themselves.
	if a.GetAPIGroup() == authorizationv1.GroupName || a.GetAPIGroup() == authenticationv1.GroupName {
		return authorizer.DecisionAllow, "", nil
	}
	r.asked = append(r.asked, a)
	switch a.GetVerb() {
	case "get":
		return authorizer.DecisionAllow, "gets are fine", nil
	case "delete":
		return authorizer.DecisionDeny, "no deleting", nil
	case "patch":
		return authorizer.DecisionNoOpinion, "", errors.New("policy unavailable")
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func (r *recordingAuthorizer) last() authorizer.Attributes {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked[len(r.asked)-1]
}

func TestAuthorizationReviewsDecisions(t *testing.T) {
	rec := &recordingAuthorizer{}
	alice := newReviewTestServer(t, authorizer.AuthorizerFunc(rec.Authorize))(aliceToken)
	az := alice.AuthorizationV1()
	ctx := context.Background()

	self := func(t *testing.T, ra *authorizationv1.ResourceAttributes) authorizationv1.SubjectAccessReviewStatus {
		t.Helper()
		got, err := az.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: ra}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Status
	}
	for verb, want := range map[string]authorizationv1.SubjectAccessReviewStatus{
		"get":    {Allowed: true, Reason: "gets are fine"},
		"delete": {Denied: true, Reason: "no deleting"},
		"list":   {},
		"patch":  {EvaluationError: "policy unavailable"},
	} {
		if got := self(t, &authorizationv1.ResourceAttributes{Namespace: "shop", Verb: verb, Resource: "pods"}); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: status %+v, want %+v", verb, got, want)
		}
	}

	// The attributes of a self review: the requesting user, every version when none is named,
	// the selectors.
	self(t, &authorizationv1.ResourceAttributes{Namespace: "shop", Verb: "watch", Group: "apps", Resource: "deployments", Subresource: "scale", Name: "web",
		LabelSelector: &authorizationv1.LabelSelectorAttributes{RawSelector: "app=web"},
		FieldSelector: &authorizationv1.FieldSelectorAttributes{Requirements: []metav1.FieldSelectorRequirement{{Key: "metadata.name", Operator: metav1.FieldSelectorOpNotIn, Values: []string{"x"}}}}})
	a := rec.last()
	if a.GetUser().GetName() != "alice" || !reflect.DeepEqual(a.GetUser().GetGroups(), []string{"dev", user.AllAuthenticated}) ||
		a.GetNamespace() != "shop" || a.GetAPIGroup() != "apps" || a.GetAPIVersion() != "*" || a.GetResource() != "deployments" ||
		a.GetSubresource() != "scale" || a.GetName() != "web" || !a.IsResourceRequest() {
		t.Errorf("asked about %#v", a)
	}
	wantLabels, _ := labels.SelectorFromSet(labels.Set{"app": "web"}).Requirements()
	if got, err := a.GetLabelSelector(); err != nil || !reflect.DeepEqual(got, wantLabels) {
		t.Errorf("label selector %v (%v), want %v", got, err, wantLabels)
	}
	wantFields := fields.Requirements{{Field: "metadata.name", Operator: "!=", Value: "x"}}
	if got, err := a.GetFieldSelector(); err != nil || !reflect.DeepEqual(got, wantFields) {
		t.Errorf("field selector %v (%v), want %v", got, err, wantFields)
	}

	// Selectors that do not parse are ignored, and said so.
	got := self(t, &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods",
		FieldSelector: &authorizationv1.FieldSelectorAttributes{RawSelector: "a=b=c=("},
		LabelSelector: &authorizationv1.LabelSelectorAttributes{Requirements: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}},
			{Key: "tier", Operator: "Near", Values: []string{"x"}}}}})
	if want := "spec.resourceAttributes.fieldSelector ignored due to parse error; spec.resourceAttributes.labelSelector partially ignored due to parse error"; got.EvaluationError != want {
		t.Errorf("evaluationError %q, want %q", got.EvaluationError, want)
	}
	if reqs, _ := rec.last().GetLabelSelector(); len(reqs) != 1 || reqs[0].Key() != "app" {
		t.Errorf("label requirements %v, want app only", reqs)
	}

	// A subject review asks about the user it names, with extra.
	sar, err := az.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "carol", UID: "c-1", Groups: []string{"ops"}, Extra: map[string]authorizationv1.ExtraValue{"scopes": {"a"}},
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/healthz", Verb: "get"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !sar.Status.Allowed {
		t.Errorf("status %+v, want allowed", sar.Status)
	}
	a = rec.last()
	if u := a.GetUser(); u.GetName() != "carol" || u.GetUID() != "c-1" || !reflect.DeepEqual(u.GetGroups(), []string{"ops"}) ||
		!reflect.DeepEqual(u.GetExtra(), map[string][]string{"scopes": {"a"}}) || a.IsResourceRequest() || a.GetPath() != "/healthz" {
		t.Errorf("asked about %#v", a)
	}

	// An authorizer that cannot list rules answers an incomplete rules review.
	rules, err := az.SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "shop"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := rules.Status; !st.Incomplete || len(st.ResourceRules) != 0 || len(st.NonResourceRules) != 0 || st.EvaluationError == "" {
		t.Errorf("rules status %+v, want incomplete with an error", st)
	}
}

// TestTokenReviewAudienceAware covers an authenticator that knows the audiences of its tokens.
func TestTokenReviewAudienceAware(t *testing.T) {
	authn := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: &user.DefaultInfo{Name: "sa"}, Audiences: authenticator.Audiences{"vault"}}, true, nil
	})
	r := &tokenReviewREST{authn: authn, apiAudiences: authenticator.Audiences{apiAud}}
	create := func(auds ...string) (*authenticationv1.TokenReview, error) {
		obj, err := r.Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "t", Audiences: auds}}, nil, nil)
		if err != nil {
			return nil, err
		}
		return obj.(*authenticationv1.TokenReview), nil
	}
	got, err := create("vault")
	if err != nil || !got.Status.Authenticated || !reflect.DeepEqual(got.Status.Audiences, []string{"vault"}) {
		t.Errorf("for vault: %+v, %v", got, err)
	}
	// The authenticator answered for audiences that were not asked for.
	if _, err := create("other"); !apierrors.IsInternalError(err) {
		t.Errorf("for other: %v, want 500", err)
	}
}
