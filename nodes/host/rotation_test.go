package host

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/util/certificate"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/csrsigning"
	"github.com/flotilla-dev/flotilla/reconciler/etcd"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: not PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServerCertsRenewedWhileRunning checks that a server host re-issues its own
// certificates that come close to expiry, and only those.
func TestServerCertsRenewedWhileRunning(t *testing.T) {
	ca, err := pki.LoadOrCreateCA(filepath.Join(t.TempDir(), "pki"), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{ca: ca, log: logrus.WithField("test", t.Name())}
	apiCert, _, err := h.certs.ensure(ca, pki.Request{Name: "apiserver", CommonName: "kube-apiserver", Usage: pki.Server,
		DNSNames: []string{"host-1"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, _, err := h.certs.ensure(ca, pki.Request{Name: "client-node", CommonName: "system:node:host-1",
		Organization: []string{"system:nodes"}, Usage: pki.Client})
	if err != nil {
		t.Fatal(err)
	}
	keep := readCert(t, nodeCert)
	// The API server's certificate has 10 days left.
	certPEM, keyPEM, err := ca.IssueClient("kube-apiserver", nil, 10*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, apiKey := ca.Paths("apiserver")
	if err := os.WriteFile(apiCert, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(apiKey, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	h.renewCertsOnce()
	got := readCert(t, apiCert)
	if time.Until(got.NotAfter) < 4*365*24*time.Hour || len(got.DNSNames) != 1 || got.DNSNames[0] != "host-1" {
		t.Errorf("not re-issued: valid until %s, names %v", got.NotAfter, got.DNSNames)
	}
	if after, _ := os.ReadFile(apiKey); string(after) != string(keyPEM) {
		t.Error("re-issued with another key: a reader could see a mismatched pair")
	}
	if again := readCert(t, nodeCert); again.SerialNumber.Cmp(keep.SerialNumber) != 0 {
		t.Error("a certificate far from expiry was re-issued")
	}
}

// TestWorkerRotation checks the requests a worker renews its certificates with (they must
// pass the signers' rules with the usages client-go's manager asks for) and its node
// identity, which presents the current client certificate.
func TestWorkerRotation(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(filepath.Join(dir, "ca"), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Port 1: nothing answers there; the managers' requests fail until ctx ends.
	h := &Host{cfg: Config{Name: "w1", APIPort: 1}, dataDir: dir, ca: ca, advertise: net.ParseIP("10.0.0.7"),
		runCtx: ctx, log: logrus.WithField("test", t.Name())}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	reqs := h.workerCertRequests()
	if len(reqs) != len(etcd.WorkerCertificates) {
		t.Fatalf("%d requests for %v", len(reqs), etcd.WorkerCertificates)
	}
	for _, r := range reqs {
		der, err := x509.CreateCertificateRequest(rand.Reader, r.tmpl, key)
		if err != nil {
			t.Fatal(err)
		}
		cr, _ := x509.ParseCertificateRequest(der)
		if err := checkWorkerCSR(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), "w1"); err != nil {
			t.Errorf("%s: %v", r.purpose, err)
		}
		switch r.signer {
		case certificatesv1.KubeAPIServerClientKubeletSignerName:
			err = csrsigning.ValidateKubeletClient(cr, certificate.DefaultKubeletClientGetUsages(key))
		case certificatesv1.KubeletServingSignerName:
			err = csrsigning.ValidateKubeletServing(cr, certificate.DefaultKubeletServingGetUsages(key))
			if len(cr.DNSNames) != 1 || cr.DNSNames[0] != "w1" || len(cr.IPAddresses) != 1 || !cr.IPAddresses[0].Equal(h.advertise) {
				t.Errorf("serving request names %v %v", cr.DNSNames, cr.IPAddresses)
			}
		default:
			t.Errorf("%s: signer %s", r.purpose, r.signer)
		}
		if err != nil {
			t.Errorf("%s: the signer refuses the request: %v", r.purpose, err)
		}
	}

	if err := h.workerIdentities(); err == nil {
		t.Error("started without certificates")
	}
	for _, purpose := range etcd.WorkerCertificates {
		certFile, keyFile := h.workerCertFiles(purpose)
		certPEM, keyPEM, err := ca.IssueClient("system:node:w1", []string{"system:nodes"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.workerIdentities(); err != nil {
		t.Fatal(err)
	}
	n := h.ids.node
	if n.Host != "https://127.0.0.1:1" || n.Transport == nil || n.CertFile != "" || n.KeyFile != "" || n.CAFile != "" {
		t.Errorf("node identity %+v", n)
	}
}
