package gitsync

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

const (
	// WebhookPathPrefix is where push webhooks are received: <prefix><namespace>/<name>.
	WebhookPathPrefix = "/hooks/git/"
	// RequestedAtAnnotation on a GitSource asks the leader's controller to fetch at once; the
	// webhook sets it to the time of the push (RFC 3339 with nanoseconds).
	RequestedAtAnnotation = "flotilla.dev/requested-at"
	// WebhookTokenKey is the key of the webhook Secret holding the shared token.
	WebhookTokenKey = "token"
	// maxHookBody is GitHub's payload limit.
	maxHookBody = 25 << 20
)

// Webhook providers.
const (
	ProviderGitHub = "github"
	ProviderGitLab = "gitlab"
	ProviderGitea  = "gitea"
)

// ErrBadSignature is returned by VerifyHook when the request is not authenticated by the token.
var ErrBadSignature = errors.New("signature does not match the GitSource's webhook token")

// VerifyHook authenticates a webhook request by the shared token: GitHub's
// X-Hub-Signature-256 ("sha256=<hex HMAC of the body>"), Gitea's X-Gitea-Signature (hex HMAC)
// or GitLab's X-Gitlab-Token (the token itself). It returns the provider that signed it.
func VerifyHook(h http.Header, body, token []byte) (string, error) {
	if len(token) == 0 {
		return "", errors.New("the webhook token is empty")
	}
	mac := hmac.New(sha256.New, token)
	mac.Write(body)
	sum := mac.Sum(nil)
	checkHex := func(sig string) bool {
		got, err := hex.DecodeString(strings.TrimSpace(sig))
		return err == nil && hmac.Equal(got, sum)
	}
	switch {
	case h.Get("X-Gitea-Signature") != "":
		// Gitea also sends X-Hub-Signature-256; either proves the same thing.
		if checkHex(h.Get("X-Gitea-Signature")) {
			return ProviderGitea, nil
		}
		return ProviderGitea, ErrBadSignature
	case h.Get("X-Hub-Signature-256") != "":
		sig, ok := strings.CutPrefix(h.Get("X-Hub-Signature-256"), "sha256=")
		if ok && checkHex(sig) {
			return ProviderGitHub, nil
		}
		return ProviderGitHub, ErrBadSignature
	case h.Get("X-Gitlab-Token") != "":
		if subtle.ConstantTimeCompare([]byte(h.Get("X-Gitlab-Token")), token) == 1 {
			return ProviderGitLab, nil
		}
		return ProviderGitLab, ErrBadSignature
	}
	return "", errors.New("no X-Hub-Signature-256, X-Gitea-Signature or X-Gitlab-Token header")
}

// IsPush reports whether an authenticated request is a push (branch or tag) event, the only
// events that trigger a fetch. The event header is read by provider.
func IsPush(provider string, h http.Header) (event string, push bool) {
	switch provider {
	case ProviderGitHub:
		event = h.Get("X-GitHub-Event")
		return event, event == "push"
	case ProviderGitea:
		event = h.Get("X-Gitea-Event")
		if event == "" {
			event = h.Get("X-GitHub-Event")
		}
		return event, event == "push"
	case ProviderGitLab:
		event = h.Get("X-Gitlab-Event")
		return event, event == "Push Hook" || event == "Tag Push Hook"
	}
	return "", false
}

// ParseHookPath returns the namespace and name of /hooks/git/<namespace>/<name>.
func ParseHookPath(p string) (ns, name string, ok bool) {
	rest, found := strings.CutPrefix(p, WebhookPathPrefix)
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

type hookClients struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

// Webhook receives git push webhooks on the API port (it authenticates them itself, so it is
// served before the API's authentication). Any host may receive the push while only the
// leader runs gitsync: the handler verifies and then annotates the GitSource with
// RequestedAtAnnotation, which the leader's controller watches.
type Webhook struct {
	clients atomic.Pointer[hookClients]
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	log *logrus.Entry
}

// NewWebhook returns a handler that answers 503 until SetConfig gives it an API client.
func NewWebhook() *Webhook {
	return &Webhook{log: logrus.WithField("component", "git-webhook")}
}

// SetConfig gives the handler its (privileged, loopback) API client.
func (w *Webhook) SetConfig(cfg *rest.Config) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("webhook client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("webhook client: %w", err)
	}
	w.clients.Store(&hookClients{kube: kube, dyn: dyn})
	return nil
}

