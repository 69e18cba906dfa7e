package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// tokenAPI answers TokenRequests like the API server: token "tok-N" valid for the requested
// seconds from the test's clock, or the error in fail.
type tokenAPI struct {
	mu       sync.Mutex
	now      time.Time
	fail     error
	attempts int
	requests []*authenticationv1.TokenRequest
	accounts []string // namespace/name of each request
}

func (a *tokenAPI) clock() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.now
}

func (a *tokenAPI) advance(d time.Duration) {
	a.mu.Lock()
	a.now = a.now.Add(d)
	a.mu.Unlock()
}

func (a *tokenAPI) setFail(err error) {
	a.mu.Lock()
	a.fail = err
	a.mu.Unlock()
}

func (a *tokenAPI) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.requests)
}

func (a *tokenAPI) install(client *fake.Clientset) {
	client.PrependReactor("create", "serviceaccounts", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "token" {
			return false, nil, nil
		}
		create := action.(k8stesting.CreateAction)
		req := create.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.attempts++
		if a.fail != nil {
			return true, nil, a.fail
		}
		a.requests = append(a.requests, req)
		a.accounts = append(a.accounts, action.GetNamespace()+"/"+create.(k8stesting.CreateActionImpl).Name)
		out := req.DeepCopy()
		out.Status.Token = fmt.Sprintf("tok-%d", len(a.requests))
		out.Status.ExpirationTimestamp = metav1.NewTime(a.now.Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second))
		return true, out, nil
	})
}

func forbidden(account string) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts/token"}, account,
		fmt.Errorf(`User "system:node:host-1" cannot create resource "serviceaccounts/token"`))
}

func tokenPod(uid string) *corev1.Pod {
	pod := testPod()
	pod.UID = types.UID("uid-" + uid)
	pod.Spec.ServiceAccountName = "builder"
	pod.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To(int32(0o440)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(600))}},
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "vault/token", Audience: "vault"}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		}}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}
	return pod
}

func readVolume(t *testing.T, dir, path string) (string, os.FileMode) {
	t.Helper()
	p := filepath.Join(dir, "volumes", "kube-api-access", path)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), st.Mode().Perm()
}

