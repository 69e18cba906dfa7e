package runtime

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// A private registry over TLS (a self-signed CA given as tls.ca_file) with basic auth: the
// right credentials pull, from the registry file or a pull secret (after a refused one); wrong
// ones fail with the registry's 401, also for an image already present.
func TestPullPrivateRegistry(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dir := t.TempDir()
	caFile, keyFile := framework.SelfSignedCert(t, dir, "test", []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})

	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	// Images are pushed over a plain loopback listener of the same registry, pulled over TLS.
	push := httptest.NewServer(reg)
	defer push.Close()
	var blobGets atomic.Int32
	private := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "flo" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			// Slow enough for a progress report.
			blobGets.Add(1)
			time.Sleep(300 * time.Millisecond)
		}
		reg.ServeHTTP(w, r)
	}))
	cert, err := tls.LoadX509KeyPair(caFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	private.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	private.StartTLS()
	defer private.Close()
	host := strings.TrimPrefix(private.URL, "https://")

	base, err := tarball.ImageFromPath(filepath.Join(e.dir, "testapp.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// A layer containerd does not hold yet, so that the pull downloads (and reports) something.
	extra, err := random.Layer(1<<20, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, extra)
	if err != nil {
		t.Fatal(err)
	}
	framework.PushImage(t, nil, push.URL, "private/testapp", "v3", img, "")
	ref := host + "/private/testapp:v3"

	load := func(doc string) {
		t.Helper()
		p := filepath.Join(dir, "registries.yaml")
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadRegistryConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		e.rt.cfg.Registries = c
	}
	wantUnauthorized := func(what string, err error) {
		t.Helper()
		if err == nil || !(strings.Contains(err.Error(), "401") || strings.Contains(strings.ToLower(err.Error()), "unauthorized")) {
			t.Fatalf("%s: %v, want the registry's 401 Unauthorized", what, err)
		}
	}

	// Without the CA, the registry's certificate is refused.
	load("configs: {" + host + ": {auth: {username: flo, password: s3cret}}}")
	if _, err := e.rt.PullImage(ctx, ref, PullOptions{}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("pull without the CA: %v, want a certificate error", err)
	}

	// Wrong credentials in the file.
	load("configs: {" + host + ": {auth: {username: flo, password: wrong}, tls: {ca_file: " + caFile + "}}}")
	_, err = e.rt.PullImage(ctx, ref, PullOptions{})
	wantUnauthorized("wrong credentials in the registry file", err)
	// No credentials at all.
	load("configs: {" + host + ": {tls: {ca_file: " + caFile + "}}}")
	_, err = e.rt.PullImage(ctx, ref, PullOptions{})
	wantUnauthorized("no credentials", err)

	// A pull secret's wrong credentials, then its right ones: the second works.
	old := ProgressInterval
	ProgressInterval = 100 * time.Millisecond
	defer func() { ProgressInterval = old }()
	var reports atomic.Int32
	var last atomic.Int64
	im, err := e.rt.PullImage(ctx, ref, PullOptions{
		Credentials: []Credential{{Username: "flo", Password: "nope"}, {Username: "flo", Password: "s3cret"}},
		Progress: func(done, total int64) {
			if total <= 0 || done < 0 || done > total {
				t.Errorf("progress %d of %d", done, total)
			}
			reports.Add(1)
			last.Store(done)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if im.ID == "" || im.SideLoaded {
		t.Fatalf("pulled %+v", im)
	}
	if st, err := e.rt.ImageStatus(ctx, ref); err != nil || st.SideLoaded {
		t.Fatalf("status of the pulled image: %+v, %v (a pulled image is not side-loaded)", st, err)
	}
	if blobGets.Load() == 0 || reports.Load() == 0 {
		t.Errorf("%d blob downloads, %d progress reports; want some of each", blobGets.Load(), reports.Load())
	}

	// The image is present now: a refused pull still fails, nothing falls back to it.
	_, err = e.rt.PullImage(ctx, ref, PullOptions{Credentials: []Credential{{Username: "flo", Password: "nope"}}})
	wantUnauthorized("wrong pull secret with the image present", err)

	// The right credentials in the file work too.
	load("configs: {" + host + ": {auth: {username: flo, password: s3cret}, tls: {ca_file: " + caFile + "}}}")
	if _, err := e.rt.PullImage(ctx, ref, PullOptions{}); err != nil {
		t.Fatalf("pull with the registry file's credentials: %v", err)
	}
	e.rt.cfg.Registries = nil

	// The side-loaded image is marked so.
	if st, err := e.rt.ImageStatus(ctx, "flotilla.local/testapp:latest"); err != nil || !st.SideLoaded {
		t.Fatalf("side-loaded image status: %+v, %v", st, err)
	}
}
