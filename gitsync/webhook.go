package gitsync

import (
	"container/list"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// WebhookPathPrefix is where push webhooks are received: <prefix><namespace>/<name>.
	WebhookPathPrefix = "/hooks/git/"
	// RequestedAtAnnotation on a GitSource asks the leader's controller to fetch at once; the
	// webhook sets it to the time of the push (RFC 3339 with nanoseconds).
	RequestedAtAnnotation = "flotilla.dev/requested-at"
	// WebhookTokenKey is the key of the webhook Secret holding the shared token.
	WebhookTokenKey = "token"
	// MaxHookBody bounds the body of one delivery. Push events are far smaller (GitHub lists
	// at most 20 commits); a larger one is refused with 413 and the push waits for the next
	// poll.
	MaxHookBody = 1 << 20
	// maxDeliveryID bounds the delivery IDs remembered (GitHub's and Gitea's are GUIDs).
	maxDeliveryID = 128
)

// Webhook providers.
const (
	ProviderGitHub = "github"
	ProviderGitLab = "gitlab"
	ProviderGitea  = "gitea"
)

// ErrBadSignature is returned by VerifyHook when the request is not authenticated by the token.
var ErrBadSignature = errors.New("signature does not match the GitSource's webhook token")

// hookSignature is what a delivery's headers claim, read and checked for form before any
// of its body is.
type hookSignature struct {
	provider string
	// mac is the HMAC-SHA256 of the body (GitHub, Gitea); token the token itself (GitLab).
	mac, token []byte
}

// parseSignature reads the signature header of a delivery: Gitea's X-Gitea-Signature (64
// hex digits; Gitea also sends X-Hub-Signature-256, which proves the same thing), GitHub's
// X-Hub-Signature-256 ("sha256=" and 64 hex digits) or GitLab's X-Gitlab-Token. A header
// that is there but malformed returns its provider and an error.
func parseSignature(h http.Header) (hookSignature, error) {
	decode := func(s string) ([]byte, bool) {
		s = strings.TrimSpace(s)
		if len(s) != 2*sha256.Size {
			return nil, false
		}
		b, err := hex.DecodeString(s)
		return b, err == nil
	}
	switch {
	case h.Get("X-Gitea-Signature") != "":
		mac, ok := decode(h.Get("X-Gitea-Signature"))
		if !ok {
			return hookSignature{provider: ProviderGitea}, errors.New("X-Gitea-Signature must be the 64 hex digits of the body's HMAC-SHA256")
		}
		return hookSignature{provider: ProviderGitea, mac: mac}, nil
	case h.Get("X-Hub-Signature-256") != "":
		sig, found := strings.CutPrefix(strings.TrimSpace(h.Get("X-Hub-Signature-256")), "sha256=")
		mac, ok := decode(sig)
		if !found || !ok {
			return hookSignature{provider: ProviderGitHub}, errors.New(`X-Hub-Signature-256 must be "sha256=" followed by the 64 hex digits of the body's HMAC-SHA256`)
		}
		return hookSignature{provider: ProviderGitHub, mac: mac}, nil
	case h.Get("X-Gitlab-Token") != "":
		return hookSignature{provider: ProviderGitLab, token: []byte(h.Get("X-Gitlab-Token"))}, nil
	}
	return hookSignature{}, errors.New("no X-Hub-Signature-256, X-Gitea-Signature or X-Gitlab-Token header: give the webhook a secret on the git server (the token of the GitSource's spec.webhookSecretRef)")
}

