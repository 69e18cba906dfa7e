package apiserver

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/reconciler/authn/serviceaccount"
)

// objectGetter is a serviceaccount.Getter over maps that a test changes.
type objectGetter struct {
	mu   sync.Mutex
	sas  map[string]*corev1.ServiceAccount
	pods map[string]*corev1.Pod
}

func (g *objectGetter) ServiceAccount(namespace, name string) (*corev1.ServiceAccount, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if sa, ok := g.sas[namespace+"/"+name]; ok {
		return sa.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("serviceaccount"), name)
}

func (g *objectGetter) Pod(namespace, name string) (*corev1.Pod, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if pod, ok := g.pods[namespace+"/"+name]; ok {
		return pod.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("pod"), name)
}

func (g *objectGetter) deletePod(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.pods, key)
}

// serviceAccountsREST serves GET of the getter's ServiceAccounts: the parent resource of
// serviceaccounts/token, and something a token's holder can read.
type serviceAccountsREST struct{ g *objectGetter }

func (r *serviceAccountsREST) New() runtime.Object     { return &corev1.ServiceAccount{} }
func (r *serviceAccountsREST) Destroy()                {}
func (r *serviceAccountsREST) NamespaceScoped() bool   { return true }
func (r *serviceAccountsREST) GetSingularName() string { return "serviceaccount" }
func (r *serviceAccountsREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return r.g.ServiceAccount(genericapirequest.NamespaceValue(ctx), name)
}

// clientWarnings records the warnings a client receives.
type clientWarnings struct {
	mu   sync.Mutex
	list []string
}

func (w *clientWarnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

const tokenTestAdmin = "admin-token"

// tokenTestServer is an in-process API server with serviceaccounts/token and ServiceAccount
// token authentication, on the objects of getter.
type tokenTestServer struct {
	getter   *objectGetter
	warnings *clientWarnings
	url      string
	mu       sync.Mutex
	// users are the users of the requests, in order.
	users []user.Info
}

func newTokenTestServer(t *testing.T, ti *TokenIssuer) *tokenTestServer {
	t.Helper()
	ts := &tokenTestServer{getter: ti.Getter.(*objectGetter), warnings: &clientWarnings{}}
	scheme, codecs, gc := newTestGenericConfig()
	saAuth := serviceaccount.NewAuthenticator(ti.Signer.PublicKey(), ti.Signer.Issuer(), ti.APIAudiences, ti.Getter)
	admin := map[string]*user.DefaultInfo{tokenTestAdmin: {Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}}
	gc.Authentication.Authenticator = bearertoken.New(tokenunion.New(tokenfile.New(admin), saAuth))
	gc.Authentication.APIAudiences = ti.APIAudiences
	gc.Authorization.Authorizer = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.users = append(ts.users, a.GetUser())
		return authorizer.DecisionAllow, "", nil
	})
	s, err := gc.Complete(nil).New("tokenrequest-test", genericapiserver.NewEmptyDelegate())
	if err != nil {
		t.Fatal(err)
	}
	info := genericapiserver.NewDefaultAPIGroupInfo("", scheme, metav1.ParameterCodec, codecs)
	info.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{
		"serviceaccounts":       &serviceAccountsREST{g: ts.getter},
		"serviceaccounts/token": tokenRequestStorage(ti),
	}
	if err := s.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &info); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler)
	t.Cleanup(srv.Close)
	ts.url = srv.URL
	return ts
}

func (ts *tokenTestServer) client(token string) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(&restclient.Config{Host: ts.url, BearerToken: token, QPS: 1000, Burst: 1000, WarningHandler: ts.warnings})
}

// whoami reads ServiceAccount default/web with token and returns who the server took it for.
func (ts *tokenTestServer) whoami(t *testing.T, token string) (user.Info, error) {
	t.Helper()
	if _, err := ts.client(token).CoreV1().ServiceAccounts("default").Get(context.Background(), "web", metav1.GetOptions{}); err != nil {
		return nil, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.users[len(ts.users)-1], nil
}

func newTestTokenIssuer(t *testing.T) *TokenIssuer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sa := func(ns, name, uid string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
	}
	pod := func(name, uid, sa, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
			Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node}}
	}
	g := &objectGetter{
		sas: map[string]*corev1.ServiceAccount{"default/web": sa("default", "web", "web-uid"), "default/db": sa("default", "db", "db-uid")},
		pods: map[string]*corev1.Pod{
			"default/web-1": pod("web-1", "web-1-uid", "web", "host-1"),
			"default/db-0":  pod("db-0", "db-0-uid", "db", "host-2"),
		},
	}
	return &TokenIssuer{Signer: serviceaccount.NewSigner(key, ""), Getter: g, APIAudiences: []string{serviceaccount.DefaultIssuer}}
}

