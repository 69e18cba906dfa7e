package host

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"

	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/reconciler/authn/serviceaccount"
	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// identities are the client configurations of this host's components, each with a client
// certificate of its own signed by the site CA, so that each holds only the permissions of
// its bootstrap role (see the rbac package's component policy).
type identities struct {
	// controllerManager reads for all controllers (the shared informers) and holds their
	// Leases; controller returns the configuration of one controller.
	controllerManager *rest.Config
	controllers       map[string]*rest.Config
	// node is the node agent's, the pod network's and the proxies' identity; nodeCert and
	// nodeKey are its files (a worker's are renewed in place).
	node              *rest.Config
	nodeCert, nodeKey string
	// gitWebhook is the git push webhook's (rbac.GitWebhookUser).
	gitWebhook *rest.Config
	// join is the join endpoint's (rbac.JoinUser): it files and approves the
	// CertificateSigningRequests of joining workers.
	join *rest.Config
}

// nodeCertFiles are the node identity's certificate and key files.
func (ids *identities) nodeCertFiles() (certFile, keyFile string) { return ids.nodeCert, ids.nodeKey }

// controller returns the configuration of the named controller.
func (ids *identities) controller(name string) *rest.Config {
	if c, ok := ids.controllers[name]; ok {
		return c
	}
	// Every controller of controllerList has a certificate; an unknown name reads only.
	return ids.controllerManager
}

// issueIdentities makes (or keeps) the client certificates of the host's components.
func (h *Host) issueIdentities() error {
	config := func(file, user string, groups ...string) (*rest.Config, error) {
		cert, key, err := h.certs.ensure(h.ca, pki.Request{Name: "client-" + file, CommonName: user, Organization: groups, Usage: pki.Client})
		if err != nil {
			return nil, fmt.Errorf("client certificate of %s: %w", user, err)
		}
		// The API is this host's own: compressing its answers and every watch event (the API
		// server gzips for clients that accept it) would cost CPU on both ends and a gzip
		// reader per watch for nothing, as for the API server's own loopback client.
		return &rest.Config{Host: h.apiURL, QPS: 50, Burst: 100, DisableCompression: true,
			TLSClientConfig: rest.TLSClientConfig{CAFile: h.ca.CertFile(), CertFile: cert, KeyFile: key}}, nil
	}
	ids := &identities{controllers: map[string]*rest.Config{}}
	var err error
	if ids.controllerManager, err = config("controller-manager", rbac.ControllerManagerUser); err != nil {
		return err
	}
	for _, name := range rbac.ControllerNames() {
		if ids.controllers[name], err = config("controller-"+name, rbac.ControllerUser(name)); err != nil {
			return err
		}
	}
	if ids.node, err = config("node", rbac.NodeUser(h.cfg.Name), rbac.NodesGroup); err != nil {
		return err
	}
	ids.nodeCert, ids.nodeKey = ids.node.CertFile, ids.node.KeyFile
	if ids.gitWebhook, err = config("git-webhook", rbac.GitWebhookUser); err != nil {
		return err
	}
	if ids.join, err = config("join", rbac.JoinUser); err != nil {
		return err
	}
	h.ids = ids
	return nil
}

// siteKeys derives from the site CA's key what every API server of the site must share:
// the ServiceAccount token signing key and the key of Secret redaction for planners.
func (h *Host) siteKeys() (saKey ed25519.PrivateKey, redaction []byte, err error) {
	caKey, err := h.ca.KeyPEM()
	if err != nil {
		return nil, nil, fmt.Errorf("site CA key: %w", err)
	}
	if saKey, err = serviceaccount.DeriveSigningKey(caKey); err != nil {
		return nil, nil, err
	}
	if redaction, err = hkdf.Key(sha256.New, caKey, nil, "flotilla planner secret redaction v1", 32); err != nil {
		return nil, nil, err
	}
	return saKey, redaction, nil
}
