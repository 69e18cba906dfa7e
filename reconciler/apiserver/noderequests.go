package apiserver

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
	"github.com/flotilla-dev/flotilla/reconciler/hostaccess"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// nodeRequests tracks the requests in flight that present a host's client certificate
// (common name system:node:<name>), so that a host's removal ends them: the authenticator
// refuses its next requests, and endRevoked cancels those it is making, watches included,
// which would otherwise last until the API's watch timeout.
type nodeRequests struct {
	mu   sync.Mutex
	next uint64
	live map[uint64]nodeRequest
}

type nodeRequest struct {
	user      string
	notBefore time.Time
	cancel    context.CancelFunc
}

func newNodeRequests() *nodeRequests { return &nodeRequests{live: map[uint64]nodeRequest{}} }

// wrap tracks the requests of h that present a node certificate. The certificate is not
// verified here (authentication comes later in h); it only names what to cancel.
func (n *nodeRequests) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || !strings.HasPrefix(r.TLS.PeerCertificates[0].Subject.CommonName, rbac.NodeUserPrefix) {
			h.ServeHTTP(w, r)
			return
		}
		cert := r.TLS.PeerCertificates[0]
		ctx, cancel := context.WithCancel(r.Context())
		n.mu.Lock()
		id := n.next
		n.next++
		n.live[id] = nodeRequest{user: cert.Subject.CommonName, notBefore: cert.NotBefore, cancel: cancel}
		n.mu.Unlock()
		defer func() {
			n.mu.Lock()
			delete(n.live, id)
			n.mu.Unlock()
			cancel()
		}()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// endRevoked cancels the requests whose certificate revs revoke.
func (n *nodeRequests) endRevoked(revs map[string]hostaccess.Revocation) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ended := map[string]int{}
	for id, req := range n.live {
		if hostaccess.CertRevoked(revs, req.user, req.notBefore, pki.SignBackdate) {
			req.cancel()
			delete(n.live, id)
			ended[req.user]++
		}
	}
	for user, count := range ended {
		logrus.WithFields(logrus.Fields{"user": user, "requests": count}).Warn("ended the requests of a removed host")
	}
}
