package certrotation

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/certificate"
)

// testCA signs certificates for the tests.
type testCA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// sign signs pub for the template's names, valid from notBefore to notAfter.
func (ca *testCA) sign(t *testing.T, pub any, subject pkix.Name, usage x509.ExtKeyUsage, notBefore, notAfter time.Time) []byte {
	t.Helper()
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: subject, NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// pair makes a key and a certificate for cn.
func (ca *testCA) pair(t *testing.T, cn string, usage x509.ExtKeyUsage, notBefore, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalECPrivateKey(key)
	subject := pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}
	return ca.sign(t, key.Public(), subject, usage, notBefore, notAfter), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func TestFileStore(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "node-client.crt"), filepath.Join(dir, "node-client.key")
	s := NewFileStore(certFile, keyFile)
	var noCert *certificate.NoCertKeyError
	if _, err := s.Current(); !errors.As(err, &noCert) {
		t.Fatalf("no files: %v, want a NoCertKeyError", err)
	}
	ca := newTestCA(t)
	now := time.Now()
	c1, k1 := ca.pair(t, "system:node:w1", x509.ExtKeyUsageClientAuth, now.Add(-time.Minute), now.Add(time.Hour))
	var updated []*tls.Certificate
	s.OnUpdate(func(c *tls.Certificate) { updated = append(updated, c) })
	got, err := s.Update(c1, k1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Leaf == nil || got.Leaf.Subject.CommonName != "system:node:w1" || len(updated) != 1 || updated[0] != got || s.Cached() != got {
		t.Fatalf("update: %+v, hooks %d", got.Leaf, len(updated))
	}
	if b, _ := os.ReadFile(certFile); string(b) != string(c1) {
		t.Error("certificate file not written")
	}
	if b, _ := os.ReadFile(keyFile); string(b) != string(k1) {
		t.Error("key file not written")
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode: %v %v", fi.Mode(), err)
	}
	if _, err := os.Stat(certFile + ".pending"); !os.IsNotExist(err) {
		t.Errorf("pending file left: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("files left in %s: %v", dir, ents)
	}
	if _, err := s.Update(c1, []byte("not a key")); err == nil {
		t.Error("an invalid pair was stored")
	}

	// A crash after the pending pair was written: Current installs it.
	c2, k2 := ca.pair(t, "system:node:w1", x509.ExtKeyUsageClientAuth, now.Add(-time.Minute), now.Add(2*time.Hour))
	if err := os.WriteFile(certFile+".pending", append(append([]byte{}, c2...), k2...), 0o600); err != nil {
		t.Fatal(err)
	}
	cur, err := NewFileStore(certFile, keyFile).Current()
	if err != nil {
		t.Fatal(err)
	}
	if !cur.Leaf.NotAfter.Equal(now.Add(2 * time.Hour).Truncate(time.Second)) {
		t.Errorf("pending pair not installed: notAfter %s", cur.Leaf.NotAfter)
	}
	if b, _ := os.ReadFile(keyFile); string(b) != string(k2) {
		t.Error("pending key not installed")
	}
	// A pending file written in part is dropped; the installed pair stays.
	if err := os.WriteFile(certFile+".pending", c1[:40], 0o600); err != nil {
		t.Fatal(err)
	}
	if cur, err = s.Current(); err != nil || string(cur.Certificate[0]) != string(mustDER(t, c2)) {
		t.Errorf("partial pending file: %v", err)
	}
	if _, err := os.Stat(certFile + ".pending"); !os.IsNotExist(err) {
		t.Errorf("partial pending file left: %v", err)
	}
	// A certificate that does not match its key is an error, not a NoCertKeyError.
	if err := os.WriteFile(certFile, c1, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Current(); err == nil || errors.As(err, &noCert) {
		t.Errorf("mismatched pair: %v", err)
	}
}

func mustDER(t *testing.T, certPEM []byte) []byte {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("not PEM")
	}
	return b.Bytes
}

// TestClientConfigPresentsCurrent checks that the node identity's connections present the
// store's current certificate, and that closing them on an update makes the next request
// (and a long-running one) use the new certificate.
func TestClientConfigPresentsCurrent(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	srvCert, srvKey := ca.pair(t, "server", x509.ExtKeyUsageServerAuth, now.Add(-time.Minute), now.Add(time.Hour))
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []*big.Int
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.TLS.PeerCertificates[0].SerialNumber)
		mu.Unlock()
		if r.URL.Path == "/watch" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, "{}")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewFileStore(filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"))
	c1, k1 := ca.pair(t, "system:node:w1", x509.ExtKeyUsageClientAuth, now.Add(-time.Minute), now.Add(time.Hour))
	if _, err := s.Update(c1, k1); err != nil {
		t.Fatal(err)
	}
	cfg, closeAll, err := ClientConfig(&rest.Config{Host: srv.URL, UserAgent: "test"}, caFile, s.Cached)
	if err != nil {
		t.Fatal(err)
	}
	s.OnUpdate(func(*tls.Certificate) { closeAll() })
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) *http.Response {
		t.Helper()
		resp, err := hc.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := get("/")
	resp.Body.Close()
	watch := get("/watch")
	watchDone := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, watch.Body); watchDone <- err }()

	c2, k2 := ca.pair(t, "system:node:w1", x509.ExtKeyUsageClientAuth, now.Add(-time.Minute), now.Add(2*time.Hour))
	if _, err := s.Update(c2, k2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watchDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the long-running request was not closed after the update")
	}
	resp = get("/")
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	s1, s2 := s.certSerial(t, c1), s.certSerial(t, c2)
	if len(seen) != 3 || seen[0].Cmp(s1) != 0 || seen[1].Cmp(s1) != 0 || seen[2].Cmp(s2) != 0 {
		t.Errorf("the server saw serials %v, want %v %v %v", seen, s1, s1, s2)
	}
}