// TestProjectedServiceAccountToken: tokens are requested bound to the pod with the source's
// audience and lifetime, written with the volume's mode, reused until 80 % of their lifetime,
// then replaced; a failed refresh keeps the old token and is retried at the next sync, while
// a pod with no token yet cannot set the volume up.
func TestProjectedServiceAccountToken(t *testing.T) {
	api := &tokenAPI{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	client := fake.NewClientset()
	api.install(client)
	base := t.TempDir()
	tokens := newServiceAccountTokens(client, logrus.NewEntry(logrus.New()), func(uid types.UID) string { return filepath.Join(base, string(uid)) })
	tokens.now = api.clock
	src := volumeSources{ServiceAccountToken: func(pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection) ([]byte, error) {
		return tokens.token(context.Background(), pod, p)
	}}
	pod := tokenPod("a")
	dir := t.TempDir()
	sync := func() error {
		_, err := prepareVolumes(pod, dir, src)
		return err
	}

	if err := sync(); err != nil {
		t.Fatal(err)
	}
	if n := api.count(); n != 2 {
		t.Fatalf("%d token requests, want 2 (one per source)", n)
	}
	for i, want := range []struct {
		audiences []string
		seconds   int64
	}{{nil, 600}, {[]string{"vault"}, 3600}} {
		r := api.requests[i]
		if api.accounts[i] != "shop/builder" {
			t.Errorf("request %d for %s, want shop/builder", i, api.accounts[i])
		}
		if fmt.Sprint(r.Spec.Audiences) != fmt.Sprint(want.audiences) || r.Spec.Audiences == nil != (want.audiences == nil) {
			t.Errorf("request %d audiences %#v, want %#v", i, r.Spec.Audiences, want.audiences)
		}
		if r.Spec.ExpirationSeconds == nil || *r.Spec.ExpirationSeconds != want.seconds {
			t.Errorf("request %d expirationSeconds %v, want %d", i, r.Spec.ExpirationSeconds, want.seconds)
		}
		if b := r.Spec.BoundObjectRef; b == nil || b.Kind != "Pod" || b.APIVersion != "v1" || b.Name != pod.Name || b.UID != pod.UID {
			t.Errorf("request %d bound to %+v, want the pod", i, b)
		}
	}
	tok, mode := readVolume(t, dir, "token")
	if tok != "tok-1" || mode != 0o440 {
		t.Errorf("token file %q mode %o, want tok-1 mode 440", tok, mode)
	}
	if v, _ := readVolume(t, dir, "vault/token"); v != "tok-2" {
		t.Errorf("vault/token = %q, want tok-2", v)
	}
	if ns, _ := readVolume(t, dir, "namespace"); ns != "shop" {
		t.Errorf("namespace = %q", ns)
	}

	// 70 % of the 600 s token: reused.
	api.advance(420 * time.Second)
	if err := sync(); err != nil {
		t.Fatal(err)
	}
	if n := api.count(); n != 2 {
		t.Fatalf("%d token requests at 70 %% of the lifetime, want none new", n)
	}
	// Past 80 %: the short-lived one is replaced, the hour-long one is not.
	api.advance(61 * time.Second)
	if err := sync(); err != nil {
		t.Fatal(err)
	}
	if tok, _ := readVolume(t, dir, "token"); tok != "tok-3" || api.count() != 3 {
		t.Errorf("after 80 %% of the lifetime: token %q after %d requests, want tok-3 after 3", tok, api.count())
	}

	// A refresh that fails keeps the token the pod has and is tried at every sync.
	api.setFail(forbidden("builder"))
	api.advance(500 * time.Second)
	before := api.attempts
	for range 2 {
		if err := sync(); err != nil {
			t.Fatalf("a failed refresh of a running pod must keep the old token, got %v", err)
		}
	}
	if tok, _ := readVolume(t, dir, "token"); tok != "tok-3" {
		t.Errorf("token after a failed refresh = %q, want tok-3 kept", tok)
	}
	if n := api.attempts - before; n != 2 {
		t.Errorf("%d token requests in two syncs after a failure, want 2 (one retry per sync)", n)
	}
	api.setFail(nil)
	if err := sync(); err != nil {
		t.Fatal(err)
	}
	if tok, _ := readVolume(t, dir, "token"); tok != "tok-4" {
		t.Errorf("token once the API answers again = %q, want tok-4", tok)
	}

	// A pod with no token yet cannot set the volume up, and says why.
	api.setFail(forbidden("builder"))
	other := tokenPod("b")
	_, err := prepareVolumes(other, t.TempDir(), src)
	if err == nil || !strings.Contains(err.Error(), `volume "kube-api-access"`) || !strings.Contains(err.Error(), `serviceAccountToken "token"`) ||
		!strings.Contains(err.Error(), "forbidden") {
		t.Errorf("volume setup with a failing token request: %v", err)
	}

	// Entries of pods that are gone are dropped.
	tokens.prune(map[string]bool{string(other.UID): true})
	if len(tokens.tokens) != 0 || len(tokens.failed) != 1 {
		t.Errorf("after pruning pod a: %d tokens, %d failures left", len(tokens.tokens), len(tokens.failed))
	}
	tokens.forget(other.UID)
	if len(tokens.failed) != 0 {
		t.Errorf("forget left %d failures", len(tokens.failed))
	}
}

// agentTokens is the token cache of an agent (re)started on a host whose pod directories are
// under base, with the test's clock; its log is recorded in the hook.
func agentTokens(api *tokenAPI, client *fake.Clientset, base string) (*serviceAccountTokens, *logtest.Hook) {
	log, hook := logtest.NewNullLogger()
	tokens := newServiceAccountTokens(client, logrus.NewEntry(log), func(uid types.UID) string { return filepath.Join(base, string(uid)) })
	tokens.now = api.clock
	return tokens, hook
}

// tokenProjection is a source of a token valid for seconds.
func tokenProjection(seconds int64) *corev1.ServiceAccountTokenProjection {
	return &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(seconds)}
}

