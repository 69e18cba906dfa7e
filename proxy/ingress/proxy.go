package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

const (
	// badFor is how long a failed dial keeps an endpoint out of rotation (passive health).
	badFor = 5 * time.Second
	// maxAttempts bounds the endpoints tried for one request when dials fail.
	maxAttempts = 3
)

// Server is the HTTP(S) data plane: it routes each request with the current Table, which
// Swap replaces without touching open connections.
type Server struct {
	table     atomic.Pointer[Table]
	httpsPort string // for redirects; "" when HTTPS is off
	log       *logrus.Entry

	health    sync.Map // ip:port -> time.Time until which dials are not attempted
	counters  sync.Map // pool key -> *atomic.Uint64 (round-robin position survives swaps)
	transport *http.Transport
	proxy     *httputil.ReverseProxy
}

type poolKey struct{}

// NewServer returns a data plane with an empty table (every request answers 404).
// httpsPort is the port named in HTTP->HTTPS redirects ("" or "443" for none).
func NewServer(httpsPort string, log *logrus.Entry) *Server {
	s := &Server{httpsPort: httpsPort, log: log}
	s.transport = &http.Transport{
		Proxy:                 nil, // endpoints are pod IPs: never through an environment proxy
		DialContext:           (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	s.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "backend" // replaced per attempt by RoundTrip
			// Append to the client's X-Forwarded-For like other ingress proxies; the inbound
			// Host stays the Host the backend sees.
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
		},
		Transport: roundTripper{s},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			s.log.WithError(err).WithField("host", r.Host).Debug("backend request failed")
			http.Error(w, "502 bad gateway: "+err.Error(), http.StatusBadGateway)
		},
	}
	s.table.Store(&Table{})
	return s
}

// Swap installs a new routing table; requests in flight finish with the old one.
func (s *Server) Swap(t *Table) { s.table.Store(t) }

// Table returns the table in use.
func (s *Server) Table() *Table { return s.table.Load() }

// Handler serves one listener; tlsOn says whether it is the HTTPS one.
func (s *Server) Handler(tlsOn bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := s.table.Load().Lookup(r.Host, r.URL.Path)
		switch {
		case t == nil:
			http.Error(w, fmt.Sprintf("404 no Ingress rule matches host %q path %q", NormalizeHost(r.Host), r.URL.Path), http.StatusNotFound)
			return
		case !tlsOn && t.SSLRedirect && s.httpsPort != "":
			host := NormalizeHost(r.Host)
			if s.httpsPort != "443" {
				host = net.JoinHostPort(host, s.httpsPort)
			}
			http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
			return
		case t.Pool == nil:
			http.Error(w, "503 backend of Ingress "+t.Ingress+" is not a Service", http.StatusServiceUnavailable)
			return
		case len(t.Pool.Endpoints) == 0:
			http.Error(w, "503 "+t.Pool.Reason, http.StatusServiceUnavailable)
			return
		}
		s.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), poolKey{}, t.Pool)))
	})
}

// GetCertificate picks the certificate for the client's SNI name from the current table.
func (s *Server) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.table.Load().Certificate(hello.ServerName); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("no Ingress tls entry covers server name %q", hello.ServerName)
}

func (s *Server) healthy(addr string, now time.Time) bool {
	v, ok := s.health.Load(addr)
	return !ok || now.After(v.(time.Time))
}

// pick returns the next endpoint in round-robin order, skipping those whose last dial failed
// recently; when all did, it tries them anyway rather than fail without trying.
func (s *Server) pick(p *Pool, skip map[string]bool) string {
	v, _ := s.counters.LoadOrStore(p.Key, new(atomic.Uint64))
	n := uint64(len(p.Endpoints))
	start := v.(*atomic.Uint64).Add(1)
	now := time.Now()
	for i := uint64(0); i < n; i++ {
		a := p.Endpoints[(start+i)%n]
		if !skip[a] && s.healthy(a, now) {
			return a
		}
	}
	for i := uint64(0); i < n; i++ {
		if a := p.Endpoints[(start+i)%n]; !skip[a] {
			return a
		}
	}
	return ""
}

type roundTripper struct{ s *Server }

// RoundTrip sends the request to one endpoint of the pool, and to another when the dial fails
// (the request has not left yet, so this is safe for any method).
func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	p, _ := req.Context().Value(poolKey{}).(*Pool)
	if p == nil || len(p.Endpoints) == 0 {
		return nil, errors.New("no endpoint")
	}
	var body *onceBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &onceBody{rc: req.Body}
	}
	tried := map[string]bool{}
	var lastErr error
	for attempt := 0; attempt < maxAttempts && attempt < len(p.Endpoints); attempt++ {
		addr := rt.s.pick(p, tried)
		if addr == "" {
			break
		}
		tried[addr] = true
		out := *req
		u := *req.URL
		u.Host = addr
		out.URL = &u
		if body != nil {
			out.Body = body
		}
		resp, err := rt.s.transport.RoundTrip(&out)
		if err == nil {
			return resp, nil
		}
		lastErr = fmt.Errorf("endpoint %s of %s: %w", addr, p.Key, err)
		if !isDialError(err) || (body != nil && body.read.Load()) {
			return nil, lastErr
		}
		rt.s.health.Store(addr, time.Now().Add(badFor))
	}
	return nil, lastErr
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// onceBody lets a request body survive a failed dial: the transport closes the body on any
// error, but a body never read can still be sent to the next endpoint.
type onceBody struct {
	rc   io.ReadCloser
	read atomic.Bool
}

func (b *onceBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.rc.Read(p)
}

// Close is left to the HTTP server, which closes the inbound body when the handler returns.
func (b *onceBody) Close() error { return nil }
