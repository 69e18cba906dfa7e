package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// serviceAccountTokens requests and caches the tokens of projected serviceAccountToken
// sources, bound to their pod. Every sync of a pod asks again; only tokens due for a refresh
// cost a TokenRequest.
type serviceAccountTokens struct {
	client kubernetes.Interface
	log    *logrus.Entry
	now    func() time.Time

	mu     sync.Mutex
	tokens map[tokenKey]cachedToken
	// failed is the last failure of each key, so a failure that repeats at every sync is
	// logged once.
	failed map[tokenKey]string
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

func newServiceAccountTokens(client kubernetes.Interface, log *logrus.Entry) *serviceAccountTokens {
	return &serviceAccountTokens{client: client, log: log, now: time.Now,
		tokens: map[tokenKey]cachedToken{}, failed: map[tokenKey]string{}}
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
	t.mu.Lock()
	t.tokens[key] = cachedToken{token: []byte(out.Status.Token), issued: now, expires: expires}
	delete(t.failed, key)
	t.mu.Unlock()
	return []byte(out.Status.Token), nil
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

// forget drops the tokens of a pod.
func (t *serviceAccountTokens) forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
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
}

// prune drops the tokens of every pod not in alive (pod uids).
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
}
