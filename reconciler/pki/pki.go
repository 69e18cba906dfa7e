// Package pki keeps a site's certificate authority and the certificates signed by it: the API
// server's serving certificate, etcd's client and peer certificates, and the client
// certificates of the kubeconfigs made for people and CI jobs.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// CA is a certificate authority loaded from, or created in, a directory.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
	dir     string
}

// Usage says what a certificate is for.
type Usage int

const (
	// Server certificates are presented by listeners.
	Server Usage = 1 << iota
	// Client certificates are presented by clients.
	Client
)

// Request describes a certificate to issue.
type Request struct {
	// Name is the file stem: DIR/Name.crt and DIR/Name.key.
	Name         string
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Usage        Usage
}

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	certValidity = 5 * 365 * 24 * time.Hour
)

// LoadOrCreateCA loads DIR/ca.crt and DIR/ca.key, creating them on first start.
func LoadOrCreateCA(dir, commonName string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if _, err := os.Stat(certPath); err == nil {
		cert, certPEM, key, err := loadPair(certPath, keyPath)
		if err != nil {
			return nil, fmt.Errorf("load CA from %s: %w", dir, err)
		}
		return &CA{Cert: cert, CertPEM: certPEM, key: key, dir: dir}, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"flotilla"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writePair(certPath, keyPath, certPEM, key); err != nil {
		return nil, err
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: key, dir: dir}, nil
}

// LoadCA loads the CA of DIR/ca.crt and DIR/ca.key, which must exist: unlike LoadOrCreateCA
// it never creates one. When a file is missing the error names the files and wraps
// fs.ErrNotExist; when they cannot be read (not root) it wraps fs.ErrPermission.
func LoadCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	var missing []string
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, filepath.Base(p))
		} else if err != nil {
			return nil, fmt.Errorf("read the site CA in %s: %w", dir, err)
		}
	}
	if len(missing) > 0 {
		return nil, &noCAError{dir: dir, missing: missing}
	}
	cert, certPEM, key, err := loadPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("load CA from %s: %w", dir, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("load CA from %s: %s is not a CA certificate", dir, certPath)
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: key, dir: dir}, nil
}

// noCAError says which files of a CA are missing; it is an fs.ErrNotExist.
type noCAError struct {
	dir     string
	missing []string
}

func (e *noCAError) Error() string {
	return fmt.Sprintf("no site CA in %s (%s)", e.dir, strings.Join(e.missing, ", "))
}

func (e *noCAError) Unwrap() error { return fs.ErrNotExist }

