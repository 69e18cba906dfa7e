package apiserver

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/sirupsen/logrus"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	requestunion "k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authzunion "k8s.io/apiserver/pkg/authorization/union"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/authn/serviceaccount"
	nodeauthz "github.com/flotilla-dev/flotilla/reconciler/authz/node"
	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
	"github.com/flotilla-dev/flotilla/reconciler/hostaccess"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// siteAuth is how the server authenticates and authorizes requests.
type siteAuth struct {
	authn        authenticator.Request
	apiAudiences authenticator.Audiences
	// authz is system:masters (break-glass) first, then the Node authorizer (a host's
	// reads of what its pods use), then RBAC.
	authz authorizer.Authorizer
	rbac  *rbac.Authorizer
	// tokens issues ServiceAccount tokens (nil without a signing key).
	tokens *TokenIssuer
	// revoked follows the hosts removed from the site, whose certificates are refused.
	revoked *hostaccess.Revocations
}

// newSiteAuth configures authentication and authorization:
//   - client certificates signed by cfg.ClientCAFile: the common name is the user, the
//     organizations are its groups (flotilla kubeconfig create, the hosts' components);
//   - bearer tokens: the static tokens of cfg.Tokens (the site admin), then ServiceAccount
//     tokens signed with cfg.ServiceAccountKey, valid only while their ServiceAccount (and
//     the pod they are bound to) exist;
//   - no anonymous requests: without a credential the answer is 401;
//   - a client certificate of a host removed from the site (flotilla host remove), issued
//     before its removal, is refused (401) as soon as this server's watch of the removed
//     hosts sees it.
//
// Every authenticated user is in system:authenticated. Requests are allowed for
// system:masters, otherwise by RBAC; denials of flotilla's own components are logged, as
// they mean the bootstrap policy lacks a rule.
func newSiteAuth(cfg Config, f informers.SharedInformerFactory, client kubernetes.Interface, serving **genericapiserver.SecureServingInfo) (*siteAuth, error) {
	a := &siteAuth{apiAudiences: authenticator.Audiences{serviceaccount.DefaultIssuer}}
	var reqAuth []authenticator.Request
	if cfg.ClientCAFile != "" {
		caPEM, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		ca, err := dynamiccertificates.NewStaticCAContent("client-ca", caPEM)
		if err != nil {
			return nil, fmt.Errorf("client CA %s: %w", cfg.ClientCAFile, err)
		}
		auth := genericapiserver.AuthenticationInfo{}
		if err := auth.ApplyClientCert(ca, *serving); err != nil {
			return nil, err
		}
		a.revoked = hostaccess.NewRevocations(client, pki.SignBackdate)
		reqAuth = append(reqAuth, revokedCertRefuser{x509.NewDynamic(ca.VerifyOptions, x509.CommonNameUserConversion), a.revoked})
	}
	tokens := []authenticator.Token{tokenfile.New(cfg.Tokens)}
	if cfg.ServiceAccountKey != nil {
		getter := serviceaccount.NewGetter(f, client)
		tokens = append(tokens, serviceaccount.NewAuthenticator(cfg.ServiceAccountKey.Public().(ed25519.PublicKey),
			serviceaccount.DefaultIssuer, a.apiAudiences, getter))
		a.tokens = &TokenIssuer{
			Signer:       serviceaccount.NewSigner(cfg.ServiceAccountKey, serviceaccount.DefaultIssuer),
			Getter:       getter,
			APIAudiences: a.apiAudiences,
			MaxLifetime:  cfg.MaxTokenLifetime,
		}
	}
	reqAuth = append(reqAuth, bearertoken.New(tokenunion.New(tokens...)))
	a.authn = group.NewAuthenticatedGroupAdder(requestunion.New(reqAuth...))

	rb, err := rbac.NewFromInformers(f.Rbac().V1())
	if err != nil {
		return nil, err
	}
	a.rbac = rb
	nodeAuthz, err := nodeauthz.NewFromInformers(f)
	if err != nil {
		return nil, err
	}
	chain, err := authzunion.New(
		authzunion.NamedAuthorizer{AuthorizerName: "system:masters", Authorizer: authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)},
		authzunion.NamedAuthorizer{AuthorizerName: "node", Authorizer: nodeAuthz},
		authzunion.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: rb})
	if err != nil {
		return nil, err
	}
	a.authz = componentDenialLogger{chain}
	return a, nil
}

// revokedCertRefuser refuses the certificates of removed hosts.
type revokedCertRefuser struct {
	authenticator.Request
	revoked *hostaccess.Revocations
}

func (r revokedCertRefuser) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	resp, ok, err := r.Request.AuthenticateRequest(req)
	if !ok || err != nil || req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return resp, ok, err
	}
	if cert := req.TLS.PeerCertificates[0]; r.revoked.CertRevoked(resp.User.GetName(), cert.NotBefore) {
		return nil, false, fmt.Errorf("the certificate of %s was revoked: the host was removed from the site", resp.User.GetName())
	}
	return resp, ok, err
}

// componentDenialLogger logs the requests of flotilla's own components that are denied.
type componentDenialLogger struct{ authorizer.Authorizer }

// componentUserPrefixes are the user names of flotilla's components.
var componentUserPrefixes = []string{"system:controller:", "system:node:", "system:kube-controller-manager", "system:kube-scheduler"}

func (l componentDenialLogger) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	d, reason, err := l.Authorizer.Authorize(ctx, attrs)
	if d == authorizer.DecisionAllow || attrs.GetUser() == nil {
		return d, reason, err
	}
	name := attrs.GetUser().GetName()
	for _, p := range componentUserPrefixes {
		if strings.HasPrefix(name, p) {
			log := logrus.WithFields(logrus.Fields{
				"user": name, "verb": attrs.GetVerb(), "group": attrs.GetAPIGroup(), "resource": attrs.GetResource(),
				"subresource": attrs.GetSubresource(), "namespace": attrs.GetNamespace(), "name": attrs.GetName(), "path": attrs.GetPath(),
			})
			if nodeReadOfReference(attrs) {
				// The Node authorizer's ordinary refusals: a pod bound a moment before this
				// server's informer saw it, or the last watches of a pod just deleted.
				log.Debug("a host was refused an object no pod bound to it references (yet)")
			} else {
				log.Warn("a flotilla component was denied a request: its bootstrap role lacks a rule")
			}
			break
		}
	}
	return d, reason, err
}

// nodeReadOfReference reports whether attrs is a host's read of a kind the Node authorizer
// decides, or its update or patch of a PersistentVolume (the cleanup finalizer of a local
// volume, refused when the volume is not labelled for it).
func nodeReadOfReference(attrs authorizer.Attributes) bool {
	if _, ok := nodeauthz.NodeName(attrs.GetUser()); !ok || attrs.GetAPIGroup() != "" || attrs.GetSubresource() != "" {
		return false
	}
	switch attrs.GetVerb() {
	case "get", "list", "watch":
	case "update", "patch":
		return attrs.GetResource() == "persistentvolumes"
	default:
		return false
	}
	switch attrs.GetResource() {
	case "secrets", "configmaps", "persistentvolumeclaims", "persistentvolumes":
		return true
	}
	return false
}
