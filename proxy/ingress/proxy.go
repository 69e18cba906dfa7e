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
	"slices"
	"strings"
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

	health    sync.Map    // ip:port -> time.Time until which dials are not attempted
	anyBad    atomic.Bool // health has had an entry: until then no request looks it up
	counters  sync.Map    // pool key -> *atomic.Uint64 (round-robin position survives swaps)
	transport *backendTransport
	buffers   bufferPool
}

// poolProxy is the reverse proxy of one Pool of one Server, made on the pool's first request
// and kept in the Pool, so that a request reaches its endpoints without a context value, a
// copy of the request to carry it, or a map look-up for the round-robin counter.
type poolProxy struct {
	s     *Server
	proxy httputil.ReverseProxy
	next  *atomic.Uint64 // round-robin position, shared by the pools of the same key across swaps
}

// bufferSize is the size of the buffers responses are copied through, the size
// ReverseProxy allocates for every response when it has no pool.
const bufferSize = 32 << 10

// bufferPool recycles ReverseProxy's copy buffers. It keeps array pointers rather than
// slices, so that neither Get nor Put allocates (a slice put in a sync.Pool would be boxed).
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if a, ok := b.p.Get().(*[bufferSize]byte); ok {
		return a[:]
	}
	return make([]byte, bufferSize)
}

func (b *bufferPool) Put(buf []byte) {
	if len(buf) == bufferSize {
		b.p.Put((*[bufferSize]byte)(buf))
	}
}

// NewServer returns a data plane with an empty table (every request answers 404).
// httpsPort is the port named in HTTP->HTTPS redirects ("" or "443" for none).
func NewServer(httpsPort string, log *logrus.Entry) *Server {
	s := &Server{httpsPort: httpsPort, log: log}
	// Endpoints are pod IPs: never through an environment proxy. The idle pool's bounds and
	// timeout are in backend.go.
	s.transport = newBackendTransport()
	s.table.Store(&Table{})
	return s
}

// proxyFor returns the reverse proxy to p's endpoints, made once per pool (a new table brings
// new pools, so this happens again after each swap, once per pool, not per request).
func (s *Server) proxyFor(p *Pool) *httputil.ReverseProxy {
	if pp := p.proxy.Load(); pp != nil && pp.s == s {
		return &pp.proxy
	}
	v, _ := s.counters.Load(p.Key)
	if v == nil {
		v, _ = s.counters.LoadOrStore(p.Key, new(atomic.Uint64))
	}
	pp := &poolProxy{s: s, next: v.(*atomic.Uint64)}
	pp.proxy = httputil.ReverseProxy{
		Rewrite:      rewrite,
		Transport:    roundTripper{s: s, p: p, next: pp.next},
		BufferPool:   &s.buffers,
		ErrorHandler: s.proxyError,
	}
	// A pool served by two Servers keeps the first one's proxy; the other builds its own for
	// each request, which is correct, only slower.
	p.proxy.CompareAndSwap(nil, pp)
	return &pp.proxy
}

// rewrite makes the outbound request: the inbound Host stays the Host the backend sees, and
// X-Forwarded-For gets the client appended, like other ingress proxies. It does what
// ProxyRequest.SetXForwarded does with one allocation for the three headers instead of three.
func rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = "backend" // replaced per attempt by RoundTrip
	proto := "http"
	if pr.In.TLS != nil {
		proto = "https"
	}
	vals := make([]string, 3)
	vals[1], vals[2] = pr.In.Host, proto
	// Capacities of one keep an append by someone else from writing into the next header.
	pr.Out.Header["X-Forwarded-Host"] = vals[1:2:2]
	pr.Out.Header["X-Forwarded-Proto"] = vals[2:3:3]
	clientIP, _, err := net.SplitHostPort(pr.In.RemoteAddr)
	if err != nil {
		return // no client address to report: the backend gets no X-Forwarded-For
	}
	if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
		clientIP = strings.Join(prior, ", ") + ", " + clientIP
	}
	vals[0] = clientIP
	pr.Out.Header["X-Forwarded-For"] = vals[0:1:1]
}

func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	s.log.WithError(err).WithField("host", r.Host).Debug("backend request failed")
	http.Error(w, "502 bad gateway: "+err.Error(), http.StatusBadGateway)
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
		s.proxyFor(t.Pool).ServeHTTP(w, r)
	})
}

// GetCertificate picks the certificate for the client's SNI name from the current table.
func (s *Server) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.table.Load().Certificate(hello.ServerName); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("no Ingress tls entry covers server name %q", hello.ServerName)
}

// healthy reports whether addr may be dialled; while no dial has ever failed it looks nothing
// up (a look-up in the sync.Map costs an allocation for the key).
func (s *Server) healthy(addr string, now time.Time) bool {
	if !s.anyBad.Load() {
		return true
	}
	v, ok := s.health.Load(addr)
	if now.IsZero() { // pick saw no failure yet; one has been recorded since
		now = time.Now()
	}
	return !ok || now.After(v.(time.Time))
}

func (s *Server) markBad(addr string) {
	s.health.Store(addr, time.Now().Add(badFor))
	s.anyBad.Store(true)
}

// pick returns the next endpoint in round-robin order (next is the pool's position), skipping
// those already tried for this request and those whose last dial failed recently; when all
// did, it tries them anyway rather than fail without trying.
func (s *Server) pick(p *Pool, next *atomic.Uint64, tried []string) string {
	n := uint64(len(p.Endpoints))
	start := next.Add(1)
	var now time.Time
	if s.anyBad.Load() {
		now = time.Now()
	}
	for i := uint64(0); i < n; i++ {
		a := p.Endpoints[(start+i)%n]
		if !slices.Contains(tried, a) && s.healthy(a, now) {
			return a
		}
	}
	for i := uint64(0); i < n; i++ {
		if a := p.Endpoints[(start+i)%n]; !slices.Contains(tried, a) {
			return a
		}
	}
	return ""
}

// roundTripper sends the requests of one pool.
type roundTripper struct {
	s    *Server
	p    *Pool
	next *atomic.Uint64
}

// RoundTrip sends the request to one endpoint of the pool, and to another when the dial fails
// (the request has not left yet, so this is safe for any method).
//
// req is the outbound request ReverseProxy made for this call alone (its own URL, from
// Request.Clone), so RoundTrip sets the endpoint in it rather than copying it per attempt.
func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	p := rt.p
	if len(p.Endpoints) == 0 {
		return nil, errors.New("no endpoint")
	}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &onceBody{rc: req.Body}
	}
	var triedBuf [maxAttempts]string
	tried := triedBuf[:0]
	var lastErr error
	for attempt := 0; attempt < maxAttempts && attempt < len(p.Endpoints); attempt++ {
		addr := rt.s.pick(p, rt.next, tried)
		if addr == "" {
			break
		}
		tried = append(tried, addr)
		req.URL.Host = addr
		resp, err := rt.s.transport.RoundTrip(req)
		if err == nil {
			return resp, nil
		}
		lastErr = fmt.Errorf("endpoint %s of %s: %w", addr, p.Key, err)
		if body, ok := req.Body.(*onceBody); !isDialError(err) || (ok && body.read.Load()) {
			return nil, lastErr
		}
		rt.s.markBad(addr)
	}
	return nil, lastErr
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// onceBody lets a request body survive a failed dial or a stale keep-alive connection:
// Request.Write closes the body when it is done or fails, but a body never read can still be
// sent again, to the next endpoint or on a new connection.
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
