package host

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

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
// now, either made here or received when joining.
func (h *Host) issueCerts() error {
	hostIPs := uniqueIPs(net.ParseIP("127.0.0.1"), h.advertise, h.listen)
	name := h.cfg.Name
	var err error
	c := &h.certs
	if c.apiCert, c.apiKey, err = h.ca.Ensure(pki.Request{
		Name: "apiserver", CommonName: "kube-apiserver", Usage: pki.Server,
		DNSNames: []string{name, "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:      append(hostIPs, firstIP(h.vopts.ServiceCIDR)),
	}); err != nil {
		return err
	}
	if c.etcdServerCert, c.etcdServerKey, err = h.ca.Ensure(pki.Request{Name: "etcd-server", CommonName: name, Usage: pki.Server | pki.Client,
		DNSNames: []string{name, "localhost"}, IPs: hostIPs}); err != nil {
		return err
	}
	if c.etcdPeerCert, c.etcdPeerKey, err = h.ca.Ensure(pki.Request{Name: "etcd-peer", CommonName: name, Usage: pki.Server | pki.Client,
		DNSNames: []string{name, "localhost"}, IPs: hostIPs}); err != nil {
		return err
	}
	if c.etcdClientCert, c.etcdClientKey, err = h.ca.Ensure(pki.Request{Name: "etcd-client", CommonName: "kube-apiserver-etcd-client", Usage: pki.Client}); err != nil {
		return err
	}
	if c.nodeClientCert, c.nodeClientKey, err = h.ca.Ensure(pki.Request{Name: "apiserver-node-client", CommonName: nodeClientName, Usage: pki.Client}); err != nil {
		return err
	}
	h.adminToken, err = loadOrCreateToken(h.adminPath)
	return err
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