// refused is the error of a TokenRequest to an API server nothing listens on.
func refused() error {
	return &url.Error{Op: "Post", URL: "https://10.0.0.1:6443/api/v1/namespaces/shop/serviceaccounts/builder/token",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
}

func reuseWarnings(hook *logtest.Hook) int {
	n := 0
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "reusing an unexpired") {
			n++
		}
	}
	return n
}

// TestTokenReusedAfterRestartWhileAPIUnavailable: a token the agent obtained is on disk
// (0600, in the pod's directory); an agent restarted while the API cannot answer hands it out
// even past its refresh point, asks the API at every sync and says so once, and takes a new
// token as soon as the API answers again.
func TestTokenReusedAfterRestartWhileAPIUnavailable(t *testing.T) {
	api := &tokenAPI{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	client := fake.NewClientset()
	api.install(client)
	base := t.TempDir()
	pod, src := tokenPod("a"), tokenProjection(600)
	ctx := context.Background()

	first, _ := agentTokens(api, client, base)
	if tok, err := first.token(ctx, pod, src); err != nil || string(tok) != "tok-1" {
		t.Fatalf("first token = %q, %v; want tok-1", tok, err)
	}
	dir := filepath.Join(base, string(pod.UID), tokensDirName)
	files, err := os.ReadDir(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("persisted tokens in %s: %v, %v; want one file", dir, files, err)
	}
	if st, err := os.Stat(filepath.Join(dir, files[0].Name())); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file %v, %v; want mode 600", st, err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("tokens directory %v, %v; want mode 700", st, err)
	}

	// The host restarts 500 s later (past 80 % of 600 s) cut off from the API.
	api.advance(500 * time.Second)
	api.setFail(refused())
	restarted, hook := agentTokens(api, client, base)
	before := api.attempts
	for i := range 3 {
		if tok, err := restarted.token(ctx, pod, src); err != nil || string(tok) != "tok-1" {
			t.Fatalf("sync %d after a restart without the API: %q, %v; want tok-1 reused", i, tok, err)
		}
	}
	if n := api.attempts - before; n != 3 {
		t.Errorf("%d token requests in 3 syncs, want 3 (the API is asked at every sync)", n)
	}
	if n := reuseWarnings(hook); n != 1 {
		t.Errorf("%d warnings about the reused token, want 1", n)
	}

	// Every way the API can be unavailable, for an agent restarted with it.
	for _, unavailable := range []error{
		&url.Error{Op: "Post", URL: "https://10.0.0.1:6443", Err: &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}},
		&url.Error{Op: "Post", URL: "https://10.0.0.1:6443", Err: io.EOF},
		&url.Error{Op: "Post", URL: "https://10.0.0.1:6443", Err: context.DeadlineExceeded},
		fmt.Errorf("wrapped: %w", context.DeadlineExceeded),
		&url.Error{Op: "Post", URL: "https://10.0.0.1:6443", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}},
		apierrors.NewServiceUnavailable("etcd has no quorum"),
		apierrors.NewInternalError(fmt.Errorf("etcdserver: request timed out")),
		apierrors.NewTimeoutError("request did not complete", 1),
		apierrors.NewServerTimeout(schema.GroupResource{Resource: "serviceaccounts"}, "create", 1),
		apierrors.NewTooManyRequests("slow down", 1),
		apierrors.NewGenericServerResponse(502, "post", schema.GroupResource{Resource: "serviceaccounts"}, "builder", "", 0, true),
	} {
		api.setFail(unavailable)
		tokens, _ := agentTokens(api, client, base)
		if tok, err := tokens.token(ctx, pod, src); err != nil || string(tok) != "tok-1" {
			t.Errorf("restart with the API failing with %v: %q, %v; want tok-1 reused", unavailable, tok, err)
		}
	}

	// The API is back: a new token, on disk for the next restart.
	api.setFail(nil)
	if tok, err := restarted.token(ctx, pod, src); err != nil || string(tok) != "tok-2" {
		t.Fatalf("token once the API answers = %q, %v; want tok-2", tok, err)
	}
	api.setFail(refused())
	again, _ := agentTokens(api, client, base)
	if tok, err := again.token(ctx, pod, src); err != nil || string(tok) != "tok-2" {
		t.Errorf("token after another restart = %q, %v; want tok-2 from disk", tok, err)
	}

	// The agent did not restart: an unavailable API keeps the cached token too.
	api.advance(590 * time.Second)
	if tok, err := restarted.token(ctx, pod, src); err != nil || string(tok) != "tok-2" {
		t.Errorf("due refresh without the API = %q, %v; want tok-2 reused", tok, err)
	}
}

