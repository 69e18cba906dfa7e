package gitsync

import (
	"context"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// gitHTTP serves the repositories below root over git's smart HTTP protocol with git's own
// git-http-backend (as a CGI), asking for basic auth user:pass when user is set. It counts
// the requests it answers.
type gitHTTP struct {
	root       string
	user, pass string
	requests   atomic.Int64
	delay      time.Duration
}

func (g *gitHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.requests.Add(1)
	if g.delay > 0 {
		select {
		case <-time.After(g.delay):
		case <-r.Context().Done():
			return
		}
	}
	if g.user != "" {
		u, p, ok := r.BasicAuth()
		if !ok || u != g.user || p != g.pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
	}
	h := &cgi.Handler{Path: "/usr/lib/git-core/git-http-backend",
		Env: []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1"}}
	h.ServeHTTP(w, r)
}

// serveTLS serves r over https (git-http-backend, basic auth user:pass when user is set)
// until the test ends; it returns the repository's URL, the server's certificate as PEM and
// the backend.
func serveTLS(t *testing.T, r *repo, user, pass string) (string, []byte, *gitHTTP) {
	t.Helper()
	requireHTTPBackend(t)
	backend := &gitHTTP{root: filepath.Dir(r.dir), user: user, pass: pass}
	srv := httptest.NewTLSServer(backend)
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv.URL + "/" + filepath.Base(r.dir), ca, backend
}

// servePlain serves r over plain http (git-http-backend, no auth) until the test ends; it
// returns the repository's URL and the backend.
func servePlain(t *testing.T, r *repo) (string, *gitHTTP) {
	t.Helper()
	requireHTTPBackend(t)
	backend := &gitHTTP{root: filepath.Dir(r.dir)}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	return srv.URL + "/" + filepath.Base(r.dir), backend
}

func requireHTTPBackend(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/lib/git-core/git-http-backend"); err != nil {
		t.Fatalf("git-http-backend (Debian package git) is needed: %v", err)
	}
}

// TestFetchHTTPS: an https server whose certificate chains to the CA of the source's
// Secret (key ca.crt) is fetched from, with the Secret's credentials; without that CA the
// fetch fails on the certificate; without the credentials the server refuses it.
func TestFetchHTTPS(t *testing.T) {
	r := newRepo(t)
	head := r.commit(map[string]string{"ns.yaml": nsYAML})
	url, ca, _ := serveTLS(t, r, "deploy", "s3cret")
	ref := &v1alpha1.GitRef{Branch: "main"}
	auth := &githttp.BasicAuth{Username: "deploy", Password: "s3cret"}

	co, err := Fetch(context.Background(), filepath.Join(t.TempDir(), "c"), Remote{URL: url, Ref: ref, Auth: auth, CABundle: ca}, Limits{})
	if err != nil {
		t.Fatalf("fetch over https with the CA bundle: %v", err)
	}
	if co.Commit != head {
		t.Fatalf("fetched %s, want %s", co.Commit, head)
	}
	if _, err := Fetch(context.Background(), filepath.Join(t.TempDir(), "c"), Remote{URL: url, Ref: ref, Auth: auth}, Limits{}); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Fatalf("fetch without the CA bundle: %v, want a certificate error", err)
	}
	if _, err := Fetch(context.Background(), filepath.Join(t.TempDir(), "c"), Remote{URL: url, Ref: ref, CABundle: ca}, Limits{}); err == nil ||
		!strings.Contains(err.Error(), "authentication required") {
		t.Fatalf("fetch without credentials: %v, want authentication required", err)
	}
}

// TestFetchPlainHTTP: an http:// URL is refused (no request reaches the server) unless the
// source is insecure, and credentials are never sent over it, insecure or not.
func TestFetchPlainHTTP(t *testing.T) {
	r := newRepo(t)
	head := r.commit(map[string]string{"ns.yaml": nsYAML})
	url, backend := servePlain(t, r)
	ref := &v1alpha1.GitRef{Branch: "main"}

	_, err := Fetch(context.Background(), filepath.Join(t.TempDir(), "c"), Remote{URL: url, Ref: ref}, Limits{})
	if err == nil || !strings.Contains(err.Error(), "set spec.insecure: true") {
		t.Fatalf("http:// without insecure: %v, want a refusal naming spec.insecure", err)
	}
	auth := &githttp.BasicAuth{Username: "u", Password: "p"}
	_, err = Fetch(context.Background(), filepath.Join(t.TempDir(), "c"), Remote{URL: url, Ref: ref, Auth: auth, Insecure: true}, Limits{})
	if err == nil || !strings.Contains(err.Error(), "credentials are never sent") {
		t.Fatalf("http:// with credentials: %v, want a refusal", err)
	}
	if n := backend.requests.Load(); n != 0 {
		t.Fatalf("the server saw %d requests before any fetch was allowed", n)
	}
	co, err := Fetch(context.Background(), filepath.Join(t.TempDir(), "c"), Remote{URL: url, Ref: ref, Insecure: true}, Limits{})
	if err != nil {
		t.Fatalf("http:// with insecure: %v", err)
	}
	if co.Commit != head {
		t.Fatalf("fetched %s, want %s", co.Commit, head)
	}
}

