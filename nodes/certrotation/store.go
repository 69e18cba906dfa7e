// Package certrotation keeps a host's CSR-signed certificates current, as the kubelet does:
// a client-go certificate.Manager renews each one at a jittered 70–90% of its lifetime
// through a CertificateSigningRequest filed with the host's own current client
// certificate; FileStore keeps the pair in the files the host already reads, and
// ClientConfig makes a rest.Config whose connections present the store's current
// certificate and are closed when it changes (the kubelet's UpdateTransport).
package certrotation

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/client-go/util/certificate"
)

// FileStore is a certificate.Store over a certificate file and a key file (PEM). Update
// replaces both so that a crash leaves either the old or the new pair: the new pair is
// first written, synced, to <cert>.pending (certificate and key), then the key and the
// certificate files are each replaced by a rename, then the pending file is removed; a
// pending file found by Current is installed first.
type FileStore struct {
	certFile, keyFile string

	mu       sync.Mutex
	cur      *tls.Certificate
	onUpdate []func(*tls.Certificate)
}

var _ certificate.Store = (*FileStore)(nil)

// NewFileStore returns the store of certFile and keyFile; nothing is read yet.
func NewFileStore(certFile, keyFile string) *FileStore {
	return &FileStore{certFile: certFile, keyFile: keyFile}
}

func (s *FileStore) pendingFile() string { return s.certFile + ".pending" }

// Files returns the certificate and key paths.
func (s *FileStore) Files() (certFile, keyFile string) { return s.certFile, s.keyFile }

// OnUpdate registers f, called with the new certificate after each Update.
func (s *FileStore) OnUpdate(f func(*tls.Certificate)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onUpdate = append(s.onUpdate, f)
}

// Current reads the pair from the files (installing a pending pair a crash left). With
// no files it returns a *certificate.NoCertKeyError.
func (s *FileStore) Current() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, err := os.ReadFile(s.pendingFile()); err == nil {
		certPEM, keyPEM := splitPEM(b)
		if _, err := parsePair(certPEM, keyPEM); err == nil {
			if err := s.install(certPEM, keyPEM); err != nil {
				return nil, err
			}
		} else {
			// Written only in part: the installed pair is still the old one.
			_ = os.Remove(s.pendingFile())
		}
	}
	certPEM, cerr := os.ReadFile(s.certFile)
	keyPEM, kerr := os.ReadFile(s.keyFile)
	if errors.Is(cerr, fs.ErrNotExist) || errors.Is(kerr, fs.ErrNotExist) {
		e := certificate.NoCertKeyError(fmt.Sprintf("no certificate and key in %s and %s", s.certFile, s.keyFile))
		return nil, &e
	}
	if err := errors.Join(cerr, kerr); err != nil {
		return nil, err
	}
	c, err := parsePair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", s.certFile, s.keyFile, err)
	}
	s.cur = c
	return c, nil
}

// Update installs a new pair and makes it the current one.
func (s *FileStore) Update(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	c, err := parsePair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	pending := append(append([]byte{}, certPEM...), keyPEM...)
	if err := writeSynced(s.pendingFile(), pending, 0o600); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if err := s.install(certPEM, keyPEM); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.cur = c
	hooks := append([]func(*tls.Certificate){}, s.onUpdate...)
	s.mu.Unlock()
	for _, f := range hooks {
		f(c)
	}
	return c, nil
}

// Cached is the pair last read or installed, nil before the first Current or Update.
func (s *FileStore) Cached() *tls.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// install replaces the key, then the certificate, then removes the pending file. The key
// comes first so that a reader that checks the pair never sees the new certificate with
// the old key for longer than the two renames.
func (s *FileStore) install(certPEM, keyPEM []byte) error {
	if err := writeSynced(s.keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeSynced(s.certFile, certPEM, 0o644); err != nil {
		return err
	}
	if err := os.Remove(s.pendingFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(s.certFile))
}

// splitPEM splits a pending file into its certificates and its other blocks (the key).
func splitPEM(b []byte) (certPEM, keyPEM []byte) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return certPEM, keyPEM
		}
		if blk.Type == "CERTIFICATE" {
			certPEM = append(certPEM, pem.EncodeToMemory(blk)...)
		} else {
			keyPEM = append(keyPEM, pem.EncodeToMemory(blk)...)
		}
	}
}

// parsePair parses a certificate and its key, with the certificate's Leaf.
func parsePair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// writeSynced writes path atomically: a synced temporary file renamed over it.
func writeSynced(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }()
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	_ = d.Sync()
	return nil
}