// TestTokenNotReusedWhenRequestRefused: an API that answers and refuses the request (4xx) is
// a failure even with an unexpired token on disk or in memory.
func TestTokenNotReusedWhenRequestRefused(t *testing.T) {
	api := &tokenAPI{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	client := fake.NewClientset()
	api.install(client)
	base := t.TempDir()
	pod, src := tokenPod("a"), tokenProjection(600)
	ctx := context.Background()

	first, _ := agentTokens(api, client, base)
	if _, err := first.token(ctx, pod, src); err != nil {
		t.Fatal(err)
	}
	api.advance(500 * time.Second)
	for _, refusal := range []error{
		forbidden("builder"),
		apierrors.NewNotFound(schema.GroupResource{Resource: "serviceaccounts"}, "builder"),
		apierrors.NewUnauthorized("token expired"),
		apierrors.NewBadRequest("audience not allowed"),
	} {
		api.setFail(refusal)
		restarted, hook := agentTokens(api, client, base)
		if tok, err := restarted.token(ctx, pod, src); err == nil || tok != nil || !strings.Contains(err.Error(), refusal.Error()) {
			t.Errorf("restart with the API refusing with %v: %q, %v; want that error and no token", refusal, tok, err)
		}
		if n := reuseWarnings(hook); n != 0 {
			t.Errorf("%v: %d warnings about a reused token", refusal, n)
		}
		if tok, err := first.token(ctx, pod, src); err == nil || tok != nil {
			t.Errorf("refresh refused with %v: %q, %v; want an error", refusal, tok, err)
		}
	}
}

// TestExpiredTokenNotReused: a token is handed out while the API is unavailable up to its
// expiry, never after.
func TestExpiredTokenNotReused(t *testing.T) {
	api := &tokenAPI{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	client := fake.NewClientset()
	api.install(client)
	base := t.TempDir()
	pod, src := tokenPod("a"), tokenProjection(600)
	ctx := context.Background()

	first, _ := agentTokens(api, client, base)
	if _, err := first.token(ctx, pod, src); err != nil {
		t.Fatal(err)
	}
	api.setFail(refused())
	api.advance(599 * time.Second)
	restarted, _ := agentTokens(api, client, base)
	if tok, err := restarted.token(ctx, pod, src); err != nil || string(tok) != "tok-1" {
		t.Fatalf("a second before expiry: %q, %v; want tok-1", tok, err)
	}
	api.advance(time.Second)
	for name, tokens := range map[string]*serviceAccountTokens{"in memory": restarted, "on disk": func() *serviceAccountTokens {
		tokens, _ := agentTokens(api, client, base)
		return tokens
	}()} {
		if tok, err := tokens.token(ctx, pod, src); err == nil || tok != nil || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("expired token %s, API unreachable: %q, %v; want the request's error", name, tok, err)
		}
	}
}

// TestPersistedTokenUsedAfterRestart: with the API available a restarted agent hands out the
// token on disk while it is fresh, without a TokenRequest, and requests a new one when due;
// each source has its own file, and forget removes them.
func TestPersistedTokenUsedAfterRestart(t *testing.T) {
	api := &tokenAPI{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	client := fake.NewClientset()
	api.install(client)
	base := t.TempDir()
	pod, src := tokenPod("a"), tokenProjection(600)
	vault := &corev1.ServiceAccountTokenProjection{Path: "vault/token", Audience: "vault"}
	ctx := context.Background()

	first, _ := agentTokens(api, client, base)
	for _, p := range []*corev1.ServiceAccountTokenProjection{src, vault} {
		if _, err := first.token(ctx, pod, p); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, string(pod.UID), tokensDirName)
	if files, _ := os.ReadDir(dir); len(files) != 2 {
		t.Fatalf("%d token files for two sources, want 2", len(files))
	}

	api.advance(420 * time.Second) // 70 % of 600 s
	restarted, _ := agentTokens(api, client, base)
	for p, want := range map[*corev1.ServiceAccountTokenProjection]string{src: "tok-1", vault: "tok-2"} {
		if tok, err := restarted.token(ctx, pod, p); err != nil || string(tok) != want {
			t.Errorf("%s after a restart = %q, %v; want %s", p.Path, tok, err, want)
		}
	}
	if n := api.count(); n != 2 {
		t.Fatalf("%d token requests, want 2: fresh tokens on disk need none", n)
	}

	api.advance(61 * time.Second) // past 80 %
	if tok, err := restarted.token(ctx, pod, src); err != nil || string(tok) != "tok-3" || api.count() != 3 {
		t.Fatalf("due token = %q, %v after %d requests; want tok-3 after 3", tok, err, api.count())
	}
	again, _ := agentTokens(api, client, base)
	if tok, err := again.token(ctx, pod, src); err != nil || string(tok) != "tok-3" || api.count() != 3 {
		t.Errorf("after another restart = %q, %v after %d requests; want tok-3 from disk", tok, err, api.count())
	}

	// Another pod's token is not this pod's.
	other := tokenPod("b")
	if tok, err := again.token(ctx, other, src); err != nil || string(tok) != "tok-4" {
		t.Errorf("another pod's token = %q, %v; want tok-4", tok, err)
	}

	again.forget(pod.UID)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("tokens directory after forget: %v, want it gone", err)
	}
	if files, _ := os.ReadDir(filepath.Join(base, string(other.UID), tokensDirName)); len(files) != 1 {
		t.Errorf("forget of pod a left %d token files of pod b, want 1", len(files))
	}
	api.setFail(refused())
	restarted, _ = agentTokens(api, client, base)
	if tok, err := restarted.token(ctx, pod, src); err == nil {
		t.Errorf("token of a forgotten pod without the API = %q, want an error", tok)
	}
}

// TestUnreadablePersistedToken: a damaged token file is no token.
func TestUnreadablePersistedToken(t *testing.T) {
	api := &tokenAPI{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	client := fake.NewClientset()
	api.install(client)
	base := t.TempDir()
	pod, src := tokenPod("a"), tokenProjection(600)
	ctx := context.Background()

	first, _ := agentTokens(api, client, base)
	if _, err := first.token(ctx, pod, src); err != nil {
		t.Fatal(err)
	}
	path := first.tokenFile(tokenKey{uid: pod.UID, serviceAccount: "builder", expirationSeconds: 600})
	if err := os.WriteFile(path, []byte(`{"token":`), 0o600); err != nil {
		t.Fatal(err)
	}
	restarted, _ := agentTokens(api, client, base)
	if tok, err := restarted.token(ctx, pod, src); err != nil || string(tok) != "tok-2" {
		t.Errorf("token with a damaged file = %q, %v; want tok-2 requested", tok, err)
	}
}

func TestCachedTokenFresh(t *testing.T) {
	issued := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		lifetime time.Duration
		age      time.Duration
		fresh    bool
	}{
		{"new", time.Hour, 0, true},
		{"at 79 %", 100 * time.Second, 79 * time.Second, true},
		{"at 80 %", 100 * time.Second, 80 * time.Second, false},
		// The API server may be configured with short minimum lifetimes for tests.
		{"a one-minute token after 50 s", time.Minute, 50 * time.Second, false},
		{"a year-long token after 23 h", 365 * 24 * time.Hour, 23 * time.Hour, true},
		{"a year-long token after 24 h", 365 * 24 * time.Hour, 24 * time.Hour, false},
		{"no lifetime", 0, 0, false},
	} {
		c := cachedToken{token: []byte("x"), issued: issued, expires: issued.Add(tc.lifetime)}
		if got := c.fresh(issued.Add(tc.age)); got != tc.fresh {
			t.Errorf("%s: fresh = %v, want %v", tc.name, got, tc.fresh)
		}
	}
}

// tokenRuntime is a runtime whose containers run until stopped.
type tokenRuntime struct {
	mu         sync.Mutex
	containers []rt.ContainerStatus
	created    int
}

func (r *tokenRuntime) Exec(context.Context, string, []string, io.Reader, io.Writer, io.Writer, bool) (int, error) {
	return 0, nil
}
func (r *tokenRuntime) ListImages(context.Context) ([]rt.Image, error) { return nil, nil }
func (r *tokenRuntime) ImageStatus(context.Context, string) (*rt.Image, error) {
	return &rt.Image{ID: "sha256:1"}, nil
}
func (r *tokenRuntime) PullImage(context.Context, string, rt.PullOptions) (*rt.Image, error) {
	return &rt.Image{ID: "sha256:1"}, nil
}
func (r *tokenRuntime) CreateContainer(_ context.Context, c rt.ContainerConfig) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.created++
	r.containers = append(r.containers, rt.ContainerStatus{ID: c.ID, Image: c.Image, Labels: c.Labels, State: rt.StateCreated, CreatedAt: time.Now()})
	return nil
}
func (r *tokenRuntime) set(id string, f func(*rt.ContainerStatus)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.containers {
		if r.containers[i].ID == id {
			f(&r.containers[i])
		}
	}
}
func (r *tokenRuntime) StartContainer(_ context.Context, id string) error {
	r.set(id, func(c *rt.ContainerStatus) { c.State, c.StartedAt = rt.StateRunning, time.Now() })
	return nil
}
func (r *tokenRuntime) StopContainer(_ context.Context, id string, _ time.Duration) error {
	r.set(id, func(c *rt.ContainerStatus) { c.State, c.FinishedAt = rt.StateExited, time.Now() })
	return nil
}
func (r *tokenRuntime) RemoveContainer(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.containers {
		if r.containers[i].ID == id {
			r.containers = append(r.containers[:i], r.containers[i+1:]...)
			break
		}
	}
	return nil
}
func (r *tokenRuntime) ListContainers(context.Context) ([]rt.ContainerStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rt.ContainerStatus(nil), r.containers...), nil
}
func (r *tokenRuntime) createdCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.created
}

