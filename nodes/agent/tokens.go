package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/google/renameio/v2"
	"github.com/sirupsen/logrus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
)

// Lifetimes of projected service account tokens, as the kubelet's token manager: a token is
// requested for an hour unless the source says otherwise, and is requested again once 80 % of
// its lifetime has passed or it is a day old (the API may issue tokens for longer than asked).
// A request that takes longer than tokenRequestTimeout is given up until the next sync.
const (
	defaultTokenExpirationSeconds = 3600
	maxTokenAge                   = 24 * time.Hour
	tokenRequestTimeout           = 10 * time.Second
)

// tokensDirName is the directory of a pod's persisted tokens in its pod directory; it is
// never mounted into a container.
const tokensDirName = "tokens"

// serviceAccountTokens requests and caches the tokens of projected serviceAccountToken
// sources, bound to their pod. Every sync of a pod asks again; only tokens due for a refresh
// cost a TokenRequest. Tokens are also kept on disk in the pod's directory, so that after an
// agent restart a host cut off from the API still has them: while the API is unavailable an
// unexpired token is handed out even when due for a refresh.
type serviceAccountTokens struct {
	client kubernetes.Interface
	log    *logrus.Entry
	now    func() time.Time
	// podDir gives the directory of a pod; nil keeps tokens in memory only.
	podDir func(types.UID) string

	mu     sync.Mutex
	tokens map[tokenKey]cachedToken
	// failed is the last failure of each key, so a failure that repeats at every sync is
	// logged once.
	failed map[tokenKey]string
	// reused holds the keys whose token is handed out past its refresh while the API is
	// unavailable, so that is logged once.
	reused map[tokenKey]bool
}

type tokenKey struct {
	uid               types.UID
	serviceAccount    string
	audience          string
	expirationSeconds int64
}

type cachedToken struct {
	token   []byte
	issued  time.Time
	expires time.Time
}

// persistedToken is the file of a token on disk.
type persistedToken struct {
	UID               types.UID `json:"uid"`
	ServiceAccount    string    `json:"serviceAccount"`
	Audience          string    `json:"audience,omitempty"`
	ExpirationSeconds int64     `json:"expirationSeconds"`
	Token             string    `json:"token"`
	Issued            time.Time `json:"issued"`
	Expires           time.Time `json:"expires"`
}

func newServiceAccountTokens(client kubernetes.Interface, log *logrus.Entry, podDir func(types.UID) string) *serviceAccountTokens {
	return &serviceAccountTokens{client: client, log: log, now: time.Now, podDir: podDir,
		tokens: map[tokenKey]cachedToken{}, failed: map[tokenKey]string{}, reused: map[tokenKey]bool{}}
}

// fresh reports whether the token may still be handed out at now.
func (c cachedToken) fresh(now time.Time) bool {
	if !now.Before(c.issued.Add(maxTokenAge)) {
		return false
	}
	return now.Before(c.issued.Add(c.expires.Sub(c.issued) * 8 / 10))
}

// token returns a token of the pod's service account for the projection, requesting a new
// one when there is none yet or the cached one is due for a refresh.
func (t *serviceAccountTokens) token(ctx context.Context, pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection) ([]byte, error) {
	account := pod.Spec.ServiceAccountName
	if account == "" {
		account = "default"
	}
	exp := int64(defaultTokenExpirationSeconds)
	if p.ExpirationSeconds != nil {
		exp = *p.ExpirationSeconds
	}
	key := tokenKey{uid: pod.UID, serviceAccount: account, audience: p.Audience, expirationSeconds: exp}
	now := t.now()
	t.mu.Lock()
	cached, ok := t.tokens[key]
	t.mu.Unlock()
	if !ok {
		// Not asked for since the agent started: the token it had before, if any.
		if cached, ok = t.load(key); ok {
			t.mu.Lock()
			t.tokens[key] = cached
			t.mu.Unlock()
		}
	}
	if ok && cached.fresh(now) {
		return cached.token, nil
	}

	var audiences []string
	if p.Audience != "" {
		audiences = []string{p.Audience}
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         audiences,
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	rctx, cancel := context.WithTimeout(ctx, tokenRequestTimeout)
	defer cancel()
	out, err := t.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(rctx, account, req, metav1.CreateOptions{})
	if err == nil && out.Status.Token == "" {
		err = errors.New("the API returned an empty token")
	}
	if err != nil {
		if ok && now.Before(cached.expires) && apiUnavailable(err) {
			t.reuse(key, pod, cached, err)
			return cached.token, nil
		}
		err = fmt.Errorf("request a token for service account %q: %w", account, err)
		t.failure(key, pod, err)
		return nil, err
	}
	expires := out.Status.ExpirationTimestamp.Time
	if expires.IsZero() {
		// No expiry reported: assume the lifetime the API says it granted.
		granted := exp
		if out.Spec.ExpirationSeconds != nil {
			granted = *out.Spec.ExpirationSeconds
		}
		expires = now.Add(time.Duration(granted) * time.Second)
	}
	got := cachedToken{token: []byte(out.Status.Token), issued: now, expires: expires}
	t.mu.Lock()
	t.tokens[key] = got
	delete(t.failed, key)
	delete(t.reused, key)
	t.mu.Unlock()
	if err := t.store(key, got); err != nil {
		t.log.WithError(err).WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name, "podUID": pod.UID,
			"audience": key.audience}).Warn("keep the service account token on disk; an agent restart without the API will not have it")
	}
	return got.token, nil
}