func TestTokenRequest(t *testing.T) {
	ts := newTokenTestServer(t, newTestTokenIssuer(t))
	admin := ts.client(tokenTestAdmin).CoreV1().ServiceAccounts("default")
	ctx := context.Background()

	t.Run("defaults", func(t *testing.T) {
		start := time.Now()
		tr, err := admin.CreateToken(ctx, "web", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tr.Status.Token == "" {
			t.Fatal("no token")
		}
		if exp := tr.Status.ExpirationTimestamp.Sub(start); exp < 59*time.Minute || exp > time.Hour+time.Second {
			t.Errorf("token expires in %v, want an hour", exp)
		}
		if tr.Spec.ExpirationSeconds == nil || *tr.Spec.ExpirationSeconds != 3600 ||
			!reflect.DeepEqual(tr.Spec.Audiences, []string{serviceaccount.DefaultIssuer}) {
			t.Errorf("spec %+v, want 3600 seconds for the API audiences", tr.Spec)
		}
		if tr.Name != "web" || tr.Namespace != "default" {
			t.Errorf("request %s/%s", tr.Namespace, tr.Name)
		}
		u, err := ts.whoami(t, tr.Status.Token)
		if err != nil {
			t.Fatalf("request with the token: %v", err)
		}
		if u.GetName() != "system:serviceaccount:default:web" || u.GetUID() != "web-uid" || u.GetExtra()["authentication.kubernetes.io/pod-name"] != nil {
			t.Errorf("token authenticates %q (%s) extra %v", u.GetName(), u.GetUID(), u.GetExtra())
		}
	})

	t.Run("bound to a pod", func(t *testing.T) {
		tr, err := admin.CreateToken(ctx, "web", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web-1", UID: "web-1-uid"},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u, err := ts.whoami(t, tr.Status.Token)
		if err != nil {
			t.Fatalf("request with the token: %v", err)
		}
		extra := u.GetExtra()
		if !reflect.DeepEqual(extra["authentication.kubernetes.io/pod-name"], []string{"web-1"}) ||
			!reflect.DeepEqual(extra["authentication.kubernetes.io/pod-uid"], []string{"web-1-uid"}) ||
			!reflect.DeepEqual(extra["authentication.kubernetes.io/node-name"], []string{"host-1"}) {
			t.Errorf("extra %v", extra)
		}
		// The pod is gone: so is its token.
		ts.getter.deletePod("default/web-1")
		if _, err := ts.whoami(t, tr.Status.Token); !apierrors.IsUnauthorized(err) {
			t.Errorf("request with the token of a deleted pod: %v, want 401", err)
		}
	})

	t.Run("audiences", func(t *testing.T) {
		tr, err := admin.CreateToken(ctx, "web", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(tr.Spec.Audiences, []string{"vault"}) {
			t.Errorf("audiences %v", tr.Spec.Audiences)
		}
		if _, err := ts.whoami(t, tr.Status.Token); !apierrors.IsUnauthorized(err) {
			t.Errorf("request with a token for vault: %v, want 401", err)
		}
	})

	t.Run("lifetime capped", func(t *testing.T) {
		start := time.Now()
		tr, err := admin.CreateToken(ctx, "web", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: new(int64(72 * 3600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *tr.Spec.ExpirationSeconds != 48*3600 {
			t.Errorf("expirationSeconds %d, want 48h", *tr.Spec.ExpirationSeconds)
		}
		if exp := tr.Status.ExpirationTimestamp.Sub(start); exp < 47*time.Hour || exp > 48*time.Hour+time.Second {
			t.Errorf("token expires in %v, want 48h", exp)
		}
		ts.warnings.mu.Lock()
		defer ts.warnings.mu.Unlock()
		if !reflect.DeepEqual(ts.warnings.list, []string{"requested expiration of 259200 seconds shortened to 172800 seconds"}) {
			t.Errorf("warnings %q", ts.warnings.list)
		}
	})

	refused := []struct {
		name    string
		sa      string
		spec    authenticationv1.TokenRequestSpec
		is      func(error) bool
		wantMsg string
	}{
		{"too short", "web", authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(60))}, apierrors.IsInvalid,
			"spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"},
		{"missing service account", "nobody", authenticationv1.TokenRequestSpec{}, apierrors.IsNotFound, `serviceaccounts "nobody" not found`},
		{"not a pod", "web", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: "s"}},
			apierrors.IsBadRequest, "only Pod (apiVersion v1) is supported"},
		{"pod of another group", "web", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "example.com/v1", Name: "web-1"}},
			apierrors.IsBadRequest, "only Pod (apiVersion v1) is supported"},
		{"missing pod", "web", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web-9"}},
			apierrors.IsInvalid, "spec.boundObjectRef.name: Invalid value: \"web-9\": no pod web-9 in namespace default"},
		{"pod of another service account", "web", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "db-0"}},
			apierrors.IsBadRequest, `cannot bind token for serviceaccount "web" to pod "db-0", which runs as serviceaccount "db"`},
		{"re-created pod", "db", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "db-0", UID: "old-uid"}},
			apierrors.IsInvalid, "spec.boundObjectRef.uid: Invalid value: \"old-uid\": pod db-0 has UID db-0-uid"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			tr, err := admin.CreateToken(ctx, c.sa, &authenticationv1.TokenRequest{Spec: c.spec}, metav1.CreateOptions{})
			if !c.is(err) || !strings.Contains(err.Error(), c.wantMsg) {
				t.Errorf("CreateToken = %v, %v; want an error with %q", tr, err, c.wantMsg)
			}
		})
	}
}

// The shortest lifetime is the configured one, and the refusal says so.
func TestTokenRequestMinLifetime(t *testing.T) {
	ti := newTestTokenIssuer(t)
	ti.MinLifetime = 2 * time.Minute
	ts := newTokenTestServer(t, ti)
	admin := ts.client(tokenTestAdmin).CoreV1().ServiceAccounts("default")
	_, err := admin.CreateToken(context.Background(), "web", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: new(int64(119))}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "may not specify a duration less than 2 minutes") {
		t.Errorf("119s: %v", err)
	}
	if _, err := admin.CreateToken(context.Background(), "web", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: new(int64(120))}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("120s: %v", err)
	}
}

func TestSpelledDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{10 * time.Minute: "10 minutes", time.Minute: "1 minute", time.Hour: "1 hour",
		90 * time.Second: "90 seconds", 48 * time.Hour: "48 hours", time.Second: "1 second"} {
		if got := spelledDuration(d); got != want {
			t.Errorf("spelledDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
