package serviceaccount

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	apiserverserviceaccount "k8s.io/apiserver/pkg/authentication/serviceaccount"
	apiserverjwt "k8s.io/apiserver/pkg/authentication/token/jwt"
)

// leeway is how far the clocks of the issuing and the verifying host may differ, as in
// Kubernetes.
const leeway = jwt.DefaultLeeway

// deletionGrace is how long a token stays valid after the deletionTimestamp of its pod (or
// ServiceAccount), as in Kubernetes: a pod can still use the API while it shuts down (to
// release a lease, say), and not once its grace period is over.
const deletionGrace = time.Minute

// NewAuthenticator verifies the tokens signed with the private key of pub for issuer. A token
// is accepted for the audiences of the request (the API audiences unless a TokenReview asks
// for others) that it was issued for, while the ServiceAccount it names exists with the same
// UID and, for the token of a pod, while that pod exists with the same UID and is less than a
// minute past its deletionTimestamp. Tokens that are not JWTs of issuer are left to the other authenticators.
func NewAuthenticator(pub ed25519.PublicKey, issuer string, apiAudiences []string, getter Getter) authenticator.Token {
	if issuer == "" {
		issuer = DefaultIssuer
	}
	return &tokenAuthenticator{pub: pub, issuer: issuer, apiAudiences: apiAudiences, getter: getter, now: time.Now}
}

type tokenAuthenticator struct {
	pub          ed25519.PublicKey
	issuer       string
	apiAudiences authenticator.Audiences
	getter       Getter
	now          func() time.Time
}

func (a *tokenAuthenticator) AuthenticateToken(ctx context.Context, tokenData string) (*authenticator.Response, bool, error) {
	if !a.ownToken(tokenData) {
		return nil, false, nil
	}
	tok, err := jwt.ParseSigned(tokenData, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return nil, false, fmt.Errorf("service account token: %w", err)
	}
	var public jwt.Claims
	var private claims
	if err := tok.Claims(a.pub, &public, &private); err != nil {
		return nil, false, errors.New("service account token: invalid signature")
	}
	if public.Expiry == nil {
		return nil, false, errors.New("service account token: no expiration")
	}
	switch err := public.ValidateWithLeeway(jwt.Expected{Issuer: a.issuer, Time: a.now()}, leeway); {
	case err == nil:
	case errors.Is(err, jwt.ErrExpired):
		return nil, false, errors.New("service account token has expired")
	case errors.Is(err, jwt.ErrNotValidYet):
		return nil, false, errors.New("service account token is not valid yet")
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return nil, false, errors.New("service account token is issued in the future")
	default:
		return nil, false, fmt.Errorf("service account token: %w", err)
	}

	requested, ok := authenticator.AudiencesFrom(ctx)
	if !ok {
		requested = a.apiAudiences
	}
	auds := authenticator.Audiences(public.Audience).Intersect(requested)
	if len(auds) == 0 {
		return nil, false, fmt.Errorf("service account token audiences %q are invalid for the target audiences %q", []string(public.Audience), []string(requested))
	}

	k := private.Kubernetes
	if k == nil || k.Namespace == "" || k.ServiceAccount.Name == "" || k.ServiceAccount.UID == "" ||
		public.Subject != apiserverserviceaccount.MakeUsername(k.Namespace, k.ServiceAccount.Name) {
		return nil, false, errors.New("service account token: missing or inconsistent kubernetes.io claims")
	}
	if err := a.stillBound(k); err != nil {
		return nil, false, err
	}
	info := &apiserverserviceaccount.ServiceAccountInfo{
		Namespace:    k.Namespace,
		Name:         k.ServiceAccount.Name,
		UID:          k.ServiceAccount.UID,
		CredentialID: apiserverjwt.CredentialIDForJTI(public.ID),
	}
	if k.Pod != nil {
		info.PodName, info.PodUID = k.Pod.Name, k.Pod.UID
	}
	if k.Node != nil {
		info.NodeName = k.Node.Name
	}
	return &authenticator.Response{User: info.UserInfo(), Audiences: auds}, true, nil
}

// ownToken reports whether tokenData looks like a JWT of a.issuer, from its unverified
// payload: other bearer tokens are none of this authenticator's business.
func (a *tokenAuthenticator) ownToken(tokenData string) bool {
	parts := strings.Split(tokenData, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	return json.Unmarshal(payload, &c) == nil && c.Issuer == a.issuer
}

// stillBound checks that the objects the token names still exist as they were when it was
// issued: a ServiceAccount or pod deleted (or re-created under the same name) revokes it.
func (a *tokenAuthenticator) stillBound(k *kubernetesClaims) error {
	sa, err := a.getter.ServiceAccount(k.Namespace, k.ServiceAccount.Name)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("service account token of %s/%s: the service account no longer exists", k.Namespace, k.ServiceAccount.Name)
	case err != nil:
		return fmt.Errorf("service account token of %s/%s: %w", k.Namespace, k.ServiceAccount.Name, err)
	case string(sa.UID) != k.ServiceAccount.UID:
		return fmt.Errorf("service account token of %s/%s: the service account was re-created (UID %s, the token is of %s)",
			k.Namespace, k.ServiceAccount.Name, sa.UID, k.ServiceAccount.UID)
	case sa.DeletionTimestamp != nil && a.now().After(sa.DeletionTimestamp.Add(deletionGrace)):
		return fmt.Errorf("service account token of %s/%s: the service account has been deleted", k.Namespace, k.ServiceAccount.Name)
	}
	if k.Pod == nil {
		return nil
	}
	pod, err := a.getter.Pod(k.Namespace, k.Pod.Name)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("service account token of pod %s/%s: the pod no longer exists", k.Namespace, k.Pod.Name)
	case err != nil:
		return fmt.Errorf("service account token of pod %s/%s: %w", k.Namespace, k.Pod.Name, err)
	case string(pod.UID) != k.Pod.UID:
		return fmt.Errorf("service account token of pod %s/%s: the pod was re-created (UID %s, the token is of %s)",
			k.Namespace, k.Pod.Name, pod.UID, k.Pod.UID)
	case pod.DeletionTimestamp != nil && a.now().After(pod.DeletionTimestamp.Add(deletionGrace)):
		return fmt.Errorf("service account token of pod %s/%s: the pod has been deleted", k.Namespace, k.Pod.Name)
	}
	return nil
}
