package host

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/nodes/certrotation"
	"github.com/flotilla-dev/flotilla/nodes/membership"
	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
	"github.com/flotilla-dev/flotilla/reconciler/etcd"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// A worker (--etcd=false) holds the site CA certificate and its own two certificates, each
// signed from a CertificateSigningRequest the join token approved: the node identity
// (client) and the node agent's serving certificate. No CA key, no admin token, no etcd
// certificate is ever on it. Both certificates are renewed before they expire (rotation.go).

// workerCertFiles are a worker's certificate and key files in <data-dir>/pki, by purpose.
func (h *Host) workerCertFiles(purpose string) (cert, key string) {
	dir := filepath.Join(h.dataDir, "pki")
	return filepath.Join(dir, "node-"+purpose+".crt"), filepath.Join(dir, "node-"+purpose+".key")
}

// joinAsWorker makes the worker's keys and certificate requests, has the site sign them
// and installs the CA certificate and the certificates.
func (h *Host) joinAsWorker() error {
	if err := os.MkdirAll(filepath.Join(h.dataDir, "pki"), 0o700); err != nil {
		return err
	}
	// The same requests as the renewals' (rotation.go).
	tmpls := map[string]*x509.CertificateRequest{}
	for _, c := range h.workerCertRequests() {
		tmpls[c.purpose] = c.tmpl
	}
	csrs := map[string][]byte{}
	for _, purpose := range etcd.WorkerCertificates {
		tmpl := tmpls[purpose]
		if tmpl == nil {
			return fmt.Errorf("no certificate request for %s", purpose)
		}
		_, keyFile := h.workerCertFiles(purpose)
		key, err := loadOrCreateKey(keyFile)
		if err != nil {
			return err
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			return fmt.Errorf("certificate request (%s): %w", purpose, err)
		}
		csrs[purpose] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	resp, err := h.lifecycle.JoinAsWorker(h.runCtx, csrs)
	if err != nil {
		return err
	}
	if h.ca, err = pki.InstallCACert(filepath.Join(h.dataDir, "pki"), resp.CACert); err != nil {
		return err
	}
	for _, purpose := range etcd.WorkerCertificates {
		certFile, _ := h.workerCertFiles(purpose)
		if len(resp.Certificates[purpose]) == 0 {
			return fmt.Errorf("the site returned no %s certificate", purpose)
		}
		if err := os.WriteFile(certFile, resp.Certificates[purpose], 0o644); err != nil {
			return err
		}
	}
	h.state = &etcd.ClusterState{Worker: true}
	if err := h.state.Save(h.statePath); err != nil {
		return err
	}
	h.log.Info("joined the site as a worker: this host holds its own certificates only")
	return nil
}

// loadOrCreateKey reads an ECDSA key, or makes one (0600).
func loadOrCreateKey(path string) (*ecdsa.PrivateKey, error) {
	if b, err := os.ReadFile(path); err == nil {
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%s is not PEM", path)
		}
		k, err := x509.ParseECPrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return k, nil
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return k, nil
}

// workerIdentities sets the worker's node identity: its own client certificate, against
// the local API proxy; and starts renewing its certificates (rotation.go).
func (h *Host) workerIdentities() error {
	cert, key := h.workerCertFiles("client")
	h.certs.apiCert, h.certs.apiKey = h.workerCertFiles("serving")
	for _, f := range []string{cert, key, h.certs.apiCert, h.certs.apiKey} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("this worker's certificates are incomplete (%w): join again with a new --data-dir", err)
		}
	}
	clientStore := certrotation.NewFileStore(cert, key)
	if _, err := clientStore.Current(); err != nil {
		return fmt.Errorf("this worker's client certificate: %w", err)
	}
	node, err := h.workerNodeConfig(clientStore)
	if err != nil {
		return err
	}
	h.ids = &identities{node: node, nodeCert: cert, nodeKey: key}
	return h.startWorkerRotation(node, clientStore, certrotation.NewFileStore(h.certs.apiCert, h.certs.apiKey))
}

func (h *Host) localAPIURL() string {
	return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(h.cfg.APIPort))
}

// startAPIProxy serves 127.0.0.1:--api-port on a worker: each connection goes to the API
// of a server that gossip shows alive, the last one that answered first (as k3s agents'
// load balancer). The servers' certificates name 127.0.0.1, so TLS verifies end to end.
func (h *Host) startAPIProxy() error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(h.cfg.APIPort)))
	if err != nil {
		return fmt.Errorf("local API proxy: %w", err)
	}
	p := &apiProxy{peers: h.peers, self: h.cfg.Name, log: h.log.WithField("component", "api-proxy")}
	go func() {
		<-h.runCtx.Done()
		_ = l.Close()
	}()
	go p.serve(h.runCtx, l)
	h.meta = membership.Meta{Roles: []string{"host", "worker"}, LabelsHash: labelsHash(h.cfg.NodeLabels)}
	if err := h.gossip.UpdateMeta(h.meta); err != nil {
		h.log.WithError(err).Warn("publish gossip metadata")
	}
	return nil
}

