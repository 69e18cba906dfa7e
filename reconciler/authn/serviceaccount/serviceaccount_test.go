package serviceaccount

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// fakeGetter holds the objects tokens are bound to.
type fakeGetter struct {
	sas  map[string]*corev1.ServiceAccount
	pods map[string]*corev1.Pod
}

func (g *fakeGetter) ServiceAccount(namespace, name string) (*corev1.ServiceAccount, error) {
	if sa, ok := g.sas[namespace+"/"+name]; ok {
		return sa, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("serviceaccounts"), name)
}

func (g *fakeGetter) Pod(namespace, name string) (*corev1.Pod, error) {
	if pod, ok := g.pods[namespace+"/"+name]; ok {
		return pod, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
}

func testSA(ns, name, uid string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
}

func testPod(ns, name, uid, sa, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node}}
}

// fixture is a signer, and an authenticator of its tokens over a getter holding
// default/web (SA) and default/web-1 (pod on host-1).
type fixture struct {
	key    ed25519.PrivateKey
	signer *Signer
	getter *fakeGetter
	authn  *tokenAuthenticator
}

var apiAudiences = []string{DefaultIssuer, "flotilla"}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	g := &fakeGetter{
		sas:  map[string]*corev1.ServiceAccount{"default/web": testSA("default", "web", "sa-uid-1")},
		pods: map[string]*corev1.Pod{"default/web-1": testPod("default", "web-1", "pod-uid-1", "web", "host-1")},
	}
	s := NewSigner(key, "")
	return &fixture{key: key, signer: s, getter: g, authn: NewAuthenticator(s.PublicKey(), s.Issuer(), apiAudiences, g).(*tokenAuthenticator)}
}

func (f *fixture) issue(t *testing.T, podBound bool, auds []string, lifetime time.Duration) string {
	t.Helper()
	var pod *corev1.Pod
	if podBound {
		pod = f.getter.pods["default/web-1"]
	}
	tok, _, err := f.signer.Issue(f.getter.sas["default/web"], pod, auds, lifetime)
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	return tok
}

