package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatalf("not PEM: %q", certPEM)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// sameSet reports whether a and b hold the same strings (DER stores a subject's
// organizations as a set, sorted).
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// LoadCA loads what LoadOrCreateCA made, and never creates a CA: a directory without one is
// an error naming the missing files.
func TestLoadCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	_, err := LoadCA(dir)
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "no site CA in "+dir+" (ca.crt, ca.key)") {
		t.Fatalf("LoadCA of an empty directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.crt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadCA created a CA: %v", err)
	}

	made, err := LoadOrCreateCA(dir, "flotilla-ca")
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Hash() != made.Hash() {
		t.Errorf("loaded CA %s, made %s", loaded.Hash(), made.Hash())
	}

	if err := os.Remove(filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(dir); err == nil || !strings.Contains(err.Error(), "(ca.key)") {
		t.Errorf("LoadCA without the key: %v", err)
	}
}

// A client certificate is signed by the CA for client authentication only, names the user and
// groups, is valid from a little before now for ttl, and a TLS client can use it.
func TestIssueClient(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), "flotilla-ca")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	certPEM, keyPEM, err := ca.IssueClient("ci-shop-berlin", []string{"flotilla:planners", "team-a"}, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert := parseCert(t, certPEM)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate does not verify for client auth: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate verifies as a server certificate")
	}
	if cert.Subject.CommonName != "ci-shop-berlin" || !sameSet(cert.Subject.Organization, []string{"flotilla:planners", "team-a"}) {
		t.Errorf("subject %v", cert.Subject)
	}
	if cert.IsCA {
		t.Error("client certificate is a CA")
	}
	if d := before.Add(-5 * time.Minute).Sub(cert.NotBefore); d < -time.Second || d > time.Second {
		t.Errorf("NotBefore %s, want five minutes before %s", cert.NotBefore, before)
	}
	if d := cert.NotAfter.Sub(before.Add(48 * time.Hour)); d < -time.Second || d > 5*time.Second {
		t.Errorf("NotAfter %s, want 48h after %s", cert.NotAfter, before)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("certificate and key do not form a pair: %v", err)
	}
	if k, ok := pair.PrivateKey.(*ecdsa.PrivateKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", pair.PrivateKey)
	}
	if entries, _ := os.ReadDir(filepath.Dir(ca.CertFile())); len(entries) != 2 {
		t.Errorf("IssueClient wrote into the CA directory: %d files", len(entries))
	}

	again, _, err := ca.IssueClient("ci-shop-berlin", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if c := parseCert(t, again); c.SerialNumber.Cmp(cert.SerialNumber) == 0 || len(c.Subject.Organization) != 0 {
		t.Errorf("second certificate: serial %s (first %s), organizations %v", c.SerialNumber, cert.SerialNumber, c.Subject.Organization)
	}
}

func TestIssueClientRefuses(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), "flotilla-ca")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		cn     string
		orgs   []string
		ttl    time.Duration
		substr string
	}{
		{"no common name", "", nil, time.Hour, "needs a common name"},
		{"empty group", "jane", []string{"a", ""}, time.Hour, "must not be empty"},
		{"zero ttl", "jane", nil, 0, "must be positive"},
		{"negative ttl", "jane", nil, -time.Hour, "must be positive"},
		{"past the CA", "jane", nil, 11 * 365 * 24 * time.Hour, "after the site CA expires"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, k, err := ca.IssueClient(tc.cn, tc.orgs, tc.ttl)
			if err == nil || !strings.Contains(err.Error(), tc.substr) {
				t.Errorf("err = %v, want %q", err, tc.substr)
			}
			if c != nil || k != nil {
				t.Error("a refused request returned a certificate")
			}
		})
	}
}

