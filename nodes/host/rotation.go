package host

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/internal/kubeclient"
	"github.com/flotilla-dev/flotilla/nodes/certrotation"
	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
)

// A worker's two certificates are signed by the site's csrsigning controller for
// --cluster-signing-duration (30 days by default). Each is renewed, as the kubelet renews
// its own, by a client-go certificate manager: at a jittered 70–90% of its lifetime (at
// once when it no longer names the host's address), a new key and a CertificateSigningRequest
// filed with the node's current client certificate; csrapproving approves it (a node's
// own client certificate after a SubjectAccessReview for selfnodeclient, its serving
// certificate when it names only the Node's addresses) and csrsigning signs it. The new
// pair replaces the files in <data-dir>/pki: the node identity presents it from the next
// TLS handshake on, every connection of the old one closed; the node agent's endpoint
// reads the serving pair again when its files change.

// workerNodeConfig makes the worker's node identity over the client certificate of store:
// against the local API proxy, its connections closed when the certificate is renewed.
func (h *Host) workerNodeConfig(store *certrotation.FileStore) (*rest.Config, error) {
	base := &rest.Config{Host: h.localAPIURL(), QPS: 50, Burst: 100}
	cfg, closeAll, err := certrotation.ClientConfig(base, h.ca.CertFile(), store.Cached)
	if err != nil {
		return nil, err
	}
	store.OnUpdate(func(*tls.Certificate) { closeAll() })
	return cfg, nil
}

// workerCert is one of a worker's certificates: what it renews it with.
type workerCert struct {
	purpose string
	signer  string
	tmpl    *x509.CertificateRequest
	store   *certrotation.FileStore
}

// workerCertRequests are the requests of the worker's certificates, as joinAsWorker makes
// them: the client one for system:node:<name> in system:nodes; the serving one also for
// the host's name and advertised address, which its Node reports (csrapproving approves a
// serving certificate of the Node's names only).
func (h *Host) workerCertRequests() []workerCert {
	subject := pkix.Name{CommonName: rbac.NodeUser(h.cfg.Name), Organization: []string{rbac.NodesGroup}}
	return []workerCert{
		{purpose: "client", signer: certificatesv1.KubeAPIServerClientKubeletSignerName, tmpl: &x509.CertificateRequest{Subject: subject}},
		{purpose: "serving", signer: certificatesv1.KubeletServingSignerName, tmpl: &x509.CertificateRequest{Subject: subject,
			DNSNames: []string{h.cfg.Name}, IPAddresses: uniqueIPs(h.advertise)}},
	}
}

// startWorkerRotation starts renewing the worker's client and serving certificates; the
// requests are filed through node, the node identity.
func (h *Host) startWorkerRotation(node *rest.Config, client, serving *certrotation.FileStore) error {
	newClient := func() (kubernetes.Interface, error) { return kubeclient.New(node) }
	stores := map[string]*certrotation.FileStore{"client": client, "serving": serving}
	for _, c := range h.workerCertRequests() {
		c.store = stores[c.purpose]
		log := h.log.WithFields(logrus.Fields{"component": "certificate-rotation", "certificate": c.purpose})
		cur, err := c.store.Current()
		if err != nil {
			return fmt.Errorf("%s certificate: %w", c.purpose, err)
		}
		logValidity(log, cur, "")
		c.store.OnUpdate(func(cert *tls.Certificate) { logValidity(log, cert, "renewed: ") })
		m, err := certrotation.NewManager(h.runCtx, certrotation.ManagerConfig{
			Name: "node-" + c.purpose, Store: c.store, Template: c.tmpl, SignerName: c.signer, Client: newClient,
		})
		if err != nil {
			return err
		}
		m.Start()
	}
	return nil
}

// logValidity logs how long a certificate is valid and when it is renewed, and warns of an
// expired one: a worker whose client certificate expired (it was off for longer than the
// end of its rotation window) cannot renew it with its own credentials.
func logValidity(log *logrus.Entry, c *tls.Certificate, prefix string) {
	if c == nil || c.Leaf == nil {
		return
	}
	from, to := certrotation.RotationWindow(c.Leaf)
	f := logrus.Fields{"notAfter": c.Leaf.NotAfter.UTC().Format(time.RFC3339),
		"renewFrom": from.UTC().Format(time.RFC3339), "renewBy": to.UTC().Format(time.RFC3339)}
	if time.Now().After(c.Leaf.NotAfter) {
		log.WithFields(f).Error(prefix + "the certificate expired: this host cannot renew it with its own credentials; " +
			"approve and sign a new request for it, or join again with a new --data-dir")
		return
	}
	log.WithFields(f).Info(prefix + "certificate valid; renewed between renewFrom and renewBy")
}
