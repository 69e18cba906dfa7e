package certrotation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/connrotation"
)

// ClientConfig returns a copy of base (its host, rate limits, user agent) whose connections
// trust the CA of caFile and present current()'s certificate, which is asked for at each
// TLS handshake, and a function that closes every connection it made: call it when the
// certificate changes so that long-running requests (watches) reconnect with the new one,
// as the kubelet's UpdateTransport does. base's TLS settings are not used.
func ClientConfig(base *rest.Config, caFile string, current func() *tls.Certificate) (*rest.Config, func(), error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("no certificate in %s", caFile)
	}
	tlsCfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    roots,
		ServerName: base.TLSClientConfig.ServerName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := current(); c != nil {
				return c, nil
			}
			// No certificate: the server sees an anonymous client.
			return &tls.Certificate{}, nil
		},
	}
	d := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	tr := utilnet.SetTransportDefaults(&http.Transport{
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsCfg,
		MaxIdleConnsPerHost: 25,
		DialContext:         d.DialContext,
	})
	cfg := rest.CopyConfig(base)
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	cfg.Transport = tr
	return cfg, d.CloseAll, nil
}

// ManagerConfig is what NewManager needs.
type ManagerConfig struct {
	// Name is the certificate's name in logs.
	Name string
	// Store holds the current certificate.
	Store certificate.Store
	// Template is the certificate request (subject and names); a new key is made for
	// every request.
	Template *x509.CertificateRequest
	// SignerName is certificatesv1.KubeAPIServerClientKubeletSignerName or
	// certificatesv1.KubeletServingSignerName; the usages follow from it.
	SignerName string
	// Client files the request: the node's own, current, client credentials.
	Client func() (kubernetes.Interface, error)
	// Lifetime, if set, is asked for as spec.expirationSeconds.
	Lifetime *time.Duration
}

// NewManager returns a certificate.Manager that renews cfg's certificate at a jittered 70–90%
// of its lifetime (and at once if the certificate no longer matches the template); it is
// stopped when ctx ends. Call Start to start it.
func NewManager(ctx context.Context, cfg ManagerConfig) (certificate.Manager, error) {
	var usages func(any) []certificatesv1.KeyUsage
	switch cfg.SignerName {
	case certificatesv1.KubeAPIServerClientKubeletSignerName:
		usages = certificate.DefaultKubeletClientGetUsages
	case certificatesv1.KubeletServingSignerName:
		usages = certificate.DefaultKubeletServingGetUsages
	default:
		return nil, fmt.Errorf("certificate rotation: signer %q is not a kubelet signer", cfg.SignerName)
	}
	if cfg.Client == nil || cfg.Store == nil || cfg.Template == nil {
		return nil, errors.New("certificate rotation: a client, a store and a template are needed")
	}
	return certificate.NewManager(&certificate.Config{
		Name: cfg.Name,
		Ctx:  &ctx,
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) {
			return cfg.Client()
		},
		Template:                     cfg.Template,
		SignerName:                   cfg.SignerName,
		GetUsages:                    usages,
		RequestedCertificateLifetime: cfg.Lifetime,
		CertificateStore:             cfg.Store,
	})
}

// Rotate renews m's certificate now (client-go's manager has RotateCerts for tests); it
// reports whether the certificate changed.
func Rotate(m certificate.Manager) (bool, error) {
	r, ok := m.(interface{ RotateCerts() (bool, error) })
	if !ok {
		return false, errors.New("the certificate manager cannot be asked to rotate")
	}
	return r.RotateCerts()
}

// RotationWindow is when a certificate of that lifetime is renewed: between 70% and 90% of
// it after notBefore (client-go's certificate manager).
func RotationWindow(c *x509.Certificate) (earliest, latest time.Time) {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotBefore.Add(life * 7 / 10), c.NotBefore.Add(life * 9 / 10)
}