// TestFetchRepoSizeLimit: a repository over --git-max-repo-size stops the fetch with a
// LimitError naming the flag and leaves nothing on disk; under the limit it is fetched.
func TestFetchRepoSizeLimit(t *testing.T) {
	r := newRepo(t)
	blob := make([]byte, 3<<20) // random: git cannot compress it
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	head := r.commit(map[string]string{"ns.yaml": nsYAML, "big.bin": string(blob)})
	cache := filepath.Join(t.TempDir(), "c")
	src := Remote{URL: "file://" + r.dir, Ref: &v1alpha1.GitRef{Branch: "main"}}

	_, err := Fetch(context.Background(), cache, src, Limits{MaxRepoSize: 1 << 20})
	var le *LimitError
	if !errors.As(err, &le) || le.Flag != "--git-max-repo-size" || !strings.Contains(err.Error(), "1Mi") {
		t.Fatalf("fetch of a 3 MiB repository with a 1 MiB limit: %v, want a LimitError of --git-max-repo-size", err)
	}
	if _, err := os.Stat(cache); !os.IsNotExist(err) {
		t.Fatalf("the cache of the refused fetch is still on disk (%v)", err)
	}
	co, err := Fetch(context.Background(), cache, src, Limits{MaxRepoSize: 8 << 20})
	if err != nil || co.Commit != head {
		t.Fatalf("fetch under the limit: %v", err)
	}
}

// TestFetchTimeout: a server that does not answer within --git-fetch-timeout stops the
// fetch with a LimitError naming the flag.
func TestFetchTimeout(t *testing.T) {
	requireHTTPBackend(t)
	r := newRepo(t)
	r.commit(map[string]string{"ns.yaml": nsYAML})
	backend := &gitHTTP{root: filepath.Dir(r.dir), delay: time.Minute}
	srv := httptest.NewTLSServer(backend)
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	start := time.Now()
	_, err := Fetch(context.Background(), filepath.Join(t.TempDir(), "c"),
		Remote{URL: srv.URL + "/" + filepath.Base(r.dir), Ref: &v1alpha1.GitRef{Branch: "main"}, CABundle: ca}, Limits{FetchTimeout: time.Second})
	var le *LimitError
	if !errors.As(err, &le) || le.Flag != "--git-fetch-timeout" {
		t.Fatalf("fetch from a server that hangs: %v, want a LimitError of --git-fetch-timeout", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the fetch gave up after %v, want about 1s", took)
	}
}

// TestFetchSemver: spec.ref.semver checks out the tag of the highest version in the range,
// "v" prefix or not, pre-releases only when the range names one, and moves when a higher
// tag in the range is pushed.
func TestFetchSemver(t *testing.T) {
	r := newRepo(t)
	tagged := map[string]string{}
	for _, tag := range []string{"v1.0.0", "1.2.0", "v2.0.0", "v1.3.0-rc.1", "not-a-version"} {
		tagged[tag] = r.commit(map[string]string{"version.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: v, namespace: default}\ndata: {v: " + tag + "}\n"})
		r.git("tag", "-a", "-m", tag, tag)
	}
	cache := filepath.Join(t.TempDir(), "c")
	fetch := func(rng string) (*Checkout, error) {
		return Fetch(context.Background(), cache, Remote{URL: "file://" + r.dir, Ref: &v1alpha1.GitRef{Semver: rng}}, Limits{})
	}
	for _, c := range []struct{ rng, tag string }{
		{">=1.0.0 <2.0.0", "1.2.0"},
		{"~1.0", "v1.0.0"},
		{"*", "v2.0.0"},
		{">=1.3.0-rc.0 <2.0.0", "v1.3.0-rc.1"},
	} {
		co, err := fetch(c.rng)
		if err != nil {
			t.Fatalf("semver %q: %v", c.rng, err)
		}
		if co.Commit != tagged[c.tag] || co.Revision != c.tag+"@sha1:"+tagged[c.tag] {
			t.Errorf("semver %q: revision %s, want tag %s at %s", c.rng, co.Revision, c.tag, tagged[c.tag])
		}
	}
	next := r.commit(map[string]string{"later.yaml": nsYAML})
	r.git("tag", "v1.4.0")
	if co, err := fetch("^1"); err != nil || co.Revision != "v1.4.0@sha1:"+next {
		t.Fatalf("after tagging v1.4.0, semver ^1: %v %v", co, err)
	}
	if _, err := fetch(">=3"); err == nil || !strings.Contains(err.Error(), "no tag") {
		t.Fatalf("a range no tag is in: %v, want an error saying so", err)
	}
	if _, err := fetch("not a range"); err == nil || !strings.Contains(err.Error(), "spec.ref.semver") {
		t.Fatalf("a bad range: %v", err)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{512: "512", 1 << 10: "1Ki", 3 << 20: "3Mi", 11242792: "10.7Mi", 2 << 30: "2Gi", 1536: "1.5Ki"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %s, want %s", n, got, want)
		}
	}
}