// verify reports whether the delivery is authenticated by key. It does the same work
// whatever key is, so that a throwaway key takes as long as the real one.
func (s hookSignature) verify(body, key []byte) bool {
	if s.provider == ProviderGitLab {
		// Digests, so that the comparison takes as long whatever the lengths.
		got, want := sha256.Sum256(s.token), sha256.Sum256(key)
		return hmac.Equal(got[:], want[:])
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return hmac.Equal(mac.Sum(nil), s.mac)
}

// deliveryID returns the delivery's ID by provider: X-GitHub-Delivery, X-Gitea-Delivery
// (or X-GitHub-Delivery, which Gitea also sends) or X-Gitlab-Event-UUID.
func deliveryID(provider string, h http.Header) (string, error) {
	header := "X-GitHub-Delivery"
	id := h.Get(header)
	switch provider {
	case ProviderGitea:
		if v := h.Get("X-Gitea-Delivery"); v != "" || id == "" {
			header, id = "X-Gitea-Delivery", v
		}
	case ProviderGitLab:
		header = "X-Gitlab-Event-UUID"
		id = h.Get(header)
	}
	if id == "" {
		return "", fmt.Errorf("no %s header: every delivery needs its ID, by which a replayed one is refused", header)
	}
	if len(id) > maxDeliveryID || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return "", fmt.Errorf("%s must be at most %d printable characters without spaces", header, maxDeliveryID)
	}
	return id, nil
}

