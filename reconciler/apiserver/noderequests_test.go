package apiserver

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/reconciler/hostaccess"
)

// TestRemovalEndsOpenRequests: a request in flight with a removed host's certificate (a
// watch) is ended by the removal; another host's is not.
func TestRemovalEndsOpenRequests(t *testing.T) {
	n := newNodeRequests()
	ended := make(chan string, 2)
	h := n.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			ended <- r.Header.Get("X-Host")
		case <-time.After(20 * time.Second):
		}
	}))
	issued := time.Now().Add(-time.Hour)
	open := func(user string) {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods?watch=1", nil)
		r.Header.Set("X-Host", user)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "system:node:" + user}, NotBefore: issued}}}
		go h.ServeHTTP(httptest.NewRecorder(), r)
	}
	open("h4")
	open("h5")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n.mu.Lock()
		live := len(n.live)
		n.mu.Unlock()
		if live == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests tracked, want 2", live)
		}
	}
	n.endRevoked(map[string]hostaccess.Revocation{"h4": {RevokedAt: time.Now()}})
	select {
	case got := <-ended:
		if got != "h4" {
			t.Fatalf("ended the request of %s, want h4's", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the removed host's request still runs")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.live) != 1 {
		t.Errorf("%d requests tracked after the removal, want h5's only", len(n.live))
	}
}
