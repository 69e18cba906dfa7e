package agent

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRequirePeer(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	cfg := ServerConfig{Peer: func(name string) bool { return name == "host-2" }}
	h := requirePeer(cfg, ok)
	for _, tc := range []struct {
		what   string
		cert   *x509.Certificate
		status int
	}{
		{"no client certificate", nil, http.StatusUnauthorized},
		{"another host of the site", &x509.Certificate{Subject: pkix.Name{CommonName: "system:node:host-2", Organization: []string{"system:nodes"}}}, http.StatusOK},
		{"a removed host", &x509.Certificate{Subject: pkix.Name{CommonName: "system:node:host-9", Organization: []string{"system:nodes"}}}, http.StatusForbidden},
		{"a node name outside system:nodes", &x509.Certificate{Subject: pkix.Name{CommonName: "system:node:host-2"}}, http.StatusForbidden},
		{"a controller's certificate", &x509.Certificate{Subject: pkix.Name{CommonName: "system:controller:x"}}, http.StatusForbidden},
		{"the API server's node client", &x509.Certificate{Subject: pkix.Name{CommonName: "kube-apiserver-kubelet-client"}}, http.StatusForbidden},
	} {
		req := httptest.NewRequest(http.MethodGet, "/v2/", nil)
		req.TLS = &tls.ConnectionState{}
		if tc.cert != nil {
			req.TLS.VerifiedChains = [][]*x509.Certificate{{tc.cert}}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.status {
			t.Errorf("%s: %d, want %d", tc.what, rec.Code, tc.status)
		}
	}
}
