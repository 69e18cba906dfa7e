package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// selfSigned makes a certificate and key for cn.
func selfSigned(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func TestKeyPairReloader(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "node-serving.crt"), filepath.Join(dir, "node-serving.key")
	c1, k1 := selfSigned(t, "one")
	replaceFile(t, certFile, c1)
	replaceFile(t, keyFile, k1)
	r, err := newKeyPairReloader(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r.now = func() time.Time { return now }
	cn := func() string {
		t.Helper()
		c, err := r.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.Subject.CommonName
	}
	if got := cn(); got != "one" {
		t.Fatalf("serves %q", got)
	}
	// Renewed: the key replaced first. Until the certificate is, the pair does not load:
	// the old one is still served.
	c2, k2 := selfSigned(t, "two")
	replaceFile(t, keyFile, k2)
	now = now.Add(2 * reloadCheckInterval)
	if got := cn(); got != "one" {
		t.Errorf("half-replaced pair: serves %q", got)
	}
	replaceFile(t, certFile, c2)
	if got := cn(); got != "one" {
		t.Errorf("looked at the files again within %s: serves %q", reloadCheckInterval, got)
	}
	now = now.Add(2 * reloadCheckInterval)
	if got := cn(); got != "two" {
		t.Errorf("after renewal: serves %q", got)
	}
	// Files gone: the loaded pair is still served.
	_ = os.Remove(certFile)
	now = now.Add(2 * reloadCheckInterval)
	if got := cn(); got != "two" {
		t.Errorf("files gone: serves %q", got)
	}
	if _, err := newKeyPairReloader(certFile, keyFile); err == nil {
		t.Error("started without a certificate")
	}
}
