package gitsync

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/framework"
)

func hmacHex(token, body string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

func TestVerifyHook(t *testing.T) {
	const token, body = "s3cret", `{"ref":"refs/heads/main"}`
	good := hmacHex(token, body)
	forged := hmacHex("other", body)
	tests := []struct {
		name     string
		headers  map[string]string
		token    string
		provider string
		ok       bool
	}{
		{"github good", map[string]string{"X-Hub-Signature-256": "sha256=" + good}, token, ProviderGitHub, true},
		{"github forged", map[string]string{"X-Hub-Signature-256": "sha256=" + forged}, token, ProviderGitHub, false},
		{"github without prefix", map[string]string{"X-Hub-Signature-256": good}, token, ProviderGitHub, false},
		{"github not hex", map[string]string{"X-Hub-Signature-256": "sha256=zz"}, token, ProviderGitHub, false},
		{"gitea good", map[string]string{"X-Gitea-Signature": good}, token, ProviderGitea, true},
		{"gitea with a forged github header too", map[string]string{"X-Gitea-Signature": good, "X-Hub-Signature-256": "sha256=" + forged}, token, ProviderGitea, true},
		{"gitea forged", map[string]string{"X-Gitea-Signature": forged}, token, ProviderGitea, false},
		{"gitlab good", map[string]string{"X-Gitlab-Token": token}, token, ProviderGitLab, true},
		{"gitlab forged", map[string]string{"X-Gitlab-Token": "s3cre"}, token, ProviderGitLab, false},
		{"no signature", map[string]string{"X-GitHub-Event": "push"}, token, "", false},
		{"empty token configured", map[string]string{"X-Gitlab-Token": ""}, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			p, err := VerifyHook(h, []byte(body), []byte(tt.token))
			if (err == nil) != tt.ok || p != tt.provider {
				t.Errorf("VerifyHook = %q, %v; want %q ok=%v", p, err, tt.provider, tt.ok)
			}
		})
	}
}

func TestIsPushAndParseHookPath(t *testing.T) {
	push := []struct {
		provider, header, value string
		want                    bool
	}{
		{ProviderGitHub, "X-GitHub-Event", "push", true},
		{ProviderGitHub, "X-GitHub-Event", "pull_request", false},
		{ProviderGitea, "X-Gitea-Event", "push", true},
		{ProviderGitea, "X-GitHub-Event", "push", true},
		{ProviderGitLab, "X-Gitlab-Event", "Push Hook", true},
		{ProviderGitLab, "X-Gitlab-Event", "Tag Push Hook", true},
		{ProviderGitLab, "X-Gitlab-Event", "Merge Request Hook", false},
	}
	for _, tt := range push {
		h := http.Header{}
		h.Set(tt.header, tt.value)
		if _, got := IsPush(tt.provider, h); got != tt.want {
			t.Errorf("IsPush(%s, %s=%s) = %v", tt.provider, tt.header, tt.value, got)
		}
	}
	paths := []struct {
		path, ns, name string
		ok             bool
	}{
		{"/hooks/git/default/apps", "default", "apps", true},
		{"/hooks/git/default/", "", "", false},
		{"/hooks/git/default", "", "", false},
		{"/hooks/git/a/b/c", "", "", false},
		{"/api/v1/namespaces", "", "", false},
	}
	for _, tt := range paths {
		ns, name, ok := ParseHookPath(tt.path)
		if ns != tt.ns || name != tt.name || ok != tt.ok {
			t.Errorf("ParseHookPath(%s) = %s %s %v", tt.path, ns, name, ok)
		}
	}
}

// hookClient posts to the agent's API port with TLS only: no bearer token, as a git host would.
func hookClient(t *testing.T, e *env) (*http.Client, string) {
	t.Helper()
	cfg := e.a.RESTConfig()
	tlsCfg, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAFile: cfg.CAFile, CAData: cfg.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}, cfg.Host
}