// payload decodes the unverified claims of a token.
func payload(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestIssueAndAuthenticatePodToken(t *testing.T) {
	f := newFixture(t)
	tok, expires, err := f.signer.Issue(f.getter.sas["default/web"], f.getter.pods["default/web-1"], []string{"flotilla", "vault"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(expires); d < 59*time.Minute || d > time.Hour {
		t.Errorf("expires in %v, want an hour", d)
	}

	claims := payload(t, tok)
	jti, _ := claims["jti"].(string)
	if jti == "" {
		t.Errorf("no jti: %v", claims)
	}
	if claims["iss"] != DefaultIssuer || claims["sub"] != "system:serviceaccount:default:web" {
		t.Errorf("iss/sub = %v/%v", claims["iss"], claims["sub"])
	}
	if got := claims["exp"].(float64) - claims["iat"].(float64); got != 3600 || claims["nbf"] != claims["iat"] {
		t.Errorf("exp-iat = %v, nbf %v, iat %v", got, claims["nbf"], claims["iat"])
	}
	if int64(claims["exp"].(float64)) != expires.Unix() {
		t.Errorf("exp %v, returned expiry %v", claims["exp"], expires)
	}
	wantK8s := map[string]any{
		"namespace":      "default",
		"serviceaccount": map[string]any{"name": "web", "uid": "sa-uid-1"},
		"pod":            map[string]any{"name": "web-1", "uid": "pod-uid-1"},
		"node":           map[string]any{"name": "host-1"},
	}
	if !reflect.DeepEqual(claims["kubernetes.io"], wantK8s) {
		t.Errorf("kubernetes.io = %#v\nwant %#v", claims["kubernetes.io"], wantK8s)
	}
	if !reflect.DeepEqual(claims["aud"], []any{"flotilla", "vault"}) {
		t.Errorf("aud = %v", claims["aud"])
	}

	resp, ok, err := f.authn.AuthenticateToken(context.Background(), tok)
	if err != nil || !ok {
		t.Fatalf("AuthenticateToken = %v, %v", ok, err)
	}
	if !reflect.DeepEqual([]string(resp.Audiences), []string{"flotilla"}) {
		t.Errorf("audiences = %v, want the intersection with the API audiences", resp.Audiences)
	}
	u := resp.User
	if u.GetName() != "system:serviceaccount:default:web" || u.GetUID() != "sa-uid-1" {
		t.Errorf("user %q uid %q", u.GetName(), u.GetUID())
	}
	if want := []string{"system:serviceaccounts", "system:serviceaccounts:default"}; !reflect.DeepEqual(u.GetGroups(), want) {
		t.Errorf("groups = %v, want %v", u.GetGroups(), want)
	}
	wantExtra := map[string][]string{
		"authentication.kubernetes.io/pod-name":      {"web-1"},
		"authentication.kubernetes.io/pod-uid":       {"pod-uid-1"},
		"authentication.kubernetes.io/node-name":     {"host-1"},
		"authentication.kubernetes.io/credential-id": {"JTI=" + jti},
	}
	if !reflect.DeepEqual(u.GetExtra(), wantExtra) {
		t.Errorf("extra = %v\nwant %v", u.GetExtra(), wantExtra)
	}
	for _, g := range u.GetGroups() {
		if g == user.AllAuthenticated {
			t.Errorf("the authenticator added %s itself", g)
		}
	}

	// Two tokens never share an ID.
	if jti2, _ := payload(t, f.issue(t, true, apiAudiences, time.Hour))["jti"].(string); jti2 == jti {
		t.Errorf("two tokens with jti %q", jti)
	}
}

func TestAuthenticateUnboundToken(t *testing.T) {
	f := newFixture(t)
	tok := f.issue(t, false, []string{DefaultIssuer}, time.Hour)
	if k := payload(t, tok)["kubernetes.io"].(map[string]any); k["pod"] != nil || k["node"] != nil {
		t.Errorf("unbound token names a pod or node: %v", k)
	}
	resp, ok, err := f.authn.AuthenticateToken(context.Background(), tok)
	if err != nil || !ok {
		t.Fatalf("AuthenticateToken = %v, %v", ok, err)
	}
	extra := resp.User.GetExtra()
	if len(extra) != 1 || !strings.HasPrefix(extra["authentication.kubernetes.io/credential-id"][0], "JTI=") {
		t.Errorf("extra = %v, want the credential ID only", extra)
	}
	// A pod not yet scheduled has no node to name.
	f.getter.pods["default/web-1"].Spec.NodeName = ""
	if k := payload(t, f.issue(t, true, apiAudiences, time.Hour))["kubernetes.io"].(map[string]any); k["node"] != nil || k["pod"] == nil {
		t.Errorf("token of an unscheduled pod: %v", k)
	}
}

func TestIssueRefusesIncompleteRequests(t *testing.T) {
	f := newFixture(t)
	sa := f.getter.sas["default/web"]
	for name, call := range map[string]func() error{
		"no audience": func() error { _, _, err := f.signer.Issue(sa, nil, nil, time.Hour); return err },
		"no lifetime": func() error { _, _, err := f.signer.Issue(sa, nil, apiAudiences, 0); return err },
		"no SA UID": func() error {
			_, _, err := f.signer.Issue(testSA("default", "web", ""), nil, apiAudiences, time.Hour)
			return err
		},
		"other ns pod": func() error {
			_, _, err := f.signer.Issue(sa, testPod("other", "p", "u", "web", ""), apiAudiences, time.Hour)
			return err
		},
		"bad key": func() error {
			_, _, err := NewSigner(ed25519.PrivateKey{1, 2}, "").Issue(sa, nil, apiAudiences, time.Hour)
			return err
		},
		"nil SA": func() error { _, _, err := f.signer.Issue(nil, nil, apiAudiences, time.Hour); return err },
		"pod without UID": func() error {
			_, _, err := f.signer.Issue(sa, testPod("default", "p", "", "web", ""), apiAudiences, time.Hour)
			return err
		},
	} {
		if err := call(); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
}

// Tokens that are not JWTs of this issuer are left to the other authenticators.
func TestAuthenticateIgnoresOtherTokens(t *testing.T) {
	f := newFixture(t)
	other := NewSigner(f.key, "https://issuer.example")
	foreign, _, err := other.Issue(f.getter.sas["default/web"], nil, apiAudiences, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"static token": "0123456789abcdef", "other issuer": foreign, "three dots": "a.b.c"} {
		resp, ok, err := f.authn.AuthenticateToken(context.Background(), tok)
		if resp != nil || ok || err != nil {
			t.Errorf("%s: AuthenticateToken = %v, %v, %v; want nil, false, nil", name, resp, ok, err)
		}
	}
}

func TestAuthenticateRefuses(t *testing.T) {
	now := time.Now()
	deleting := func(at time.Time) func(f *fixture) {
		return func(f *fixture) {
			ts := metav1.NewTime(at)
			f.getter.pods["default/web-1"].DeletionTimestamp = &ts
		}
	}
	cases := []struct {
		name    string
		issue   func(t *testing.T, f *fixture) string
		change  func(f *fixture)
		ctx     context.Context
		wantErr string
	}{
		{name: "expired", issue: func(t *testing.T, f *fixture) string {
			f.signer.now = func() time.Time { return now.Add(-2 * time.Hour) }
			return f.issue(t, true, apiAudiences, time.Hour)
		}, wantErr: "service account token has expired"},
		{name: "not valid yet", issue: func(t *testing.T, f *fixture) string {
			f.signer.now = func() time.Time { return now.Add(10 * time.Minute) }
			return f.issue(t, true, apiAudiences, time.Hour)
		}, wantErr: "service account token is not valid yet"},
		{name: "wrong audience", issue: func(t *testing.T, f *fixture) string {
			return f.issue(t, true, []string{"vault"}, time.Hour)
		}, wantErr: `audiences ["vault"] are invalid for the target audiences`},
		{name: "audience of the API, not of the TokenReview", issue: func(t *testing.T, f *fixture) string {
			return f.issue(t, true, []string{"flotilla"}, time.Hour)
		}, ctx: authenticator.WithAudiences(context.Background(), authenticator.Audiences{"vault"}), wantErr: "invalid for the target audiences"},
		{name: "deleted pod", change: func(f *fixture) { delete(f.getter.pods, "default/web-1") },
			wantErr: "service account token of pod default/web-1: the pod no longer exists"},
		{name: "re-created pod", change: func(f *fixture) {
			f.getter.pods["default/web-1"] = testPod("default", "web-1", "pod-uid-2", "web", "host-1")
		},
			wantErr: "service account token of pod default/web-1: the pod was re-created"},
		{name: "pod past its deletion", change: deleting(now.Add(-2 * time.Minute)),
			wantErr: "service account token of pod default/web-1: the pod has been deleted"},
		{name: "deleted service account", change: func(f *fixture) { delete(f.getter.sas, "default/web") },
			wantErr: "service account token of default/web: the service account no longer exists"},
		{name: "re-created service account", change: func(f *fixture) { f.getter.sas["default/web"] = testSA("default", "web", "sa-uid-2") },
			wantErr: "service account token of default/web: the service account was re-created"},
		{name: "other key", issue: func(t *testing.T, f *fixture) string {
			_, key, _ := ed25519.GenerateKey(rand.Reader)
			tok, _, err := NewSigner(key, "").Issue(f.getter.sas["default/web"], nil, apiAudiences, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}, wantErr: "invalid signature"},
		{name: "changed claims", issue: func(t *testing.T, f *fixture) string {
			parts := strings.Split(f.issue(t, true, apiAudiences, time.Hour), ".")
			claims := payload(t, strings.Join(parts, "."))
			claims["sub"] = "system:serviceaccount:kube-system:admin"
			b, _ := json.Marshal(claims)
			parts[1] = base64.RawURLEncoding.EncodeToString(b)
			return strings.Join(parts, ".")
		}, wantErr: "invalid signature"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			var tok string
			if c.issue != nil {
				tok = c.issue(t, f)
			} else {
				tok = f.issue(t, true, apiAudiences, time.Hour)
			}
			ctx := c.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			// The token is good until the change.
			if c.change != nil {
				if _, ok, err := f.authn.AuthenticateToken(ctx, tok); !ok || err != nil {
					t.Fatalf("before the change: %v, %v", ok, err)
				}
				c.change(f)
			}
			resp, ok, err := f.authn.AuthenticateToken(ctx, tok)
			if ok || resp != nil || err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("AuthenticateToken = %v, %v, %v; want an error with %q", resp, ok, err, c.wantErr)
			}
		})
	}
}

// Clocks may differ a little between hosts, and a pod still uses its token while it shuts down.
func TestAuthenticateToleratesSkewAndShutdown(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	f.signer.now = func() time.Time { return now.Add(-time.Hour - 30*time.Second) }
	expiredBySkew := f.issue(t, true, apiAudiences, time.Hour)
	f.signer.now = func() time.Time { return now.Add(30 * time.Second) }
	fromAhead := f.issue(t, true, apiAudiences, time.Hour)
	for name, tok := range map[string]string{"expired 30s ago": expiredBySkew, "issued 30s ahead": fromAhead} {
		if _, ok, err := f.authn.AuthenticateToken(context.Background(), tok); !ok || err != nil {
			t.Errorf("%s: %v, %v", name, ok, err)
		}
	}
	ts := metav1.NewTime(now.Add(20 * time.Second))
	f.getter.pods["default/web-1"].DeletionTimestamp = &ts
	if _, ok, err := f.authn.AuthenticateToken(context.Background(), fromAhead); !ok || err != nil {
		t.Errorf("pod shutting down: %v, %v", ok, err)
	}
}

func TestDeriveSigningKey(t *testing.T) {
	ca, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(ca)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(ca)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8PEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	sec1PEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})

	k1, err := DeriveSigningKey(pkcs8PEM)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := DeriveSigningKey(append([]byte(nil), pkcs8PEM...))
	if err != nil {
		t.Fatal(err)
	}
	k3, err := DeriveSigningKey(sec1PEM)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equal(k2) || !k1.Equal(k3) {
		t.Error("the same CA key derived different signing keys")
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherDER, _ := x509.MarshalPKCS8PrivateKey(other)
	k4, err := DeriveSigningKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: otherDER}))
	if err != nil {
		t.Fatal(err)
	}
	if k1.Equal(k4) {
		t.Error("two CA keys derived the same signing key")
	}
	// The signing key is not the CA key's own material.
	if strings.Contains(string(pkcs8), string(k1.Seed())) {
		t.Error("signing key seed found in the CA key")
	}

	// A token signed on one host verifies on another host of the site.
	g := &fakeGetter{sas: map[string]*corev1.ServiceAccount{"default/web": testSA("default", "web", "u")}}
	tok, _, err := NewSigner(k1, "").Issue(g.sas["default/web"], nil, apiAudiences, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := NewAuthenticator(NewSigner(k3, "").PublicKey(), "", apiAudiences, g).AuthenticateToken(context.Background(), tok); !ok || err != nil {
		t.Errorf("token of another host: %v, %v", ok, err)
	}

	for name, in := range map[string][]byte{"empty": nil, "certificate only": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}),
		"garbage key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}})} {
		if _, err := DeriveSigningKey(in); err == nil {
			t.Errorf("%s: derived a key", name)
		}
	}
}