type apiProxy struct {
	peers func() []etcd.Peer
	self  string
	log   *logrus.Entry

	mu   sync.Mutex
	last string // host:port that answered last
}

func (p *apiProxy) serve(ctx context.Context, l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil {
				p.log.WithError(err).Error("local API proxy stopped")
			}
			return
		}
		go p.forward(ctx, c)
	}
}

// backends lists the servers' API addresses, the one that answered last first.
func (p *apiProxy) backends() []string {
	p.mu.Lock()
	last := p.last
	p.mu.Unlock()
	var out []string
	for _, peer := range p.peers() {
		if !peer.Alive || peer.APIURL == "" || peer.Name == p.self {
			continue
		}
		addr := peer.APIURL[len("https://"):]
		if addr == last {
			out = append([]string{addr}, out...)
		} else {
			out = append(out, addr)
		}
	}
	return out
}

func (p *apiProxy) forward(ctx context.Context, c net.Conn) {
	defer c.Close()
	var up net.Conn
	var errs []error
	for _, addr := range p.backends() {
		d := net.Dialer{Timeout: 3 * time.Second}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			up = conn
			p.mu.Lock()
			p.last = addr
			p.mu.Unlock()
			break
		}
		errs = append(errs, err)
	}
	if up == nil {
		p.log.WithError(errors.Join(errs...)).Debug("no server's API reachable")
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
	select {
	case <-done:
		<-done
	case <-ctx.Done():
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// signWorker has a joining worker's certificate requests signed: each becomes a
// CertificateSigningRequest (client: kubernetes.io/kube-apiserver-client-kubelet, serving:
// kubernetes.io/kubelet-serving), approved here on the strength of the join token, and
// signed by the leader's csrsigning controller, which checks each signer's rules.
func (h *Host) signWorker(ctx context.Context, name string, csrs map[string][]byte) (map[string][]byte, error) {
	client, err := kubernetes.NewForConfig(h.ids.join)
	if err != nil {
		return nil, err
	}
	signers := map[string]string{"client": certificatesv1.KubeAPIServerClientKubeletSignerName, "serving": certificatesv1.KubeletServingSignerName}
	usages := map[string][]certificatesv1.KeyUsage{
		"client":  {certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		"serving": {certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
	}
	out := map[string][]byte{}
	for _, purpose := range etcd.WorkerCertificates {
		if err := checkWorkerCSR(csrs[purpose], name); err != nil {
			return nil, fmt.Errorf("%s certificate request: %w", purpose, err)
		}
		csr := &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "flotilla-join-" + name + "-" + purpose + "-"},
			Spec:       certificatesv1.CertificateSigningRequestSpec{Request: csrs[purpose], SignerName: signers[purpose], Usages: usages[purpose]},
		}
		created, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("create CertificateSigningRequest: %w", err)
		}
		created.Status.Conditions = append(created.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "FlotillaJoinToken",
			Message: "host " + name + " presented the site's join token"})
		if _, err := client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, created.Name, created, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("approve CertificateSigningRequest %s: %w", created.Name, err)
		}
		err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, created.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range got.Status.Conditions {
				if c.Type == certificatesv1.CertificateFailed && c.Status == corev1.ConditionTrue {
					return false, fmt.Errorf("CertificateSigningRequest %s failed: %s", created.Name, c.Message)
				}
			}
			if len(got.Status.Certificate) > 0 {
				out[purpose] = got.Status.Certificate
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			return nil, fmt.Errorf("CertificateSigningRequest %s not signed (is the csrsigning controller running on the leader?): %w", created.Name, err)
		}
	}
	return out, nil
}

// checkWorkerCSR refuses a request for another identity than the joining host's.
func checkWorkerCSR(pemBytes []byte, name string) error {
	blk, _ := pem.Decode(pemBytes)
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return errors.New("not a PEM certificate request")
	}
	req, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return err
	}
	if err := req.CheckSignature(); err != nil {
		return err
	}
	if req.Subject.CommonName != rbac.NodeUser(name) || len(req.Subject.Organization) != 1 || req.Subject.Organization[0] != rbac.NodesGroup {
		return fmt.Errorf("subject %q is not %s in %s", req.Subject.String(), rbac.NodeUser(name), rbac.NodesGroup)
	}
	return nil
}