// IssueClient signs a client certificate (client authentication only, a new ECDSA P-256 key)
// for commonName, the user name the API sees, with organizations as its groups. It is valid
// from five minutes ago (for clocks a little behind) for ttl, and never past the CA's own
// expiry: a ttl that would outlive the CA is an error. Nothing is written to the CA's
// directory; the key is PKCS #8 PEM.
func (ca *CA) IssueClient(commonName string, organizations []string, ttl time.Duration) (certPEM, keyPEM []byte, err error) {
	if commonName == "" {
		return nil, nil, errors.New("a client certificate needs a common name (the user name)")
	}
	if slices.Contains(organizations, "") {
		return nil, nil, errors.New("a client certificate's organizations (its groups) must not be empty strings")
	}
	if ttl <= 0 {
		return nil, nil, fmt.Errorf("validity %s: must be positive", ttl)
	}
	if ca.key == nil {
		return nil, nil, errors.New("the CA has no private key: it cannot sign")
	}
	now := time.Now()
	notAfter := now.Add(ttl)
	if notAfter.After(ca.Cert.NotAfter) {
		return nil, nil, fmt.Errorf("validity %s would end after the site CA expires (%s): at most %dh is possible",
			ttl, ca.Cert.NotAfter.UTC().Format(time.RFC3339), int64(ca.Cert.NotAfter.Sub(now)/time.Hour))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: commonName, Organization: slices.Clone(organizations)},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign a client certificate for %s: %w", commonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// SignBackdate is how far before the signing time a certificate of SignRequest starts to be
// valid, for clocks a little behind (upstream's csrsigning backdates by as much).
const SignBackdate = 5 * time.Minute

// SignRequest issues a certificate for the public key of a certificate request whose
// signature it checks, as kube-controller-manager's signer does: the request's subject and
// subject alternative names (DNS, IP, email, URI) are copied, its other extensions are not,
// and the key usages are those given. It is not a CA certificate. It is valid from
// SignBackdate ago; it ends ttl after now, or, for a ttl shorter than 8 hours, ttl after its
// start (so that it lives no longer than asked); never after the CA's own expiry. The
// certificate is returned in PEM.
func (ca *CA) SignRequest(cr *x509.CertificateRequest, usage x509.KeyUsage, extUsage []x509.ExtKeyUsage, ttl time.Duration) ([]byte, error) {
	if ca.key == nil {
		return nil, errors.New("the CA has no private key: it cannot sign")
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("validity %s: must be positive", ttl)
	}
	if err := cr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the certificate request's signature does not verify: %w", err)
	}
	now := time.Now()
	if !now.Before(ca.Cert.NotAfter) {
		return nil, fmt.Errorf("the site CA expired at %s", ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	notBefore, notAfter := now.Add(-SignBackdate), now.Add(ttl)
	if ttl < 8*time.Hour {
		notAfter = notBefore.Add(ttl)
	}
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               cr.Subject,
		DNSNames:              cr.DNSNames,
		IPAddresses:           cr.IPAddresses,
		EmailAddresses:        cr.EmailAddresses,
		URIs:                  cr.URIs,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              usage,
		ExtKeyUsage:           slices.Clone(extUsage),
		BasicConstraintsValid: true,
		IsCA:                  false,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, cr.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign a certificate for %q: %w", cr.Subject.CommonName, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// Hash is the CA's pin, "sha256:<hex of the DER certificate>" (as in k3s join tokens).
func (ca *CA) Hash() string {
	sum := sha256.Sum256(ca.Cert.Raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CertFile is the path of the CA certificate.
func (ca *CA) CertFile() string { return filepath.Join(ca.dir, "ca.crt") }

// Paths returns the certificate and key paths of a request's files.
func (ca *CA) Paths(name string) (certFile, keyFile string) {
	return filepath.Join(ca.dir, name+".crt"), filepath.Join(ca.dir, name+".key")
}

// Ensure issues the certificate unless a valid one with the same names and organizations
// already exists, and returns its paths. A host whose address changed, or a component whose
// groups changed, gets a new certificate with the same key.
func (ca *CA) Ensure(req Request) (certFile, keyFile string, err error) {
	certFile, keyFile = ca.Paths(req.Name)
	var key crypto.Signer
	if cert, _, k, err := loadPair(certFile, keyFile); err == nil {
		if covers(cert, req) && time.Until(cert.NotAfter) > 30*24*time.Hour && cert.CheckSignatureFrom(ca.Cert) == nil {
			return certFile, keyFile, nil
		}
		key = k
	}
	if key == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		key = k
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: req.Organization},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPs,
	}
	if req.Usage&Server != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Usage&Client != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return "", "", fmt.Errorf("sign %s: %w", req.Name, err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writePair(certFile, keyFile, certPEM, key); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// covers reports whether cert is what req asks for: the same common name and organizations
// (the groups the API sees, in any order), and at least its DNS names and addresses.
func covers(cert *x509.Certificate, req Request) bool {
	if cert.Subject.CommonName != req.CommonName {
		return false
	}
	have, want := slices.Clone(cert.Subject.Organization), slices.Clone(req.Organization)
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(slices.Compact(have), slices.Compact(want)) {
		return false
	}
	for _, d := range req.DNSNames {
		if !slices.Contains(cert.DNSNames, d) {
			return false
		}
	}
	for _, ip := range req.IPs {
		if !slices.ContainsFunc(cert.IPAddresses, func(c net.IP) bool { return c.Equal(ip) }) {
			return false
		}
	}
	return true
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

func loadPair(certPath, keyPath string) (*x509.Certificate, []byte, crypto.Signer, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, nil, errors.New("not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, nil, errors.New("key cannot sign")
	}
	return cert, certPEM, signer, nil
}

func writePair(certPath, keyPath string, certPEM []byte, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := writeAtomic(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(certPath, certPEM, 0o644)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// SameCA reports whether pemData holds the CA certificate.
func (ca *CA) SameCA(pemData []byte) bool {
	return bytes.Equal(bytes.TrimSpace(pemData), bytes.TrimSpace(ca.CertPEM))
}

// KeyPEM returns the CA private key in PEM, for hosts that join the site (k3s-style: every
// host can issue its own certificates).
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// InstallCA writes a CA received from the site into dir and loads it. It refuses to replace a
// different CA already there: a host belongs to one site.
func InstallCA(dir string, certPEM, keyPEM []byte) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if existing, err := os.ReadFile(certPath); err == nil && !bytes.Equal(bytes.TrimSpace(existing), bytes.TrimSpace(certPEM)) {
		return nil, fmt.Errorf("%s holds the CA of another site; use a new --data-dir to join this one", certPath)
	}
	if err := writeAtomic(keyPath, keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, err
	}
	cert, cp, key, err := loadPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("the site's CA is unusable: %w", err)
	}
	return &CA{Cert: cert, CertPEM: cp, key: key, dir: dir}, nil
}

// HashPEM returns the pin of a PEM CA certificate, as Hash does.
func HashPEM(certPEM []byte) (string, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return "", errors.New("not a PEM certificate")
	}
	sum := sha256.Sum256(b.Bytes)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