func (w *Webhook) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// ServeHTTP handles POST /hooks/git/<namespace>/<name>.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	ns, name, ok := ParseHookPath(r.URL.Path)
	if !ok {
		http.Error(rw, "want /hooks/git/<namespace>/<name>", http.StatusNotFound)
		return
	}
	log := w.log.WithFields(logrus.Fields{"source": ns + "." + name, "remote": r.RemoteAddr})
	if r.Method != http.MethodPost {
		http.Error(rw, "webhooks are POST requests", http.StatusMethodNotAllowed)
		return
	}
	cl := w.clients.Load()
	if cl == nil {
		http.Error(rw, "API not ready", http.StatusServiceUnavailable)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxHookBody))
	if err != nil {
		http.Error(rw, "read body: "+err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	code, msg := w.handle(ctx, cl, log, ns, name, r.Header, body)
	http.Error(rw, msg, code)
}

// handle verifies the request and requests a fetch; it returns the HTTP answer.
func (w *Webhook) handle(ctx context.Context, cl *hookClients, log *logrus.Entry, ns, name string, h http.Header, body []byte) (int, string) {
	res := cl.dyn.Resource(GitSourceResource).Namespace(ns)
	u, err := res.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Same answer as a bad signature: unauthenticated callers learn nothing about which
		// sources exist.
		log.Warn("webhook for a GitSource that does not exist: rejected")
		return http.StatusUnauthorized, "unauthorized"
	}
	if err != nil {
		log.WithError(err).Error("webhook: read GitSource")
		return http.StatusServiceUnavailable, "cannot read the GitSource"
	}
	var gs v1alpha1.GitSource
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gs); err != nil {
		return http.StatusInternalServerError, "decode GitSource"
	}
	if gs.Spec.WebhookSecretRef == nil {
		log.Warn("webhook rejected: the GitSource has no spec.webhookSecretRef")
		return http.StatusUnauthorized, "unauthorized"
	}
	sec, err := cl.kube.CoreV1().Secrets(ns).Get(ctx, gs.Spec.WebhookSecretRef.Name, metav1.GetOptions{})
	if err != nil {
		log.WithError(err).Warnf("webhook rejected: read Secret %s/%s named by spec.webhookSecretRef", ns, gs.Spec.WebhookSecretRef.Name)
		return http.StatusUnauthorized, "unauthorized"
	}
	provider, err := VerifyHook(h, body, sec.Data[WebhookTokenKey])
	if err != nil {
		log.WithError(err).WithField("provider", provider).Warn("webhook rejected: bad signature")
		return http.StatusUnauthorized, "unauthorized"
	}
	log = log.WithField("provider", provider)
	event, push := IsPush(provider, h)
	if provider == ProviderGitHub && event == "ping" {
		return http.StatusOK, "pong"
	}
	if !push {
		log.WithField("event", event).Info("webhook: not a push event; ignored")
		return http.StatusAccepted, "ignored: not a push event"
	}
	at := w.now().UTC().Format(time.RFC3339Nano)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{RequestedAtAnnotation: at}}})
	if _, err := res.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		log.WithError(err).Error("webhook: annotate GitSource")
		return http.StatusServiceUnavailable, "cannot record the request"
	}
	log.WithField("event", event).Info("webhook: push received; fetch requested")
	return http.StatusAccepted, "fetch requested"
}

// SendPushEvent posts a signed GitHub-style push event for branch to the webhook of the
// GitSource ns/name on the API at apiURL, as a git server would (the demo's post-receive hook,
// benchmarks). c must trust the site's CA. Anything but 202 Accepted is an error.
func SendPushEvent(ctx context.Context, c *http.Client, apiURL, ns, name, branch string, token []byte) error {
	body := fmt.Sprintf(`{"ref":"refs/heads/%s"}`, branch)
	mac := hmac.New(sha256.New, token)
	mac.Write([]byte(body))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(apiURL, "/")+WebhookPathPrefix+ns+"/"+name, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("send the push event: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("the site answered the push event with %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}