// VerifyHook authenticates a webhook request by the shared token: GitHub's
// X-Hub-Signature-256 ("sha256=<hex HMAC of the body>"), Gitea's X-Gitea-Signature (hex HMAC)
// or GitLab's X-Gitlab-Token (the token itself). It returns the provider that signed it.
func VerifyHook(h http.Header, body, token []byte) (string, error) {
	if len(token) == 0 {
		return "", errors.New("the webhook token is empty")
	}
	sig, err := parseSignature(h)
	if err != nil {
		if sig.provider == "" {
			return "", err
		}
		return sig.provider, ErrBadSignature
	}
	if !sig.verify(body, token) {
		return sig.provider, ErrBadSignature
	}
	return sig.provider, nil
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

// WebhookConfig bounds what webhook requests may cost a host. DefaultWebhookConfig holds
// the defaults; zero fields take them.
type WebhookConfig struct {
	// MaxBody bounds the body of one delivery (MaxHookBody).
	MaxBody int64
	// ReplayWindow is how long the IDs of authenticated deliveries are remembered (24h), and
	// MaxDeliveries how many at most (10,000; the oldest are forgotten first).
	ReplayWindow  time.Duration
	MaxDeliveries int
	// Rate and Burst are the token bucket of each client address (2/s, burst 20); an IPv6
	// client is counted by its /64. MaxClients bounds the addresses tracked (10,000; the
	// least recently seen are dropped first).
	Rate       rate.Limit
	Burst      int
	MaxClients int
	// APITimeout bounds the API requests of one delivery (10s).
	APITimeout time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// DefaultWebhookConfig returns the defaults: 1 MiB bodies, delivery IDs remembered 24h (at
// most 10,000), 2 requests a second per client address with bursts of 20.
func DefaultWebhookConfig() WebhookConfig {
	return WebhookConfig{MaxBody: MaxHookBody, ReplayWindow: 24 * time.Hour, MaxDeliveries: 10000,
		Rate: 2, Burst: 20, MaxClients: 10000, APITimeout: 10 * time.Second}
}

func (c WebhookConfig) withDefaults() WebhookConfig {
	d := DefaultWebhookConfig()
	if c.MaxBody <= 0 {
		c.MaxBody = d.MaxBody
	}
	if c.ReplayWindow <= 0 {
		c.ReplayWindow = d.ReplayWindow
	}
	if c.MaxDeliveries <= 0 {
		c.MaxDeliveries = d.MaxDeliveries
	}
	if c.Rate <= 0 {
		c.Rate = d.Rate
	}
	if c.Burst <= 0 {
		c.Burst = d.Burst
	}
	if c.MaxClients <= 0 {
		c.MaxClients = d.MaxClients
	}
	if c.APITimeout <= 0 {
		c.APITimeout = d.APITimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

type hookClients struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

// Webhook receives git push webhooks, on the host's webhook port (--webhook-port) and on the
// API port, in front of the API's authentication: it authenticates them itself. Any host
// may receive the push while only the leader runs gitsync: the handler verifies and then
// annotates the GitSource with RequestedAtAnnotation, which the leader's controller watches.
//
// What an unauthenticated caller can cost is bounded before the body is read: the
// signature header must be there and well formed, the body at most MaxBody, and each
// client address has a token bucket (429 with Retry-After). A source that does not exist,
// has no webhookSecretRef or whose Secret has no token answers like a bad signature, after
// the same reads and the same HMAC (with a throwaway key), so that neither the answer nor
// its timing tells which sources exist. Authenticated delivery IDs are remembered for
// ReplayWindow and a second delivery with one is refused with 409 Conflict. This memory,
// like the rate limits, is the host's own: a delivery replayed to another host of the site
// is refused only if that host saw it too, so expose one host (or a load balancer with
// sticky clients) to the git server.
type Webhook struct {
	cfg        WebhookConfig
	clients    atomic.Pointer[hookClients]
	throwaway  []byte
	deliveries *deliveryLog
	limits     *clientLimits
	log        *logrus.Entry
}

// NewWebhook returns a handler with the defaults that answers 503 until SetConfig gives it
// an API client.
func NewWebhook() *Webhook { return NewWebhookWithConfig(DefaultWebhookConfig()) }

// NewWebhookWithConfig returns a handler with cfg that answers 503 until SetConfig gives
// it an API client.
func NewWebhookWithConfig(cfg WebhookConfig) *Webhook {
	cfg = cfg.withDefaults()
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return &Webhook{
		cfg:        cfg,
		throwaway:  key,
		deliveries: newDeliveryLog(cfg.ReplayWindow, cfg.MaxDeliveries),
		limits:     newClientLimits(cfg.Rate, cfg.Burst, cfg.MaxClients),
		log:        logrus.WithField("component", "git-webhook"),
	}
}

// SetConfig gives the handler its API client: it gets GitSources and Secrets and patches
// GitSources (rbac.GitWebhookUser's role).
func (w *Webhook) SetConfig(cfg *rest.Config) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("webhook client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("webhook client: %w", err)
	}
	w.setClients(kube, dyn)
	return nil
}

func (w *Webhook) setClients(kube kubernetes.Interface, dyn dynamic.Interface) {
	w.clients.Store(&hookClients{kube: kube, dyn: dyn})
}

// refuse answers a request that does not request a fetch. Over HTTP/1 it also closes the
// connection and, when the body was not read to its end (unread), ends the connection's
// reads: net/http would otherwise drain up to 256 KiB of the body when the handler returns.
func refuse(rw http.ResponseWriter, r *http.Request, unread bool, code int, msg string) {
	if r.ProtoMajor == 1 {
		rw.Header().Set("Connection", "close")
		if unread {
			// Not supported behind some wrappers (the API server's): there net/http's
			// 256 KiB bound the drain.
			_ = http.NewResponseController(rw).SetReadDeadline(time.Now())
		}
	}
	http.Error(rw, msg, code)
}

// ServeHTTP handles POST /hooks/git/<namespace>/<name>.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	ns, name, ok := ParseHookPath(r.URL.Path)
	if !ok {
		refuse(rw, r, true, http.StatusNotFound, "want /hooks/git/<namespace>/<name>")
		return
	}
	now := w.cfg.Now()
	if wait := w.limits.reserve(clientKey(r.RemoteAddr), now); wait > 0 {
		rw.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		refuse(rw, r, true, http.StatusTooManyRequests, "too many webhook requests from this address: retry after the number of seconds in Retry-After")
		return
	}
	if r.Method != http.MethodPost {
		refuse(rw, r, true, http.StatusMethodNotAllowed, "webhooks are POST requests")
		return
	}
	sig, err := parseSignature(r.Header)
	if err != nil {
		refuse(rw, r, true, http.StatusUnauthorized, err.Error())
		return
	}
	id, err := deliveryID(sig.provider, r.Header)
	if err != nil {
		refuse(rw, r, true, http.StatusBadRequest, err.Error())
		return
	}
	if r.ContentLength > w.cfg.MaxBody {
		refuse(rw, r, true, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is %d bytes; a webhook delivery may have at most %d", r.ContentLength, w.cfg.MaxBody))
		return
	}
	cl := w.clients.Load()
	if cl == nil {
		refuse(rw, r, true, http.StatusServiceUnavailable, "the API is not ready yet: retry in a few seconds")
		return
	}
	log := w.log.WithFields(logrus.Fields{"source": ns + "/" + name, "remote": r.RemoteAddr, "provider": sig.provider, "delivery": id})
	ctx, cancel := context.WithTimeout(r.Context(), w.cfg.APITimeout)
	defer cancel()
	key, unknown, err := w.token(ctx, cl, ns, name)
	if err != nil {
		log.WithError(err).Error("webhook: cannot read the source's token")
		refuse(rw, r, true, http.StatusServiceUnavailable, "cannot read the webhook token: retry later")
		return
	}
	var body []byte
	unread := sig.provider == ProviderGitLab
	if !unread { // GitLab's token is in its header: its body is not needed
		body, err = io.ReadAll(http.MaxBytesReader(rw, r.Body, w.cfg.MaxBody))
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			refuse(rw, r, true, http.StatusRequestEntityTooLarge, fmt.Sprintf("a webhook delivery may have at most %d bytes of body", w.cfg.MaxBody))
			return
		}
		if err != nil {
			refuse(rw, r, true, http.StatusBadRequest, "read the body: "+err.Error())
			return
		}
	}
	// The same work and the same answer whether or not the source can take webhooks.
	if !sig.verify(body, key) || unknown != "" {
		if unknown != "" {
			log.WithField("reason", unknown).Warn("webhook rejected: the source takes no webhooks")
		} else {
			log.Warn("webhook rejected: bad signature")
		}
		refuse(rw, r, unread, http.StatusUnauthorized, "unauthorized")
		return
	}
	if !w.deliveries.add(id, now) {
		log.Warn("webhook rejected: this delivery was already received (a replay)")
		refuse(rw, r, unread, http.StatusConflict, "delivery "+id+" was already received")
		return
	}
	event, push := IsPush(sig.provider, r.Header)
	if sig.provider == ProviderGitHub && event == "ping" {
		http.Error(rw, "pong", http.StatusOK)
		return
	}
	if !push {
		log.WithField("event", event).Info("webhook: not a push event; ignored")
		http.Error(rw, "ignored: not a push event", http.StatusAccepted)
		return
	}
	at := now.UTC().Format(time.RFC3339Nano)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{RequestedAtAnnotation: at}}})
	if _, err := cl.dyn.Resource(GitSourceResource).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		// The git server retries with the same ID: it is not a replay.
		w.deliveries.forget(id)
		log.WithError(err).Error("webhook: annotate GitSource")
		refuse(rw, r, unread, http.StatusServiceUnavailable, "cannot record the request: retry later")
		return
	}
	log.WithField("event", event).Info("webhook: push received; fetch requested")
	http.Error(rw, "fetch requested", http.StatusAccepted)
}