func postHook(t *testing.T, c *http.Client, url, body string, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestWebhook: with a 10m interval, a push announced by a signed webhook (GitHub, GitLab,
// Gitea) is applied within 2 s; a forged signature gets 401 and nothing is fetched.
func TestWebhook(t *testing.T) {
	r := newRepo(t)
	head := r.commit(map[string]string{"ns.yaml": nsYAML})
	e := start(t)
	ctx := context.Background()
	const token = "hook-token"
	if _, err := e.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "hook"}, Data: map[string][]byte{WebhookTokenKey: []byte(token)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "flotilla.dev/v1alpha1", "kind": "GitSource",
		"metadata": map[string]any{"name": "apps", "namespace": "default"},
		"spec": map[string]any{"url": "file://" + r.dir, "interval": "10m", "serviceAccountName": testSA,
			"webhookSecretRef": map[string]any{"name": "hook"}},
	}}
	if _, err := e.cctx.Dynamic.Resource(GitSourceResource).Namespace("default").Create(ctx, gs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("first revision applied", e.readyAt(head))
	client, host := hookClient(t, e)
	url := host + "/hooks/git/default/apps"

	cases := []struct {
		provider string
		headers  func(body, id string) map[string]string
	}{
		{ProviderGitHub, func(body, id string) map[string]string { return githubHeaders(token, body, id) }},
		{ProviderGitLab, func(_, id string) map[string]string {
			return map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": id, "X-Gitlab-Token": token}
		}},
		{ProviderGitea, func(body, id string) map[string]string {
			return map[string]string{"X-Gitea-Event": "push", "X-Gitea-Delivery": id, "X-Gitea-Signature": hmacHex(token, body)}
		}},
	}
	for i, tc := range cases {
		name := fmt.Sprintf("hook-%d", i)
		head = r.commit(map[string]string{name + ".yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: demo\n"})
		body := `{"ref":"refs/heads/main","after":"` + head + `"}`
		pushed := time.Now()
		if code := postHook(t, client, url, body, tc.headers(body, name)); code != http.StatusAccepted {
			t.Fatalf("%s push: HTTP %d, want 202", tc.provider, code)
		}
		deadline := pushed.Add(2 * time.Second)
		for !e.readyAt(head)() {
			if time.Now().After(deadline) {
				t.Fatalf("%s push not applied within 2 s; status %+v", tc.provider, e.source().Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := e.client.CoreV1().ConfigMaps("demo").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: ConfigMap %s: %v", tc.provider, name, err)
		}
		t.Logf("%s push applied %v after the webhook", tc.provider, time.Since(pushed).Round(time.Millisecond))
	}

	t.Log("forged signatures: 401, logged, nothing fetched; a replay: 409")
	applied := head
	before := e.source().Annotations[RequestedAtAnnotation]
	head = r.commit(map[string]string{"forged.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: forged\n  namespace: demo\n"})
	body := `{"ref":"refs/heads/main","after":"` + head + `"}`
	forged := []map[string]string{
		{"X-GitHub-Event": "push", "X-GitHub-Delivery": "f-1", "X-Hub-Signature-256": "sha256=" + hmacHex("not-the-token", body)},
		{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": "f-2", "X-Gitlab-Token": "not-the-token"},
		{"X-Gitea-Event": "push", "X-Gitea-Delivery": "f-3", "X-Gitea-Signature": hmacHex("not-the-token", body)},
		{"X-GitHub-Event": "push", "X-GitHub-Delivery": "f-4"},
	}
	for _, h := range forged {
		if code := postHook(t, client, url, body, h); code != http.StatusUnauthorized {
			t.Errorf("forged %v: HTTP %d, want 401", h, code)
		}
	}
	if code := postHook(t, client, host+"/hooks/git/default/nosuchsource", body, cases[0].headers(body, "f-5")); code != http.StatusUnauthorized {
		t.Errorf("unknown source: HTTP %d, want 401", code)
	}
	// The first push again, as it was sent: the body and signature of a past delivery.
	if code := postHook(t, client, url, body, cases[0].headers(body, "hook-0")); code != http.StatusConflict {
		t.Errorf("replayed delivery: HTTP %d, want 409", code)
	}
	// The handler logs a rejection and answers before it writes anything; only an accepted
	// webhook writes the annotation, and that before it answers.
	if !strings.Contains(e.a.Logs(), "webhook rejected: bad signature") {
		t.Error("agent did not log the rejected webhook")
	}
	// With a 10m interval only the annotation requests a fetch; an accepted push was applied
	// within 2 s above, so a fetch a forged webhook caused would show within 3 s.
	e.holds(3*time.Second, "forged webhooks", func() string {
		gsNow := e.source()
		if gsNow.Annotations[RequestedAtAnnotation] != before {
			return "forged webhook changed " + RequestedAtAnnotation
		}
		if gsNow.Status.LastAttemptedRevision != "main@sha1:"+applied {
			return fmt.Sprintf("lastAttemptedRevision = %s after forged webhooks, want %s", gsNow.Status.LastAttemptedRevision, applied)
		}
		if e.exists(func() (metav1.Object, error) {
			return e.client.CoreV1().ConfigMaps("demo").Get(ctx, "forged", metav1.GetOptions{})
		}) {
			return "forged webhook caused an apply"
		}
		return ""
	})
}

func TestFetchHint(t *testing.T) {
	gs := &v1alpha1.GitSource{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}, Spec: v1alpha1.GitSourceSpec{SecretRef: &v1alpha1.LocalObjectReference{Name: "creds"}}}
	tests := []struct{ err, want string }{
		{"ssh: handshake failed: knownhosts: key mismatch", "not the one in known_hosts of Secret ns/creds"},
		{"ssh: handshake failed: knownhosts: key is unknown", "not listed in known_hosts of Secret ns/creds"},
		{"ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey]", "refused the identity of Secret ns/creds"},
		{"fetch main from file:///x: couldn't find remote ref refs/heads/main", "change spec.ref"},
		{"fetch main from file:///x: repository not found", "correct spec.url"},
		{"fetch main from https://h/x: authentication required", "set username/password"},
		{"dial tcp 127.0.0.1:1: connect: connection refused", ""},
	}
	for _, tt := range tests {
		got := fetchHint(gs, errors.New(tt.err))
		if (tt.want == "" && got != "") || !strings.Contains(got, tt.want) {
			t.Errorf("fetchHint(%q) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestWebhookInAgent: the deployed shape. An agent started from flags alone (--git-url,
// --git-webhook-secret-file, --webhook-port; its own gitsync leads) takes a signed push on
// its webhook port, with the API's certificate: exactly one fetch is requested and the push
// is applied at once; the same delivery again is refused. The port serves nothing else, and
// the API port still takes webhooks.
func TestWebhookInAgent(t *testing.T) {
	r := newRepo(t)
	head := r.commit(map[string]string{"ns.yaml": nsYAML})
	secretFile := filepath.Join(t.TempDir(), "webhook-token")
	if err := os.WriteFile(secretFile, []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := framework.FreePort(t)
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers=gitsync", "--git-url", "file://" + r.dir,
		"--git-webhook-secret-file", secretFile, "--webhook-port", strconv.Itoa(port)}})
	e := &env{t: t, a: a, client: a.Client()}
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(a.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	res := dyn.Resource(GitSourceResource).Namespace("kube-system")
	root := func() *v1alpha1.GitSource {
		u, err := res.Get(ctx, "root", metav1.GetOptions{})
		if err != nil {
			return &v1alpha1.GitSource{}
		}
		var gs v1alpha1.GitSource
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gs)
		return &gs
	}
	applied := func(rev string) func() bool {
		return func() bool { return root().Status.LastAppliedRevision == "main@sha1:"+rev }
	}
	waitUntil := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; status %+v", what, d, root().Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitUntil("root source applied", 60*time.Second, applied(head))
	waitUntil("root source given the webhook Secret", 10*time.Second, func() bool {
		ref := root().Spec.WebhookSecretRef
		return ref != nil && ref.Name == RootWebhookSecret
	})
	sec, err := e.client.CoreV1().Secrets("kube-system").Get(ctx, RootWebhookSecret, metav1.GetOptions{})
	if err != nil || string(sec.Data[WebhookTokenKey]) != "t0ken" {
		t.Fatalf("Secret kube-system/%s: %v, token %q", RootWebhookSecret, err, sec.Data[WebhookTokenKey])
	}
	if _, err := res.Patch(ctx, "root", types.MergePatchType, []byte(`{"spec":{"interval":"10m"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The spec change triggers a round of its own; let it finish before pushing.
	waitUntil("spec change observed", 30*time.Second, func() bool {
		gs := root()
		return gs.Status.ObservedGeneration == gs.Generation
	})

	client, apiURL := hookClient(t, e) // trusts the site CA, which signed the API's certificate
	hookURL := fmt.Sprintf("https://127.0.0.1:%d", port)
	before := root()
	w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	head = r.commit(map[string]string{"cm.yaml": newCMYAML})
	body := `{"ref":"refs/heads/main","after":"` + head + `"}`
	delivery := githubHeaders("t0ken", body, "agent-delivery-1")
	pushed := time.Now()
	if code := postHook(t, client, hookURL+"/hooks/git/kube-system/root", body, delivery); code != http.StatusAccepted {
		t.Fatalf("push to the webhook port: HTTP %d", code)
	}
	waitUntil("push applied", 2*time.Second, applied(head))
	t.Logf("push applied by the agent's gitsync %v after the webhook", time.Since(pushed).Round(time.Millisecond))
	if code := postHook(t, client, hookURL+"/hooks/git/kube-system/root", body, delivery); code != http.StatusConflict {
		t.Errorf("replayed delivery: HTTP %d, want 409", code)
	}
	for _, path := range []string{"/api/v1/namespaces/kube-system/secrets", "/readyz", "/hooks/gitx"} {
		resp, err := client.Get(hookURL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s on the webhook port: HTTP %d, want 404", path, resp.StatusCode)
		}
	}

	// Every change of the source up to now, in order: the annotation changed once.
	final := root().ResourceVersion
	changes, last := 0, before.Annotations[RequestedAtAnnotation]
	timeout := time.After(30 * time.Second)
	for seen := before.ResourceVersion; seen != final; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type == watch.Bookmark || u.GetName() != "root" {
				continue
			}
			seen = u.GetResourceVersion()
			if at := u.GetAnnotations()[RequestedAtAnnotation]; at != last {
				changes, last = changes+1, at
			}
		case <-timeout:
			t.Fatalf("no watch event of resourceVersion %s", final)
		}
	}
	if changes != 1 {
		t.Errorf("%s changed %d times, want once (one fetch requested)", RequestedAtAnnotation, changes)
	}

	// The API port serves the same handler: a new delivery there is taken.
	if err := SendPushEvent(ctx, client, apiURL, "kube-system", "root", "main", []byte("t0ken")); err != nil {
		t.Errorf("push to the API port: %v", err)
	}
}

const hookToken = "hook-t0ken"

// fakeClock is a clock the tests move.
type fakeClock struct{ now atomic.Pointer[time.Time] }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.set(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return c
}
func (c *fakeClock) Now() time.Time                           { return *c.now.Load() }
func (c *fakeClock) set(t time.Time)                          { c.now.Store(&t) }
func (c *fakeClock) add(d time.Duration)                      { c.set(c.Now().Add(d)) }
func (c *fakeClock) config() WebhookConfig                    { return WebhookConfig{Now: c.Now} }
func withClock(c *fakeClock, cfg WebhookConfig) WebhookConfig { cfg.Now = c.Now; return cfg }

// hookServer is a Webhook with fake API clients behind a real HTTP server. It counts the
// bytes of request bodies the handler read, and the bytes the server read from its
// connections (headers included).
type hookServer struct {
	t        *testing.T
	hook     *Webhook
	dyn      *dynamicfake.FakeDynamicClient
	kube     *kubefake.Clientset
	srv      *httptest.Server
	bodyRead atomic.Int64
	connRead atomic.Int64
}

func gitSourceObject(ns, name, secret string) *unstructured.Unstructured {
	spec := map[string]any{"url": "https://git.example.com/site.git"}
	if secret != "" {
		spec["webhookSecretRef"] = map[string]any{"name": secret}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "flotilla.dev/v1alpha1", "kind": "GitSource",
		"metadata": map[string]any{"namespace": ns, "name": name}, "spec": spec,
	}}
}

// newHookServer serves default/apps (token hookToken), default/nohook (no
// webhookSecretRef), default/nosecret (its Secret does not exist) and default/notoken (its
// Secret has no token).
func newHookServer(t *testing.T, cfg WebhookConfig) *hookServer {
	t.Helper()
	s := &hookServer{t: t, hook: NewWebhookWithConfig(cfg)}
	s.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GitSourceResource: "GitSourceList"},
		gitSourceObject("default", "apps", "hook"), gitSourceObject("default", "nohook", ""),
		gitSourceObject("default", "nosecret", "gone"), gitSourceObject("default", "notoken", "empty"))
	s.kube = kubefake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hook"}, Data: map[string][]byte{WebhookTokenKey: []byte(hookToken)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "empty"}, Data: map[string][]byte{"other": []byte("x")}})
	s.hook.setClients(s.kube, s.dyn)
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = countingBody{ReadCloser: r.Body, n: &s.bodyRead}
		s.hook.ServeHTTP(w, r)
	}))
	s.srv.Listener = countingListener{Listener: s.srv.Listener, n: &s.connRead}
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// answer is what the handler answered: status, headers without Date, body, and whether
// the connection is closed after it (Connection: close).
type answer struct {
	status int
	header http.Header
	body   string
	close  bool
}

func readAnswer(t *testing.T, resp *http.Response) answer {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Header.Del("Date")
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b), close: resp.Close}
}

// post sends body with headers from a client at localIP (127.0.0.1 when empty).
func (s *hookServer) post(path, body string, headers map[string]string, localIP string) answer {
	s.t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	if localIP != "" {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}}
		tr.DialContext = d.DialContext
	}
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	return readAnswer(s.t, resp)
}

// postLarge sends headers and then a body of size bytes (chunked, or with its
// Content-Length) over a raw connection, reading the answer while the body is still being
// written: as a client that does not wait for the server would.
func (s *hookServer) postLarge(path string, headers map[string]string, size int64, chunked bool) answer {
	s.t.Helper()
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		s.t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	var head bytes.Buffer
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: %s\r\n", path, s.srv.Listener.Addr())
	for k, v := range headers {
		fmt.Fprintf(&head, "%s: %s\r\n", k, v)
	}
	if chunked {
		head.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	} else {
		fmt.Fprintf(&head, "Content-Length: %d\r\n\r\n", size)
	}
	if _, err := conn.Write(head.Bytes()); err != nil {
		s.t.Fatal(err)
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for sent := int64(0); sent < size; sent += int64(len(chunk)) {
			var err error
			if chunked {
				_, err = fmt.Fprintf(conn, "%x\r\n%s\r\n", len(chunk), chunk)
			} else {
				_, err = conn.Write(chunk)
			}
			if err != nil {
				return // the server closed the connection
			}
		}
		if chunked {
			_, _ = io.WriteString(conn, "0\r\n\r\n")
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		s.t.Fatalf("read the answer: %v", err)
	}
	a := readAnswer(s.t, resp)
	conn.Close()
	<-written
	return a
}

func githubHeaders(token, body, delivery string) map[string]string {
	return map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + hmacHex(token, body)}
}

// TestWebhookRefusesBeforeReadingTheBody: what the headers already refuse is refused
// without reading the body: a 20 MiB body costs the server its headers.
func TestWebhookRefusesBeforeReadingTheBody(t *testing.T) {
	const size = 20 << 20
	const path = "/hooks/git/default/apps"
	forged := map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": "sha256=" + hmacHex("not-the-token", "x")}
	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
		chunked bool
		status  int
		message string
	}{
		{"bad signature, Content-Length 20 MiB", path, forged, false, http.StatusRequestEntityTooLarge, "at most 1048576"},
		{"no signature header", path, map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "d-1"}, true, http.StatusUnauthorized, "no X-Hub-Signature-256"},
		{"GitHub signature not hex", path, map[string]string{"X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": "sha256=" + strings.Repeat("z", 64)}, true, http.StatusUnauthorized, `"sha256=" followed by the 64 hex digits`},
		{"GitHub signature without sha256=", path, map[string]string{"X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": hmacHex(hookToken, "x")}, true, http.StatusUnauthorized, "X-Hub-Signature-256 must be"},
		{"GitHub signature too short", path, map[string]string{"X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": "sha256=" + hmacHex(hookToken, "x")[:62]}, true, http.StatusUnauthorized, "X-Hub-Signature-256 must be"},
		{"Gitea signature too long", path, map[string]string{"X-Gitea-Delivery": "d-1", "X-Gitea-Signature": hmacHex(hookToken, "x") + "00"}, true, http.StatusUnauthorized, "X-Gitea-Signature must be"},
		{"no delivery ID", path, map[string]string{"X-Hub-Signature-256": forged["X-Hub-Signature-256"]}, true, http.StatusBadRequest, "no X-GitHub-Delivery header"},
		{"no GitLab event UUID", path, map[string]string{"X-Gitlab-Token": hookToken}, true, http.StatusBadRequest, "no X-Gitlab-Event-UUID header"},
		{"delivery ID with spaces", path, map[string]string{"X-GitHub-Delivery": "a b", "X-Hub-Signature-256": forged["X-Hub-Signature-256"]}, true, http.StatusBadRequest, "printable characters"},
		{"GitLab wrong token", path, map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": "d-1", "X-Gitlab-Token": "not-the-token"}, true, http.StatusUnauthorized, "unauthorized"},
		{"GitLab, unknown source", "/hooks/git/default/nosuch", map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": "d-1", "X-Gitlab-Token": hookToken}, true, http.StatusUnauthorized, "unauthorized"},
		{"not a webhook path", "/hooks/git/default", forged, true, http.StatusNotFound, "want /hooks/git/<namespace>/<name>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newHookServer(t, WebhookConfig{})
			a := s.postLarge(tc.path, tc.headers, size, tc.chunked)
			if a.status != tc.status || !strings.Contains(a.body, tc.message) {
				t.Errorf("answer %d %q, want %d containing %q", a.status, a.body, tc.status, tc.message)
			}
			if n := s.bodyRead.Load(); n != 0 {
				t.Errorf("the handler read %d bytes of the body, want 0", n)
			}
			// The request line, the headers and what one buffered read takes in.
			if n := s.connRead.Load(); n > 64<<10 {
				t.Errorf("the server read %d bytes from the connection, want at most 64 KiB of a 20 MiB request", n)
			}
			if !a.close {
				t.Error("the connection is kept open with the body unread")
			}
		})
	}

	t.Run("bad signature, chunked 20 MiB", func(t *testing.T) {
		s := newHookServer(t, WebhookConfig{})
		a := s.postLarge(path, forged, size, true)
		if a.status != http.StatusRequestEntityTooLarge {
			t.Errorf("answer %d %q, want 413", a.status, a.body)
		}
		if n := s.bodyRead.Load(); n == 0 || n > MaxHookBody+1 {
			t.Errorf("the handler read %d bytes of the body, want at most %d", n, MaxHookBody+1)
		}
		if n := s.connRead.Load(); n > MaxHookBody+128<<10 {
			t.Errorf("the server read %d bytes from the connection, want about 1 MiB of a 20 MiB request", n)
		}
	})
}

// TestWebhookUnknownSourceAnswersLikeBadSignature: whether the source exists, names a
// Secret, or its Secret has a token, an unauthenticated caller gets the same answer, after
// the same reads.
func TestWebhookUnknownSourceAnswersLikeBadSignature(t *testing.T) {
	const body = `{"ref":"refs/heads/main"}`
	providers := map[string]func(id string) map[string]string{
		ProviderGitHub: func(id string) map[string]string { return githubHeaders("guess", body, id) },
		ProviderGitea: func(id string) map[string]string {
			return map[string]string{"X-Gitea-Event": "push", "X-Gitea-Delivery": id, "X-Gitea-Signature": hmacHex("guess", body)}
		},
		ProviderGitLab: func(id string) map[string]string {
			return map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": id, "X-Gitlab-Token": "guess"}
		},
	}
	for provider, headers := range providers {
		t.Run(provider, func(t *testing.T) {
			s := newHookServer(t, WebhookConfig{})
			var first answer
			var firstReads []string
			for i, source := range []string{"apps", "nosuch", "nohook", "nosecret", "notoken"} {
				s.dyn.ClearActions()
				s.kube.ClearActions()
				a := s.post("/hooks/git/default/"+source, body, headers(fmt.Sprintf("d-%d", i)), "")
				var reads []string
				for _, act := range append(s.dyn.Actions(), s.kube.Actions()...) {
					reads = append(reads, act.GetVerb()+" "+act.GetResource().Resource)
				}
				if i == 0 {
					first, firstReads = a, reads
					if a.status != http.StatusUnauthorized || a.body != "unauthorized\n" {
						t.Fatalf("bad signature: %d %q", a.status, a.body)
					}
					continue
				}
				if a.status != first.status || a.body != first.body || a.close != first.close || fmt.Sprint(a.header) != fmt.Sprint(first.header) {
					t.Errorf("%s answered %+v, a bad signature %+v", source, a, first)
				}
				if strings.Join(reads, ",") != strings.Join(firstReads, ",") {
					t.Errorf("%s made the reads %v, a bad signature %v", source, reads, firstReads)
				}
			}
			if strings.Join(firstReads, ",") != "get gitsources,get secrets" {
				t.Errorf("reads %v", firstReads)
			}
		})
	}
}

func requestedAt(t *testing.T, dyn dynamic.Interface, name string) string {
	t.Helper()
	u, err := dyn.Resource(GitSourceResource).Namespace("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u.GetAnnotations()[RequestedAtAnnotation]
}

// TestWebhookReplay: an authenticated delivery requests a fetch once; the same delivery ID
// again is refused with 409 and requests nothing, for ReplayWindow.
func TestWebhookReplay(t *testing.T) {
	clock := newFakeClock()
	s := newHookServer(t, clock.config())
	const body = `{"ref":"refs/heads/main"}`
	for _, tc := range []struct {
		provider string
		headers  func(id string) map[string]string
	}{
		{ProviderGitHub, func(id string) map[string]string { return githubHeaders(hookToken, body, id) }},
		{ProviderGitea, func(id string) map[string]string {
			return map[string]string{"X-Gitea-Event": "push", "X-Gitea-Delivery": id, "X-Gitea-Signature": hmacHex(hookToken, body)}
		}},
		{ProviderGitLab, func(id string) map[string]string {
			return map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": id, "X-Gitlab-Token": hookToken}
		}},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			id := tc.provider + "-delivery"
			clock.add(time.Second)
			if a := s.post("/hooks/git/default/apps", body, tc.headers(id), ""); a.status != http.StatusAccepted || a.body != "fetch requested\n" {
				t.Fatalf("push: %d %q", a.status, a.body)
			}
			at := requestedAt(t, s.dyn, "apps")
			if at != clock.Now().Format(time.RFC3339Nano) {
				t.Fatalf("%s = %q, want the time of the push", RequestedAtAnnotation, at)
			}
			clock.add(time.Hour)
			a := s.post("/hooks/git/default/apps", body, tc.headers(id), "")
			if a.status != http.StatusConflict || !strings.Contains(a.body, "delivery "+id+" was already received") {
				t.Errorf("replay: %d %q, want 409", a.status, a.body)
			}
			if got := requestedAt(t, s.dyn, "apps"); got != at {
				t.Errorf("the replay requested a fetch: %s %q -> %q", RequestedAtAnnotation, at, got)
			}
			if a := s.post("/hooks/git/default/apps", body, tc.headers(id+"-2"), ""); a.status != http.StatusAccepted {
				t.Errorf("next delivery: %d %q", a.status, a.body)
			}
			clock.add(24 * time.Hour)
			if a := s.post("/hooks/git/default/apps", body, tc.headers(id), ""); a.status != http.StatusAccepted {
				t.Errorf("the same ID after the replay window: %d %q, want 202", a.status, a.body)
			}
		})
	}

	t.Run("a forged delivery does not take its ID", func(t *testing.T) {
		if a := s.post("/hooks/git/default/apps", body, githubHeaders("guess", body, "taken?"), ""); a.status != http.StatusUnauthorized {
			t.Fatalf("forged: %d", a.status)
		}
		if a := s.post("/hooks/git/default/apps", body, githubHeaders(hookToken, body, "taken?"), ""); a.status != http.StatusAccepted {
			t.Errorf("the real delivery after a forged one with its ID: %d %q", a.status, a.body)
		}
	})

	t.Run("a delivery that did not take effect may come again", func(t *testing.T) {
		s.dyn.PrependReactor("patch", "gitsources", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("etcd is away")
		})
		if a := s.post("/hooks/git/default/apps", body, githubHeaders(hookToken, body, "retried"), ""); a.status != http.StatusServiceUnavailable {
			t.Fatalf("with the API failing: %d %q", a.status, a.body)
		}
		s.dyn.ReactionChain = s.dyn.ReactionChain[1:]
		if a := s.post("/hooks/git/default/apps", body, githubHeaders(hookToken, body, "retried"), ""); a.status != http.StatusAccepted {
			t.Errorf("the git server's retry: %d %q, want 202", a.status, a.body)
		}
	})

	t.Run("ping and other events", func(t *testing.T) {
		h := githubHeaders(hookToken, body, "ping-1")
		h["X-GitHub-Event"] = "ping"
		if a := s.post("/hooks/git/default/apps", body, h, ""); a.status != http.StatusOK || a.body != "pong\n" {
			t.Errorf("ping: %d %q", a.status, a.body)
		}
		h = githubHeaders(hookToken, body, "pr-1")
		h["X-GitHub-Event"] = "pull_request"
		if a := s.post("/hooks/git/default/apps", body, h, ""); a.status != http.StatusAccepted || !strings.Contains(a.body, "not a push") {
			t.Errorf("pull_request: %d %q", a.status, a.body)
		}
	})
}

func TestDeliveryLog(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := newDeliveryLog(time.Hour, 3)
	for i, id := range []string{"a", "b", "c"} {
		if !d.add(id, start.Add(time.Duration(i)*time.Minute)) {
			t.Fatalf("add %s", id)
		}
	}
	if d.add("b", start.Add(10*time.Minute)) {
		t.Error("b added twice")
	}
	// Full: the oldest, a, is forgotten for d.
	if !d.add("d", start.Add(11*time.Minute)) || d.order.Len() != 3 || len(d.byID) != 3 {
		t.Fatalf("add d: %d entries", d.order.Len())
	}
	if !d.add("a", start.Add(12*time.Minute)) {
		t.Error("a still remembered past the bound")
	}
	// Past the window everything is forgotten.
	if !d.add("d", start.Add(12*time.Minute+time.Hour)) || d.order.Len() != 1 {
		t.Errorf("after the window: %d entries", d.order.Len())
	}
}

// TestWebhookRateLimit: each client address has its bucket; an empty one answers 429 with
// Retry-After, before anything else is done.
func TestWebhookRateLimit(t *testing.T) {
	clock := newFakeClock()
	s := newHookServer(t, withClock(clock, WebhookConfig{Rate: rate.Every(30 * time.Second), Burst: 3}))
	const body = `{"ref":"refs/heads/main"}`
	for i := range 3 {
		if a := s.post("/hooks/git/default/apps", body, githubHeaders(hookToken, body, fmt.Sprintf("r-%d", i)), ""); a.status != http.StatusAccepted {
			t.Fatalf("request %d: %d %q", i, a.status, a.body)
		}
	}
	s.dyn.ClearActions()
	a := s.post("/hooks/git/default/apps", body, githubHeaders(hookToken, body, "r-3"), "")
	if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "30" {
		t.Fatalf("4th request: %d Retry-After %q %q, want 429 after 30", a.status, a.header.Get("Retry-After"), a.body)
	}
	if len(s.dyn.Actions()) != 0 {
		t.Errorf("a limited request reached the API: %v", s.dyn.Actions())
	}
	if a := s.post("/hooks/git/default/apps", "", nil, ""); a.status != http.StatusTooManyRequests {
		t.Errorf("an unsigned request is limited too: %d", a.status)
	}
	if a := s.post("/hooks/git/default/apps", body, githubHeaders(hookToken, body, "other-client"), "127.0.0.2"); a.status != http.StatusAccepted {
		t.Errorf("another address: %d %q", a.status, a.body)
	}
	clock.add(30 * time.Second)
	if a := s.post("/hooks/git/default/apps", body, githubHeaders(hookToken, body, "r-4"), ""); a.status != http.StatusAccepted {
		t.Errorf("after Retry-After: %d %q", a.status, a.body)
	}
}

func TestClientLimits(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newClientLimits(1, 2, 2) // refilled after 2 s idle
	if c.reserve("a", start) != 0 || c.reserve("a", start) != 0 || c.reserve("a", start) == 0 {
		t.Fatal("a: burst of 2")
	}
	c.reserve("b", start)
	c.reserve("c", start) // over the bound: a, the least recently seen, is dropped
	if len(c.byKey) != 2 || c.byKey["a"] != nil {
		t.Errorf("clients %v, want b and c", c.byKey)
	}
	c.reserve("d", start.Add(3*time.Second)) // b and c are idle: dropped
	if len(c.byKey) != 1 || c.order.Len() != 1 {
		t.Errorf("%d clients after idling, want 1", len(c.byKey))
	}

	for addr, want := range map[string]string{
		"192.0.2.1:443":              "192.0.2.1",
		"[::ffff:192.0.2.1]:443":     "192.0.2.1",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff::1]:80":    "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":          "fe80::/64",
		"not an address":             "not an address",
	} {
		if got := clientKey(addr); got != want {
			t.Errorf("clientKey(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestSendPushEvent: each event is signed and has a delivery ID of its own, so the same
// push sent twice is two deliveries.
func TestSendPushEvent(t *testing.T) {
	s := newHookServer(t, WebhookConfig{})
	for range 2 {
		if err := SendPushEvent(context.Background(), s.srv.Client(), s.srv.URL, "default", "apps", "main", []byte(hookToken)); err != nil {
			t.Fatal(err)
		}
	}
	if err := SendPushEvent(context.Background(), s.srv.Client(), s.srv.URL, "default", "apps", "main", []byte("wrong")); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong token: %v", err)
	}
}

func TestWebhookNotReady(t *testing.T) {
	w := NewWebhook()
	srv := httptest.NewServer(w)
	defer srv.Close()
	err := SendPushEvent(context.Background(), srv.Client(), srv.URL, "default", "apps", "main", []byte(hookToken))
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("before SetConfig: %v, want 503", err)
	}
}

func TestEnsureRootWebhook(t *testing.T) {
	ctx := context.Background()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GitSourceResource: "GitSourceList"})
	kube := kubefake.NewClientset()
	if err := EnsureRootWebhook(ctx, kube, dyn, []byte("t1")); err == nil || !strings.Contains(err.Error(), "kube-system/root") {
		t.Errorf("without the root source: %v", err)
	}
	if err := EnsureRootSource(ctx, dyn, "https://git.example.com/site.git", "main", ""); err != nil {
		t.Fatal(err)
	}
	check := func(token string) {
		t.Helper()
		sec, err := kube.CoreV1().Secrets("kube-system").Get(ctx, RootWebhookSecret, metav1.GetOptions{})
		if err != nil || string(sec.Data[WebhookTokenKey]) != token {
			t.Fatalf("Secret kube-system/%s: %v %q, want token %q", RootWebhookSecret, err, sec.Data, token)
		}
		u, err := dyn.Resource(GitSourceResource).Namespace("kube-system").Get(ctx, "root", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ref, _, _ := unstructured.NestedString(u.Object, "spec", "webhookSecretRef", "name"); ref != RootWebhookSecret {
			t.Fatalf("webhookSecretRef %q", ref)
		}
	}
	for _, token := range []string{"t1", "t1", "t2"} {
		if err := EnsureRootWebhook(ctx, kube, dyn, []byte(token)); err != nil {
			t.Fatal(err)
		}
		check(token)
	}
	// A webhookSecretRef changed by hand goes back: the flag owns it.
	if _, err := dyn.Resource(GitSourceResource).Namespace("kube-system").Patch(ctx, "root", types.MergePatchType,
		[]byte(`{"spec":{"webhookSecretRef":{"name":"other"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := EnsureRootWebhook(ctx, kube, dyn, []byte("t2")); err != nil {
		t.Fatal(err)
	}
	check("t2")
	if err := EnsureRootWebhook(ctx, kube, dyn, nil); err == nil {
		t.Error("an empty token was stored")
	}
}