// Ensure reissues a certificate whose groups changed, with the same key, and keeps one whose
// groups are only reordered.
func TestEnsureReissuesOnGroupChange(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), "flotilla-ca")
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Name: "component", CommonName: "system:flotilla-component", Organization: []string{"a", "b"}, Usage: Client}
	certFile, keyFile, err := ca.Ensure(req)
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first, firstKey := read(certFile), read(keyFile)

	req.Organization = []string{"b", "a"}
	if _, _, err := ca.Ensure(req); err != nil {
		t.Fatal(err)
	}
	if string(read(certFile)) != string(first) {
		t.Error("reordering the groups reissued the certificate")
	}

	req.Organization = []string{"a", "c"}
	if _, _, err := ca.Ensure(req); err != nil {
		t.Fatal(err)
	}
	got := parseCert(t, read(certFile))
	if !sameSet(got.Subject.Organization, []string{"a", "c"}) {
		t.Errorf("after a group change the certificate has organizations %v, want [a c]", got.Subject.Organization)
	}
	if string(read(keyFile)) != string(firstKey) {
		t.Error("reissuing changed the key")
	}

	req.Organization = nil
	if _, _, err := ca.Ensure(req); err != nil {
		t.Fatal(err)
	}
	if got := parseCert(t, read(certFile)); len(got.Subject.Organization) != 0 {
		t.Errorf("after dropping the groups the certificate has organizations %v", got.Subject.Organization)
	}
}

// certRequest makes a certificate request signed by a new key.
func certRequest(t *testing.T, tmpl *x509.CertificateRequest) *x509.CertificateRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	cr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// SignRequest copies the subject and names, sets the usages given, chains to the CA, backdates
// by five minutes and keeps short certificates as short as asked.
func TestSignRequest(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), "flotilla-ca")
	if err != nil {
		t.Fatal(err)
	}
	cr := certRequest(t, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:h1", Organization: []string{"system:nodes"}},
		DNSNames:    []string{"h1"},
		IPAddresses: []net.IP{net.ParseIP("10.0.0.1")},
	})
	start := time.Now()
	certPEM, err := ca.SignRequest(cr, x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert := parseCert(t, certPEM)
	if cert.Subject.CommonName != "system:node:h1" || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) ||
		!slices.Equal(cert.DNSNames, []string{"h1"}) || len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.ParseIP("10.0.0.1")) {
		t.Errorf("subject %v, names %v %v", cert.Subject, cert.DNSNames, cert.IPAddresses)
	}
	if cert.KeyUsage != x509.KeyUsageDigitalSignature || !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || cert.IsCA {
		t.Errorf("usages %v %v, CA %v", cert.KeyUsage, cert.ExtKeyUsage, cert.IsCA)
	}
	if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
		t.Errorf("does not chain to the CA: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "h1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("verify: %v", err)
	}
	if d := start.Sub(cert.NotBefore); d < SignBackdate-time.Second || d > SignBackdate+time.Minute {
		t.Errorf("NotBefore %v, %v before signing", cert.NotBefore, d)
	}
	if d := cert.NotAfter.Sub(start); d < 30*24*time.Hour-time.Second || d > 30*24*time.Hour+time.Minute {
		t.Errorf("NotAfter %v, %v after signing", cert.NotAfter, d)
	}

	// A short certificate lives as long as asked, backdating included.
	certPEM, err = ca.SignRequest(cr, x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if cert := parseCert(t, certPEM); cert.NotAfter.Sub(cert.NotBefore) != 10*time.Minute {
		t.Errorf("short certificate valid %v to %v", cert.NotBefore, cert.NotAfter)
	}

	// Never past the CA.
	certPEM, err = ca.SignRequest(cr, x509.KeyUsageDigitalSignature, nil, 20*365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if cert := parseCert(t, certPEM); !cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("NotAfter %v, CA's %v", cert.NotAfter, ca.Cert.NotAfter)
	}
}

func TestSignRequestRefuses(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), "flotilla-ca")
	if err != nil {
		t.Fatal(err)
	}
	cr := certRequest(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "jane"}})
	if _, err := ca.SignRequest(cr, x509.KeyUsageDigitalSignature, nil, 0); err == nil {
		t.Error("signed for no time")
	}
	// A request whose signature does not verify (its subject changed after signing).
	forged := certRequest(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "jane"}})
	forged.RawTBSCertificateRequest = slices.Clone(forged.RawTBSCertificateRequest)
	forged.Signature = slices.Clone(cr.Signature)
	if _, err := ca.SignRequest(forged, x509.KeyUsageDigitalSignature, nil, time.Hour); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("signed a request with a bad signature: %v", err)
	}
	noKey := &CA{Cert: ca.Cert, CertPEM: ca.CertPEM}
	if _, err := noKey.SignRequest(cr, x509.KeyUsageDigitalSignature, nil, time.Hour); err == nil {
		t.Error("signed without a key")
	}
}