// noSecret is the Secret read for a source that names none: not a valid object name, so no
// Secret has it.
const noSecret = "flotilla-no-webhook-secret-"

// token returns the webhook token of GitSource ns/name. For a source that does not exist,
// has no spec.webhookSecretRef, or whose Secret does not exist or has no token, it returns
// the throwaway key and why (unknown). Either way it makes the same two reads (a GitSource,
// a Secret), so that the time of the answer does not tell them apart.
func (w *Webhook) token(ctx context.Context, cl *hookClients, ns, name string) (key []byte, unknown string, err error) {
	secret := noSecret
	u, err := cl.dyn.Resource(GitSourceResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		unknown = "the GitSource does not exist"
	case err != nil:
		return nil, "", fmt.Errorf("get GitSource %s/%s: %w", ns, name, err)
	default:
		ref, _, _ := unstructured.NestedString(u.Object, "spec", "webhookSecretRef", "name")
		if ref == "" {
			unknown = "the GitSource has no spec.webhookSecretRef"
		} else {
			secret = ref
		}
	}
	s, err := cl.kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	switch {
	case unknown != "" && (err == nil || apierrors.IsNotFound(err)):
	case apierrors.IsNotFound(err):
		unknown = fmt.Sprintf("Secret %s/%s named by spec.webhookSecretRef does not exist", ns, secret)
	case err != nil:
		return nil, "", fmt.Errorf("get Secret %s/%s named by spec.webhookSecretRef: %w", ns, secret, err)
	case len(s.Data[WebhookTokenKey]) == 0:
		unknown = fmt.Sprintf("Secret %s/%s named by spec.webhookSecretRef has no %q key", ns, secret, WebhookTokenKey)
	default:
		return s.Data[WebhookTokenKey], "", nil
	}
	return w.throwaway, unknown, nil
}

