package agent

import (
	"crypto/tls"
	"os"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// keyPairReloader serves the certificate of a certificate and a key file, read again when
// either file changes (a worker renews its serving certificate, a server host re-issues
// its own near expiry): a new TLS handshake presents the new pair, open connections keep
// theirs. The files are looked at, at most, every reloadCheckInterval; a pair that does
// not load (caught between the replacement of the key and of the certificate) leaves the
// previous one in use until the next look.
type keyPairReloader struct {
	certFile, keyFile string

	mu        sync.Mutex
	cert      *tls.Certificate
	certInfo  os.FileInfo
	keyInfo   os.FileInfo
	lastCheck time.Time
	now       func() time.Time
}

const reloadCheckInterval = time.Second

func newKeyPairReloader(certFile, keyFile string) (*keyPairReloader, error) {
	r := &keyPairReloader{certFile: certFile, keyFile: keyFile, now: time.Now}
	ci, ki, err := r.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cert, r.certInfo, r.keyInfo, r.lastCheck = &cert, ci, ki, r.now()
	return r, nil
}

func (r *keyPairReloader) stat() (os.FileInfo, os.FileInfo, error) {
	ci, err := os.Stat(r.certFile)
	if err != nil {
		return nil, nil, err
	}
	ki, err := os.Stat(r.keyFile)
	if err != nil {
		return nil, nil, err
	}
	return ci, ki, nil
}

func unchangedFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// GetCertificate is tls.Config.GetCertificate.
func (r *keyPairReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.lastCheck) >= reloadCheckInterval {
		r.lastCheck = now
		r.reloadLocked()
	}
	return r.cert, nil
}

func (r *keyPairReloader) reloadLocked() {
	ci, ki, err := r.stat()
	if err != nil {
		logrus.WithError(err).Warn("node agent endpoint: serving certificate files; serving the one loaded before")
		return
	}
	if unchangedFile(ci, r.certInfo) && unchangedFile(ki, r.keyInfo) {
		return
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		logrus.WithError(err).Debug("node agent endpoint: the serving certificate files changed but do not load (yet)")
		return
	}
	r.cert, r.certInfo, r.keyInfo = &cert, ci, ki
	log := logrus.NewEntry(logrus.StandardLogger())
	if cert.Leaf != nil {
		log = log.WithField("notAfter", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	log.Info("node agent endpoint: serving a new certificate")
}
