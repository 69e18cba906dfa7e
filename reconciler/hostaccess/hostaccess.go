// Package hostaccess keeps the site's decisions on which hosts may be part of it: the hosts
// removed with `flotilla host remove` (ConfigMap kube-system/flotilla-revoked-hosts) and the
// current join token (Secret kube-system/flotilla-join-token, written by `flotilla token
// rotate`). Both live in the API, so every server sees a change within a watch's delay:
//
//   - the API servers refuse a removed host's client certificates issued before its
//     removal (CertRevoked);
//   - the join endpoints refuse the old token once it is rotated, and a removed host's name
//     until the token changed after its removal (Policy);
//   - gossip ignores a removed host (Revocations.Banned).
package hostaccess

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

const (
	// Namespace holds both objects.
	Namespace = "kube-system"
	// RevokedHostsConfigMap lists the removed hosts: one key per host name, its value a
	// Revocation in JSON.
	RevokedHostsConfigMap = "flotilla-revoked-hosts"
	// JoinTokenSecret holds the current join token's SHA-256 (key token-sha256) and its
	// generation (key generation). Without it the site still admits the token its first host
	// made (generation 0).
	JoinTokenSecret = "flotilla-join-token"

	tokenHashKey  = "token-sha256"
	generationKey = "generation"
	// nodeUserPrefix is the user name prefix of a host's node identity (system:node:<name>).
	nodeUserPrefix = "system:node:"
)

// Revocation records one removed host.
type Revocation struct {
	// RevokedAt: the host's certificates issued before are refused.
	RevokedAt time.Time `json:"revokedAt"`
	// TokenGeneration is the join token's generation when the host was removed: it may join
	// again only with a token of a later generation.
	TokenGeneration int64 `json:"tokenGeneration"`
	// Readmitted is set when it joined again with a newer token: gossip takes it back, its
	// old certificates stay refused.
	Readmitted bool `json:"readmitted,omitempty"`
}

// ParseRevocations reads the ConfigMap's entries; an entry that is not a Revocation counts
// as revoked now (fail closed) and is reported in the error.
func ParseRevocations(cm *corev1.ConfigMap) (map[string]Revocation, error) {
	out := map[string]Revocation{}
	if cm == nil {
		return out, nil
	}
	var bad []string
	for name, v := range cm.Data {
		var r Revocation
		if err := json.Unmarshal([]byte(v), &r); err != nil || r.RevokedAt.IsZero() {
			bad = append(bad, name)
			r = Revocation{RevokedAt: time.Now().Add(time.Hour)}
		}
		out[name] = r
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return out, fmt.Errorf("ConfigMap %s/%s: entries %s are not {\"revokedAt\": RFC 3339 time, \"tokenGeneration\": N}: they are treated as revoked now", Namespace, RevokedHostsConfigMap, strings.Join(bad, ", "))
	}
	return out, nil
}

// CertRevoked reports whether revocations refuse a client certificate of user that starts
// at notBefore. Only node identities (system:node:<name>) are revoked; a certificate counts
// as issued pki.SignBackdate (signBackdate) after its notBefore, as every certificate the
// site signs is backdated that much.
func CertRevoked(revs map[string]Revocation, user string, notBefore time.Time, signBackdate time.Duration) bool {
	name, ok := strings.CutPrefix(user, nodeUserPrefix)
	if !ok {
		return false
	}
	r, ok := revs[name]
	if !ok {
		return false
	}
	return !notBefore.Add(signBackdate).After(r.RevokedAt)
}

// TokenHash is what JoinTokenSecret stores of a token's secret.
func TokenHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// JoinToken is the site's current join token as the API stores it.
type JoinToken struct {
	Hash       string
	Generation int64
	// Found is false when the site never rotated its token.
	Found bool
}

// GetJoinToken reads JoinTokenSecret.
func GetJoinToken(ctx context.Context, c kubernetes.Interface) (JoinToken, error) {
	s, err := c.CoreV1().Secrets(Namespace).Get(ctx, JoinTokenSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return JoinToken{}, nil
	}
	if err != nil {
		return JoinToken{}, err
	}
	gen, err := strconv.ParseInt(string(s.Data[generationKey]), 10, 64)
	if err != nil || len(s.Data[tokenHashKey]) == 0 {
		return JoinToken{}, fmt.Errorf("Secret %s/%s is malformed (want keys %s and %s): run flotilla token rotate", Namespace, JoinTokenSecret, tokenHashKey, generationKey)
	}
	return JoinToken{Hash: string(s.Data[tokenHashKey]), Generation: gen, Found: true}, nil
}

// Matches reports whether secret is this token (constant time).
func (t JoinToken) Matches(secret string) bool {
	return subtle.ConstantTimeCompare([]byte(TokenHash(secret)), []byte(t.Hash)) == 1
}