// TestRunningPodTokenRefresh runs a pod through the pod manager: its token volume is set up
// before the container starts, the token is replaced in the volume by the periodic resync
// while the container keeps running, and the pod's cache entries go with the pod.
func TestRunningPodTokenRefresh(t *testing.T) {
	api := &tokenAPI{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	pod := tokenPod("run")
	client := fake.NewClientset(pod)
	api.install(client)
	api.setFail(forbidden("builder"))
	containers := &tokenRuntime{}
	m := NewPodManager(client, PodConfig{NodeName: "host-1", DataDir: t.TempDir(), Runtime: containers,
		ResyncInterval: 20 * time.Millisecond, HostResolvConf: os.DevNull})
	m.tokens.now = api.clock
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	eventually := func(what string, ok func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return ok(), nil
		}); err != nil {
			t.Fatalf("%s: never happened", what)
		}
	}
	tokenFile := filepath.Join(m.podDir(pod.UID), "volumes", "kube-api-access", "token")
	read := func() string {
		b, _ := os.ReadFile(tokenFile)
		return string(b)
	}

	// No token, no container; the failure is reported as a FailedMount event.
	eventually("a FailedMount event", func() bool {
		evs, _ := client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		for _, e := range evs.Items {
			if e.Reason == "FailedMount" && strings.Contains(e.Message, "forbidden") {
				return true
			}
		}
		return false
	})
	if n := containers.createdCount(); n != 0 {
		t.Fatalf("%d containers created without a token", n)
	}

	api.setFail(nil)
	eventually("the container running with its token", func() bool {
		cs, _ := containers.ListContainers(ctx)
		return len(cs) == 1 && cs[0].State == rt.StateRunning && read() == "tok-1"
	})
	api.advance(481 * time.Second)
	eventually("the refreshed token in the volume", func() bool { return strings.HasPrefix(read(), "tok-") && read() != "tok-1" })
	if n := containers.createdCount(); n != 1 {
		t.Errorf("%d containers created, want the first one still running", n)
	}

	if err := client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("the pod's tokens dropped", func() bool {
		m.tokens.mu.Lock()
		defer m.tokens.mu.Unlock()
		return len(m.tokens.tokens) == 0
	})
}
