package serviceaccount

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	apiserverserviceaccount "k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// Signer issues ServiceAccount tokens.
type Signer struct {
	pub    ed25519.PublicKey
	issuer string
	signer jose.Signer
	err    error
	now    func() time.Time
}

// NewSigner returns a Signer of EdDSA-signed tokens with the given iss claim (DefaultIssuer
// when empty).
func NewSigner(key ed25519.PrivateKey, issuer string) *Signer {
	if issuer == "" {
		issuer = DefaultIssuer
	}
	s := &Signer{issuer: issuer, now: time.Now}
	if len(key) != ed25519.PrivateKeySize {
		s.err = errors.New("service account signing key: not an Ed25519 private key")
		return s
	}
	s.pub = key.Public().(ed25519.PublicKey)
	kid, err := keyID(s.pub)
	if err != nil {
		s.err = err
		return s
	}
	// The key ID in the header lets verifiers pick the key once there is more than one.
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), kid)
	s.signer, s.err = jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key}, opts)
	return s
}

// PublicKey is the key that verifies the Signer's tokens.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.pub }

// Issuer is the iss claim of the Signer's tokens.
func (s *Signer) Issuer() string { return s.issuer }

// Issue returns a token of sa for audiences, valid for lifetime from now, and when it expires.
// A token of a pod (pod not nil, in sa's namespace) is bound to it: it names the pod and its
// node and stops being valid when the pod is gone.
func (s *Signer) Issue(sa *corev1.ServiceAccount, pod *corev1.Pod, audiences []string, lifetime time.Duration) (string, time.Time, error) {
	if s.err != nil {
		return "", time.Time{}, s.err
	}
	if sa == nil || sa.Name == "" || sa.Namespace == "" || sa.UID == "" {
		return "", time.Time{}, errors.New("issue service account token: the service account needs a namespace, name and UID")
	}
	if pod != nil && (pod.Namespace != sa.Namespace || pod.Name == "" || pod.UID == "") {
		return "", time.Time{}, fmt.Errorf("issue service account token of %s/%s: a bound pod needs a name and UID in the same namespace", sa.Namespace, sa.Name)
	}
	if lifetime < time.Second {
		return "", time.Time{}, fmt.Errorf("issue service account token of %s/%s: lifetime %v is too short", sa.Namespace, sa.Name, lifetime)
	}
	if len(audiences) == 0 {
		return "", time.Time{}, fmt.Errorf("issue service account token of %s/%s: no audience", sa.Namespace, sa.Name)
	}
	// NumericDates are whole seconds: the token's exp is exactly what is returned.
	now := s.now().Truncate(time.Second)
	expires := now.Add(lifetime.Truncate(time.Second))
	public := jwt.Claims{
		Issuer:    s.issuer,
		Subject:   apiserverserviceaccount.MakeUsername(sa.Namespace, sa.Name),
		Audience:  jwt.Audience(audiences),
		Expiry:    jwt.NewNumericDate(expires),
		NotBefore: jwt.NewNumericDate(now),
		IssuedAt:  jwt.NewNumericDate(now),
		ID:        string(uuid.NewUUID()),
	}
	private := claims{Kubernetes: &kubernetesClaims{
		Namespace:      sa.Namespace,
		ServiceAccount: ref{Name: sa.Name, UID: string(sa.UID)},
	}}
	if pod != nil {
		private.Kubernetes.Pod = &ref{Name: pod.Name, UID: string(pod.UID)}
		if pod.Spec.NodeName != "" {
			private.Kubernetes.Node = &ref{Name: pod.Spec.NodeName}
		}
	}
	tok, err := jwt.Signed(s.signer).Claims(public).Claims(private).Serialize()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("sign service account token of %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	return tok, expires, nil
}

// keyID is the kid of a public key as Kubernetes computes it: the unpadded base64url SHA-256
// of its PKIX encoding.
func keyID(pub ed25519.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("service account signing key: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}
