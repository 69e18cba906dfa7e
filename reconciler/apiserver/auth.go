package apiserver

import (
	"context"
	"crypto/ed25519"
	"fmt"
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
	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
)

// siteAuth is how the server authenticates and authorizes requests.
type siteAuth struct {
	authn        authenticator.Request
	apiAudiences authenticator.Audiences
	// authz is system:masters (break-glass) first, then RBAC.
	authz authorizer.Authorizer
	rbac  *rbac.Authorizer
	// tokens issues ServiceAccount tokens (nil without a signing key).
	tokens *TokenIssuer
}

// newSiteAuth configures authentication and authorization:
//   - client certificates signed by cfg.ClientCAFile: the common name is the user, the
//     organizations are its groups (flotilla kubeconfig create, the hosts' components);
//   - bearer tokens: the static tokens of cfg.Tokens (the site admin), then ServiceAccount
//     tokens signed with cfg.ServiceAccountKey, valid only while their ServiceAccount (and
//     the pod they are bound to) exist;
//   - no anonymous requests: without a credential the answer is 401.
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
		reqAuth = append(reqAuth, x509.NewDynamic(ca.VerifyOptions, x509.CommonNameUserConversion))
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
	chain, err := authzunion.New(
		authzunion.NamedAuthorizer{AuthorizerName: "system:masters", Authorizer: authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)},
		authzunion.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: rb})
	if err != nil {
		return nil, err
	}
	a.authz = componentDenialLogger{chain}
	return a, nil
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
			logrus.WithFields(logrus.Fields{
				"user": name, "verb": attrs.GetVerb(), "group": attrs.GetAPIGroup(), "resource": attrs.GetResource(),
				"subresource": attrs.GetSubresource(), "namespace": attrs.GetNamespace(), "name": attrs.GetName(), "path": attrs.GetPath(),
			}).Warn("a flotilla component was denied a request: its bootstrap role lacks a rule")
			break
		}
	}
	return d, reason, err
}
