package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// LoadCACert loads only DIR/ca.crt: the CA of a host that trusts the site but holds no key
// to sign with (a worker). Signing with it fails.
func LoadCACert(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("read the site CA certificate: %w", err)
	}
	return caCert(dir, certPEM)
}

// InstallCACert writes the site's CA certificate (no key) into dir, refusing to replace
// another site's.
func InstallCACert(dir string, certPEM []byte) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	certPath := filepath.Join(dir, "ca.crt")
	if existing, err := os.ReadFile(certPath); err == nil && !bytes.Equal(bytes.TrimSpace(existing), bytes.TrimSpace(certPEM)) {
		return nil, fmt.Errorf("%s holds the CA of another site; use a new --data-dir to join this one", certPath)
	}
	ca, err := caCert(dir, certPEM)
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

func caCert(dir string, certPEM []byte) (*CA, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return nil, errors.New("the site CA certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the site CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("the site CA certificate is not a CA")
	}
	return &CA{Cert: cert, CertPEM: certPEM, dir: dir}, nil
}

// HasKey reports whether the CA can sign (it was created here or received with its key).
func (ca *CA) HasKey() bool { return ca.key != nil }