// RotateToken makes secret the site's join token, one generation after the current one,
// and returns that generation. The previous token stops admitting hosts at once.
func RotateToken(ctx context.Context, c kubernetes.Interface, secret string) (int64, error) {
	var gen int64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := c.CoreV1().Secrets(Namespace).Get(ctx, JoinTokenSecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			gen = 1
			_, err = c.CoreV1().Secrets(Namespace).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: JoinTokenSecret, Namespace: Namespace},
				Data:       map[string][]byte{tokenHashKey: []byte(TokenHash(secret)), generationKey: []byte("1")},
			}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		prev, _ := strconv.ParseInt(string(s.Data[generationKey]), 10, 64)
		gen = prev + 1
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[tokenHashKey] = []byte(TokenHash(secret))
		s.Data[generationKey] = []byte(strconv.FormatInt(gen, 10))
		_, err = c.CoreV1().Secrets(Namespace).Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
	return gen, err
}

// Revoke records name as removed now, at the current token generation. Removing a host
// removed before renews its record (its certificates issued since are refused too).
func Revoke(ctx context.Context, c kubernetes.Interface, name string, now time.Time) (Revocation, error) {
	tok, err := GetJoinToken(ctx, c)
	if err != nil {
		return Revocation{}, err
	}
	r := Revocation{RevokedAt: now.UTC().Truncate(time.Second).Add(time.Second), TokenGeneration: tok.Generation}
	return r, updateRevocations(ctx, c, func(data map[string]string) error {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		data[name] = string(b)
		return nil
	})
}

// Readmit marks a removed host as joined again (with a newer token).
func Readmit(ctx context.Context, c kubernetes.Interface, name string) error {
	return updateRevocations(ctx, c, func(data map[string]string) error {
		var r Revocation
		if err := json.Unmarshal([]byte(data[name]), &r); err != nil {
			return nil // not (or no longer) revoked
		}
		r.Readmitted = true
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		data[name] = string(b)
		return nil
	})
}

func updateRevocations(ctx context.Context, c kubernetes.Interface, change func(map[string]string) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cms := c.CoreV1().ConfigMaps(Namespace)
		cm, err := cms.Get(ctx, RevokedHostsConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: RevokedHostsConfigMap, Namespace: Namespace}, Data: map[string]string{}}
			if err := change(cm.Data); err != nil {
				return err
			}
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if err := change(cm.Data); err != nil {
			return err
		}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}

// Join refusals of Policy.Admit.
var (
	ErrWrongToken = errors.New("the token does not match this site's current join token (check --token-file; after flotilla token rotate only the new token admits hosts)")
)

// RemovedError refuses a removed host's join with the token it was removed under.
type RemovedError struct{ Name string }

func (e *RemovedError) Error() string {
	return fmt.Sprintf("host %s was removed from this site (flotilla host remove): it may join again only with a new join token (run flotilla token rotate on a server and use the token it prints)", e.Name)
}

// Policy decides joins for the join endpoint of a server.
type Policy struct {
	// Client reads (and, when a removed host is readmitted, updates) the two objects.
	Client kubernetes.Interface
	// Initial is the secret of the token the site started with, admitted until the first
	// rotation.
	Initial string
}

// Admit checks a join request's token and host name. It returns ErrWrongToken, a
// *RemovedError, or another error when the API could not answer.
func (p *Policy) Admit(ctx context.Context, secret, name string) error {
	tok, err := GetJoinToken(ctx, p.Client)
	if err != nil {
		return fmt.Errorf("read the site's join token: %w", err)
	}
	if tok.Found && !tok.Matches(secret) || !tok.Found && subtle.ConstantTimeCompare([]byte(secret), []byte(p.Initial)) != 1 {
		return ErrWrongToken
	}
	revs, err := p.revocations(ctx)
	if err != nil {
		return err
	}
	if r, ok := revs[name]; ok && !r.Readmitted && r.TokenGeneration >= tok.Generation {
		return &RemovedError{Name: name}
	}
	return nil
}

// Admitted records that name joined: a removed host that joined with a newer token is
// readmitted.
func (p *Policy) Admitted(ctx context.Context, name string) error {
	revs, err := p.revocations(ctx)
	if err != nil {
		return err
	}
	if r, ok := revs[name]; ok && !r.Readmitted {
		return Readmit(ctx, p.Client, name)
	}
	return nil
}

func (p *Policy) revocations(ctx context.Context) (map[string]Revocation, error) {
	cm, err := p.Client.CoreV1().ConfigMaps(Namespace).Get(ctx, RevokedHostsConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the removed hosts: %w", err)
	}
	// Malformed entries count as removed now (ParseRevocations): refusing is the safe side.
	revs, _ := ParseRevocations(cm)
	return revs, nil
}
