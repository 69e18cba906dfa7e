package host

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/nodes/runtime"
)

// Peer image sharing (nodes/runtime/peers.go): the host serves its image content on the node
// agent's endpoint to the site's other hosts, and asks them first when it pulls. The peers
// are the site's other Ready Nodes, at their InternalIP and agent port; they authenticate
// with their node client certificates, signed by the site CA.

// startPeers makes this host's pulls ask its peers first. The Node informer must be started.
func (h *Host) startPeers() error {
	certFile, keyFile := h.ids.nodeCertFiles()
	caPEM, err := os.ReadFile(h.ca.CertFile())
	if err != nil {
		return fmt.Errorf("peer image sharing: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("peer image sharing: no certificate in %s", h.ca.CertFile())
	}
	tlsCfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    roots,
		// The node client certificate is renewed on disk (workers) or re-issued (servers):
		// read at each handshake.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("node client certificate for peers: %w", err)
			}
			return &c, nil
		},
	}
	h.rt.SetPeers(&runtime.Peers{List: h.peerURLs, Self: h.selfPeerURL, TLS: tlsCfg, Log: logrus.WithField("component", "peers")})
	return nil
}

// peerURLs are the content endpoints of the site's other Ready hosts that run pods.
func (h *Host) peerURLs() []string {
	nodes, err := h.informers.Core().V1().Nodes().Lister().List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range nodes {
		if n.Name == h.cfg.Name {
			continue
		}
		if u := peerURL(n); u != "" {
			out = append(out, u)
		}
	}
	sort.Strings(out)
	return out
}

// selfPeerURL is this host's own content endpoint as its peers list it ("" until its Node is
// Ready with an address).
func (h *Host) selfPeerURL() string {
	n, err := h.informers.Core().V1().Nodes().Lister().Get(h.cfg.Name)
	if err != nil {
		return ""
	}
	return peerURL(n)
}

// peerURL is the content endpoint of a Ready host that runs pods, "" for another Node.
func peerURL(n *corev1.Node) string {
	port := n.Status.DaemonEndpoints.KubeletEndpoint.Port
	ip := nodeInternalIP(n)
	if port == 0 || ip == "" || !nodeReady(n) {
		return ""
	}
	return "https://" + net.JoinHostPort(ip, strconv.Itoa(int(port)))
}

// isPeer says whether name is another host of the site: its Node exists (a host removed with
// `flotilla host remove` has none).
func (h *Host) isPeer(name string) bool {
	if name == h.cfg.Name {
		return false
	}
	_, err := h.informers.Core().V1().Nodes().Lister().Get(name)
	return err == nil || !apierrors.IsNotFound(err)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeInternalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