// deliveryLog remembers the IDs of authenticated deliveries for a window, at most max of
// them (the oldest are forgotten first).
type deliveryLog struct {
	mu     sync.Mutex
	window time.Duration
	max    int
	byID   map[string]*list.Element
	order  *list.List // of *delivery, oldest first
}

type delivery struct {
	id string
	at time.Time
}

func newDeliveryLog(window time.Duration, max int) *deliveryLog {
	return &deliveryLog{window: window, max: max, byID: map[string]*list.Element{}, order: list.New()}
}

// add records id at now; it reports false when id was recorded within the window.
func (d *deliveryLog) add(id string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for e := d.order.Front(); e != nil && !now.Before(e.Value.(*delivery).at.Add(d.window)); e = d.order.Front() {
		d.remove(e)
	}
	if _, seen := d.byID[id]; seen {
		return false
	}
	for d.order.Len() >= d.max {
		d.remove(d.order.Front())
	}
	d.byID[id] = d.order.PushBack(&delivery{id: id, at: now})
	return true
}

// forget drops id, for a delivery that did not take effect.
func (d *deliveryLog) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.byID[id]; ok {
		d.remove(e)
	}
}

func (d *deliveryLog) remove(e *list.Element) {
	delete(d.byID, e.Value.(*delivery).id)
	d.order.Remove(e)
}

// clientLimits holds a token bucket per client address, for at most max addresses (the
// least recently seen are dropped first). A bucket idle long enough to have refilled is
// dropped too: a new one is the same.
type clientLimits struct {
	mu    sync.Mutex
	rate  rate.Limit
	burst int
	max   int
	idle  time.Duration
	byKey map[string]*list.Element
	order *list.List // of *client, most recently seen first
}

type client struct {
	key  string
	lim  *rate.Limiter
	seen time.Time
}

func newClientLimits(r rate.Limit, burst, max int) *clientLimits {
	idle := time.Duration(float64(burst) / float64(r) * float64(time.Second))
	return &clientLimits{rate: r, burst: burst, max: max, idle: idle, byKey: map[string]*list.Element{}, order: list.New()}
}

// reserve takes a token of key's bucket at now; it returns how long to wait when there is
// none (and takes nothing).
func (c *clientLimits) reserve(key string, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.order.Back(); e != nil && now.Sub(e.Value.(*client).seen) >= c.idle; e = c.order.Back() {
		c.remove(e)
	}
	var cl *client
	if e, ok := c.byKey[key]; ok {
		c.order.MoveToFront(e)
		cl = e.Value.(*client)
	} else {
		for c.order.Len() >= c.max {
			c.remove(c.order.Back())
		}
		cl = &client{key: key, lim: rate.NewLimiter(c.rate, c.burst)}
		c.byKey[key] = c.order.PushFront(cl)
	}
	cl.seen = now
	r := cl.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d
	}
	return 0
}

func (c *clientLimits) remove(e *list.Element) {
	delete(c.byKey, e.Value.(*client).key)
	c.order.Remove(e)
}

// clientKey is the bucket of a remote address: the IPv4 address, or the /64 of an IPv6 one
// (what one site is usually given). The port is not part of it.
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.WithZone("").Prefix(64)
	return p.String()
}

// SendPushEvent posts a signed GitHub-style push event for branch to the webhook of the
// GitSource ns/name at baseURL (a host's webhook port or API port), as a git server would
// (the demo's post-receive hook, benchmarks), with a new random delivery ID. c must trust
// the certificate of baseURL (the site's CA unless --webhook-tls-cert-file is set). Anything
// but 202 Accepted is an error.
func SendPushEvent(ctx context.Context, c *http.Client, baseURL, ns, name, branch string, token []byte) error {
	body := fmt.Sprintf(`{"ref":"refs/heads/%s"}`, branch)
	mac := hmac.New(sha256.New, token)
	mac.Write([]byte(body))
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(baseURL, "/")+WebhookPathPrefix+ns+"/"+name, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", hex.EncodeToString(id))
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
