package fleet

import (
	"context"
	"encoding/pem"
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

	"github.com/flotilla-dev/flotilla/internal/gitremote"
)

const httpBackend = "/usr/lib/git-core/git-http-backend"

// TestWriteReadHTTPS writes and reads over https (git's own git-http-backend as a CGI
// behind basic auth), with the server's CA in the remote's CABundle: the remote's Auth and
// CABundle are used for the push and the read, and a push without credentials is refused.
func TestWriteReadHTTPS(t *testing.T) {
	if _, err := os.Stat(httpBackend); err != nil {
		t.Skipf("git-http-backend (Debian package git) is needed: %v", err)
	}
	dir, _ := bareRepo(t)
	gitCmd(t, dir, "config", "http.receivepack", "true")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "site" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		(&cgi.Handler{Path: httpBackend, Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(dir), "GIT_HTTP_EXPORT_ALL=1"}}).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	url := srv.URL + "/" + filepath.Base(dir)
	remote := gitremote.Remote{URL: url, CABundle: ca, Auth: &githttp.BasicAuth{Username: "site", Password: "s3cret"}}

	ctx := context.Background()
	if err := Write(ctx, remote, sampleStatus("paris")); err != nil {
		t.Fatal(err)
	}
	if err := WriteBranch(ctx, remote, sampleStatus("tokyo")); err != nil {
		t.Fatal(err)
	}
	got, errs := Read(ctx, remote)
	if len(errs) > 0 || len(got) != 2 {
		t.Fatalf("read %+v, %v; want paris and tokyo", got, errs)
	}
	anonymous := remote
	anonymous.Auth = nil
	if err := Write(ctx, anonymous, sampleStatus("lyon")); err == nil || !strings.Contains(err.Error(), "authentication required") {
		t.Errorf("push without credentials: %v, want authentication required", err)
	}
	noCA := remote
	noCA.CABundle = nil
	if _, errs := Read(ctx, noCA); len(errs) != 1 || !strings.Contains(errs[0].Error(), "certificate") {
		t.Errorf("read without the CA: %v, want a certificate error", errs)
	}
}

// TestReadWhileASiteWrites: over http the refs are listed and fetched in two requests; a
// site that replaces its status in between (here: on the first fetch request) makes the
// server refuse the commit it no longer points to. Read lists and fetches again, and
// returns the new report.
func TestReadWhileASiteWrites(t *testing.T) {
	if _, err := os.Stat(httpBackend); err != nil {
		t.Skipf("git-http-backend (Debian package git) is needed: %v", err)
	}
	dir, fileURL := bareRepo(t)
	ctx := context.Background()
	first := sampleStatus("paris")
	if err := Write(ctx, gitremote.Remote{URL: fileURL}, first); err != nil {
		t.Fatal(err)
	}
	second := first
	second.Time = first.Time.Add(time.Minute)
	second.Message = "written between the listing and the fetch"
	var moved atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") && moved.CompareAndSwap(false, true) {
			if err := Write(ctx, gitremote.Remote{URL: fileURL}, second); err != nil {
				t.Error(err)
			}
		}
		(&cgi.Handler{Path: httpBackend, Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(dir), "GIT_HTTP_EXPORT_ALL=1"}}).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	got, errs := Read(ctx, gitremote.Remote{URL: srv.URL + "/" + filepath.Base(dir), Insecure: true})
	if !moved.Load() {
		t.Fatal("the status was never replaced during a fetch")
	}
	if len(errs) > 0 || len(got) != 1 || got[0].Message != second.Message {
		t.Fatalf("read %+v, %v; want the report written during the read", got, errs)
	}
}
