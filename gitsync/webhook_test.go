package gitsync

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

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
		"spec": map[string]any{"url": "file://" + r.dir, "interval": "10m",
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
		headers  func(body string) map[string]string
	}{
		{ProviderGitHub, func(body string) map[string]string {
			return map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hmacHex(token, body)}
		}},
		{ProviderGitLab, func(string) map[string]string {
			return map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": token}
		}},
		{ProviderGitea, func(body string) map[string]string {
			return map[string]string{"X-Gitea-Event": "push", "X-Gitea-Signature": hmacHex(token, body)}
		}},
	}
	for i, tc := range cases {
		name := fmt.Sprintf("hook-%d", i)
		head = r.commit(map[string]string{name + ".yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: demo\n"})
		body := `{"ref":"refs/heads/main","after":"` + head + `"}`
		pushed := time.Now()
		if code := postHook(t, client, url, body, tc.headers(body)); code != http.StatusAccepted {
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

	t.Log("forged signatures: 401, logged, nothing fetched")
	applied := head
	before := e.source().Annotations[RequestedAtAnnotation]
	head = r.commit(map[string]string{"forged.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: forged\n  namespace: demo\n"})
	body := `{"ref":"refs/heads/main","after":"` + head + `"}`
	forged := []map[string]string{
		{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hmacHex("not-the-token", body)},
		{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "not-the-token"},
		{"X-Gitea-Event": "push", "X-Gitea-Signature": hmacHex("not-the-token", body)},
		{"X-GitHub-Event": "push"},
	}
	for _, h := range forged {
		if code := postHook(t, client, url, body, h); code != http.StatusUnauthorized {
			t.Errorf("forged %v: HTTP %d, want 401", h, code)
		}
	}
	if code := postHook(t, client, host+"/hooks/git/default/nosuchsource", body, cases[0].headers(body)); code != http.StatusUnauthorized {
		t.Errorf("unknown source: HTTP %d, want 401", code)
	}
	time.Sleep(3 * time.Second)
	gsNow := e.source()
	if gsNow.Annotations[RequestedAtAnnotation] != before {
		t.Errorf("forged webhook changed %s", RequestedAtAnnotation)
	}
	if gsNow.Status.LastAttemptedRevision != "main@sha1:"+applied {
		t.Errorf("lastAttemptedRevision = %s after forged webhooks, want %s", gsNow.Status.LastAttemptedRevision, applied)
	}
	if e.exists(func() (metav1.Object, error) {
		return e.client.CoreV1().ConfigMaps("demo").Get(ctx, "forged", metav1.GetOptions{})
	}) {
		t.Error("forged webhook caused an apply")
	}
	if !strings.Contains(e.a.Logs(), "webhook rejected: bad signature") {
		t.Error("agent did not log the rejected webhook")
	}
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

// TestWebhookInAgent: the deployed shape: the agent's own gitsync (leader) follows the root
// source of --git-url, and a push webhook to the agent's API port applies at once.
func TestWebhookInAgent(t *testing.T) {
	r := newRepo(t)
	head := r.commit(map[string]string{"ns.yaml": nsYAML})
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers=gitsync", "--git-url", "file://" + r.dir}})
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
	if _, err := e.client.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "git-webhook"}, Data: map[string][]byte{WebhookTokenKey: []byte("t0ken")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"interval":"10m","webhookSecretRef":{"name":"git-webhook"}}}`)
	if _, err := res.Patch(ctx, "root", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The spec change triggers a round of its own; let it finish before pushing.
	waitUntil("spec change observed", 30*time.Second, func() bool {
		gs := root()
		return gs.Status.ObservedGeneration == gs.Generation
	})
	head = r.commit(map[string]string{"cm.yaml": newCMYAML})
	client, host := hookClient(t, e)
	body := `{"ref":"refs/heads/main"}`
	pushed := time.Now()
	if code := postHook(t, client, host+"/hooks/git/kube-system/root", body,
		map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hmacHex("t0ken", body)}); code != http.StatusAccepted {
		t.Fatalf("push: HTTP %d", code)
	}
	waitUntil("push applied", 2*time.Second, applied(head))
	t.Logf("push applied by the agent's gitsync %v after the webhook", time.Since(pushed).Round(time.Millisecond))
}