// apiUnavailable reports whether a TokenRequest failed because the API could not answer it
// (unreachable, overloaded, without quorum) rather than because it refused it.
func apiUnavailable(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
			apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || status.Status().Code >= 500
	}
	var netErr net.Error
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}

func (t *serviceAccountTokens) reuse(key tokenKey, pod *corev1.Pod, cached cachedToken, err error) {
	t.mu.Lock()
	repeated := t.reused[key]
	t.reused[key] = true
	t.mu.Unlock()
	if !repeated {
		t.log.WithError(err).WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name, "podUID": pod.UID,
			"audience": key.audience, "expires": cached.expires}).Warn("API unreachable; reusing an unexpired service account token")
	}
}

func (t *serviceAccountTokens) failure(key tokenKey, pod *corev1.Pod, err error) {
	t.mu.Lock()
	repeated := t.failed[key] == err.Error()
	t.failed[key] = err.Error()
	t.mu.Unlock()
	if !repeated {
		t.log.WithError(err).WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name, "podUID": pod.UID,
			"audience": key.audience}).Warn("service account token request failed; retrying at the next sync")
	}
}

// tokenFile is the file of key's token, "" when tokens are kept in memory only.
func (t *serviceAccountTokens) tokenFile(key tokenKey) string {
	if t.podDir == nil {
		return ""
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%q %q %q %d", key.uid, key.serviceAccount, key.audience, key.expirationSeconds))
	return filepath.Join(t.podDir(key.uid), tokensDirName, hex.EncodeToString(sum[:]))
}

// store writes the token of key to its file (0600, replaced by a rename).
func (t *serviceAccountTokens) store(key tokenKey, c cachedToken) error {
	path := t.tokenFile(key)
	if path == "" {
		return nil
	}
	data, err := json.Marshal(persistedToken{UID: key.uid, ServiceAccount: key.serviceAccount, Audience: key.audience,
		ExpirationSeconds: key.expirationSeconds, Token: string(c.token), Issued: c.issued, Expires: c.expires})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	// Synced before the rename: the file must survive a power loss.
	return renameio.WriteFile(path, data, 0o600)
}

// load reads the token of key from its file; a missing or unreadable file is no token.
func (t *serviceAccountTokens) load(key tokenKey) (cachedToken, bool) {
	path := t.tokenFile(key)
	if path == "" {
		return cachedToken{}, false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			t.log.WithError(err).WithField("podUID", key.uid).Warn("read a persisted service account token")
		}
		return cachedToken{}, false
	}
	var p persistedToken
	if err := json.Unmarshal(data, &p); err != nil {
		t.log.WithError(err).WithField("file", path).Warn("ignoring an unreadable persisted service account token")
		return cachedToken{}, false
	}
	if p.Token == "" || p.UID != key.uid || p.ServiceAccount != key.serviceAccount || p.Audience != key.audience ||
		p.ExpirationSeconds != key.expirationSeconds {
		t.log.WithField("file", path).Warn("ignoring a persisted service account token that is not the one asked for")
		return cachedToken{}, false
	}
	return cachedToken{token: []byte(p.Token), issued: p.Issued, expires: p.Expires}, true
}

// forget drops the tokens of a pod, from memory and from disk. Its only caller runs after
// the worker's cleanup removed the pod's directory, tokens included, so the removal here
// rarely has anything left to do.
func (t *serviceAccountTokens) forget(uid types.UID) {
	t.mu.Lock()
	for k := range t.tokens {
		if k.uid == uid {
			delete(t.tokens, k)
		}
	}
	for k := range t.failed {
		if k.uid == uid {
			delete(t.failed, k)
		}
	}
	for k := range t.reused {
		if k.uid == uid {
			delete(t.reused, k)
		}
	}
	t.mu.Unlock()
	if t.podDir != nil {
		if err := os.RemoveAll(filepath.Join(t.podDir(uid), tokensDirName)); err != nil {
			t.log.WithError(err).WithField("podUID", uid).Warn("remove the pod's persisted service account tokens")
		}
	}
}

// prune drops the tokens of every pod not in alive (pod uids) from memory; their files go
// with the pod's directory, which the caller's garbage collection removes.
func (t *serviceAccountTokens) prune(alive map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.tokens {
		if !alive[string(k.uid)] {
			delete(t.tokens, k)
		}
	}
	for k := range t.failed {
		if !alive[string(k.uid)] {
			delete(t.failed, k)
		}
	}
	for k := range t.reused {
		if !alive[string(k.uid)] {
			delete(t.reused, k)
		}
	}
}