func (*FileStore) certSerial(t *testing.T, certPEM []byte) *big.Int {
	c, err := x509.ParseCertificate(mustDER(t, certPEM))
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

// TestManagerRenews checks that a certificate past its rotation deadline is renewed through
// a CertificateSigningRequest of the right signer and usages, filed with the client given,
// and that the new pair is stored.
func TestManagerRenews(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	dir := t.TempDir()
	s := NewFileStore(filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"))
	// 10 minutes long, 9.5 of them gone: past the 70–90% window.
	c1, k1 := ca.pair(t, "system:node:w1", x509.ExtKeyUsageClientAuth, now.Add(-570*time.Second), now.Add(30*time.Second))
	if _, err := s.Update(c1, k1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Current(); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	var requests []*certificatesv1.CertificateSigningRequest
	var mu sync.Mutex
	client.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		csr := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		if csr.Name == "" {
			csr.Name = csr.GenerateName + "x"
		}
		b, _ := pem.Decode(csr.Spec.Request)
		cr, err := x509.ParseCertificateRequest(b.Bytes)
		if err != nil {
			t.Error(err)
			return true, nil, err
		}
		mu.Lock()
		requests = append(requests, csr.DeepCopy())
		mu.Unlock()
		csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
		csr.Status.Certificate = ca.sign(t, cr.PublicKey, cr.Subject, x509.ExtKeyUsageClientAuth, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
		return false, nil, nil // stored by the tracker as changed here
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	renewed := make(chan *tls.Certificate, 1)
	s.OnUpdate(func(c *tls.Certificate) { renewed <- c })
	m, err := NewManager(ctx, ManagerConfig{Name: "client", Store: s, SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
		Template: &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:w1", Organization: []string{"system:nodes"}}},
		Client:   func() (kubernetes.Interface, error) { return client, nil }})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	var got *tls.Certificate
	select {
	case got = <-renewed:
	case <-time.After(30 * time.Second):
		t.Fatal("not renewed")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(requests) != 1 {
		t.Fatalf("%d requests", len(requests))
	}
	r := requests[0]
	if r.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || len(r.Spec.Usages) != 2 ||
		r.Spec.Usages[0] != certificatesv1.UsageDigitalSignature || r.Spec.Usages[1] != certificatesv1.UsageClientAuth {
		t.Errorf("request spec %+v", r.Spec)
	}
	if !got.Leaf.NotAfter.After(now.Add(30*time.Minute)) || m.Current() == nil || m.Current().Leaf.SerialNumber.Cmp(got.Leaf.SerialNumber) != 0 {
		t.Errorf("renewed certificate valid until %s", got.Leaf.NotAfter)
	}
	if disk, err := NewFileStore(s.Files()).Current(); err != nil || disk.Leaf.SerialNumber.Cmp(got.Leaf.SerialNumber) != 0 {
		t.Errorf("the renewed pair is not on disk: %v", err)
	}
	// The new key is not the old one.
	if got.PrivateKey.(*ecdsa.PrivateKey).Equal(s.certKey(t, k1)) {
		t.Error("renewed with the same key")
	}
}

func (*FileStore) certKey(t *testing.T, keyPEM []byte) *ecdsa.PrivateKey {
	b, _ := pem.Decode(keyPEM)
	k, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestNewManagerRefusesOtherSigners(t *testing.T) {
	_, err := NewManager(context.Background(), ManagerConfig{SignerName: certificatesv1.KubeAPIServerClientSignerName,
		Store: NewFileStore("a", "b"), Template: &x509.CertificateRequest{}, Client: func() (kubernetes.Interface, error) { return nil, nil }})
	if err == nil {
		t.Error("a manager for kube-apiserver-client")
	}
}

func TestRotationWindow(t *testing.T) {
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	from, to := RotationWindow(&x509.Certificate{NotBefore: nb, NotAfter: nb.Add(30 * 24 * time.Hour)})
	if !from.Equal(nb.Add(21*24*time.Hour)) || !to.Equal(nb.Add(27*24*time.Hour)) {
		t.Errorf("window %s – %s", from, to)
	}
}
