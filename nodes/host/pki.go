package host

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flotilla-dev/flotilla/reconciler/etcd"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// certs are the files of this host's certificates and keys, all signed by the site CA.
type certs struct {
	apiCert, apiKey               string
	etcdServerCert, etcdServerKey string
	etcdPeerCert, etcdPeerKey     string
	etcdClientCert, etcdClientKey string
	// nodeClient is the API server's client certificate for the node agents.
	nodeClientCert, nodeClientKey string

	// issued are the requests of every certificate the host issued itself from the CA key
	// (these and its component identities), for renewCerts.
	issued *issuedCerts
}

type issuedCerts struct {
	mu   sync.Mutex
	reqs []pki.Request
}

// ensure issues (or keeps) req's certificate, and remembers req for renewCerts.
func (c *certs) ensure(ca *pki.CA, req pki.Request) (certFile, keyFile string, err error) {
	if c.issued == nil {
		// The first call, from issueCerts, before renewCerts starts.
		c.issued = &issuedCerts{}
	}
	c.issued.mu.Lock()
	c.issued.reqs = append(c.issued.reqs, req)
	c.issued.mu.Unlock()
	return ca.Ensure(req)
}

// certRenewInterval is how often a running server host looks for certificates close to
// expiry; pki.CA.Ensure re-issues one with less than 30 days left.
const certRenewInterval = 12 * time.Hour

// renewCerts keeps a running server host's own certificates (5 years) valid: every
// certRenewInterval it ensures each of them again, and Ensure re-issues, with the same
// key, one that has less than 30 days left (as it does at start). Their users read the files
// again: the API server's serving certificate (the apiserver's dynamic file content), etcd's
// (read at each handshake), the node agent endpoint's (keyPairReloader) and the client
// certificates of rest.Configs (client-go reloads certificate files).
func (h *Host) renewCerts(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.runCtx.Done():
			return
		case <-t.C:
		}
		h.renewCertsOnce()
	}
}

func (h *Host) renewCertsOnce() {
	if h.certs.issued == nil {
		return
	}
	h.certs.issued.mu.Lock()
	reqs := slices.Clone(h.certs.issued.reqs)
	h.certs.issued.mu.Unlock()
	for _, req := range reqs {
		certFile, _ := h.ca.Paths(req.Name)
		before, _ := os.ReadFile(certFile)
		if _, _, err := h.ca.Ensure(req); err != nil {
			h.log.WithError(err).WithField("certificate", req.Name).Error("renew the host's certificate")
			continue
		}
		if after, _ := os.ReadFile(certFile); !bytes.Equal(before, after) {
			h.log.WithField("certificate", req.Name).Info("re-issued the host's certificate from the site CA")
		}
	}
}

// nodeClientName is the common name the node agents admit: the API server's.
const nodeClientName = "kube-apiserver-kubelet-client"

// ensureSiteToken makes the first host's join token (a secret, and the pin of its CA) unless
// one was given or kept from an earlier start, and writes it to <data-dir>/token.
func (h *Host) ensureSiteToken() error {
	if h.token.Secret == "" {
		if b, err := os.ReadFile(filepath.Join(h.dataDir, "token")); err == nil {
			h.token, _ = etcd.ParseToken(string(b))
		}
	}
	if h.token.Secret == "" {
		secret, err := randomHex(24)
		if err != nil {
			return err
		}
		h.token.Secret = secret
	}
	if h.token.CAPin == "" {
		h.token.CAPin = h.ca.Hash()
	}
	if err := os.WriteFile(filepath.Join(h.dataDir, "token"), []byte(h.token.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("write join token: %w", err)
	}
	return nil
}

// issueCerts makes (or keeps) the host's serving and client certificates; the CA is known by
// now, either made here or received when joining. A certificate with less than 30 days left
// is re-issued, at start and while the host runs (renewCerts).
func (h *Host) issueCerts() error {
	hostIPs := uniqueIPs(net.ParseIP("127.0.0.1"), h.advertise, h.listen)
	name := h.cfg.Name
	var err error
	c := &h.certs
	if c.apiCert, c.apiKey, err = c.ensure(h.ca, pki.Request{
		Name: "apiserver", CommonName: "kube-apiserver", Usage: pki.Server,
		DNSNames: []string{name, "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:      append(hostIPs, firstIP(h.vopts.ServiceCIDR)),
	}); err != nil {
		return err
	}
	if c.etcdServerCert, c.etcdServerKey, err = c.ensure(h.ca, pki.Request{Name: "etcd-server", CommonName: name, Usage: pki.Server | pki.Client,
		DNSNames: []string{name, "localhost"}, IPs: hostIPs}); err != nil {
		return err
	}
	if c.etcdPeerCert, c.etcdPeerKey, err = c.ensure(h.ca, pki.Request{Name: "etcd-peer", CommonName: name, Usage: pki.Server | pki.Client,
		DNSNames: []string{name, "localhost"}, IPs: hostIPs}); err != nil {
		return err
	}
	if c.etcdClientCert, c.etcdClientKey, err = c.ensure(h.ca, pki.Request{Name: "etcd-client", CommonName: "kube-apiserver-etcd-client", Usage: pki.Client}); err != nil {
		return err
	}
	if c.nodeClientCert, c.nodeClientKey, err = c.ensure(h.ca, pki.Request{Name: "apiserver-node-client", CommonName: nodeClientName, Usage: pki.Client}); err != nil {
		return err
	}
	h.adminToken, err = loadOrCreateToken(h.adminPath)
	if err != nil {
		return err
	}
	go h.renewCerts(certRenewInterval)
	return nil
}

// writeKubeconfig writes an admin kubeconfig for server atomically, readable by root only.
func writeKubeconfig(path, server string, caPEM []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cluster := "flotilla"
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = cluster
	tmp := path + ".tmp"
	if err := clientcmd.WriteToFile(*cfg, tmp); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func loadOrCreateToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
	}
	t, err := randomHex(32)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(t+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write admin token: %w", err)
	}
	return t, nil
}

func randomHex(n int) (string, error) {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(buf), nil
}

func uniqueIPs(ips ...net.IP) []net.IP {
	var out []net.IP
	for _, ip := range ips {
		if ip == nil || ip.IsUnspecified() {
			continue
		}
		dup := false
		for _, o := range out {
			if o.Equal(ip) {
				dup = true
			}
		}
		if !dup {
			out = append(out, ip)
		}
	}
	return out
}

// firstIP is the first usable address of the service range: the `kubernetes` Service.
func firstIP(p netip.Prefix) net.IP {
	a := p.Masked().Addr().Next()
	return net.IP(a.AsSlice())
}

// labelsHash summarises the host's extra Node labels for gossip (a change shows as an update
// event without carrying the labels themselves, which may not fit in the metadata).
func labelsHash(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sum := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(sum, "%s=%s\n", k, labels[k])
	}
	return hex.EncodeToString(sum.Sum(nil))[:16]
}
