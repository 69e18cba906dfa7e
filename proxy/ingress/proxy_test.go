package ingress

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// backend is a loopback HTTP server that answers with its name and what it was sent.
func backend(t *testing.T, name string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Seen-Host", r.Host)
		w.Header().Set("X-Seen-XFF", r.Header.Get("X-Forwarded-For"))
		w.Header().Set("X-Seen-Proto", r.Header.Get("X-Forwarded-Proto"))
		w.Header().Set("X-Seen-XFH", r.Header.Get("X-Forwarded-Host"))
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// deadAddr is a loopback address on which nothing listens.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}

// tableWith routes everything of host-less Prefix "/" to a pool of the given endpoints.
func tableWith(eps []string, redirect bool) *Table {
	pool := &Pool{Key: "default/web:80", Endpoints: eps}
	if len(eps) == 0 {
		pool.Reason = "no ready endpoints for Service default/web:80"
	}
	tg := &Target{Ingress: "default/web", Path: "/", Pool: pool, SSLRedirect: redirect}
	return &Table{exact: map[string]*hostRoutes{"web.example": {routes: []route{{path: "/", target: tg}}}}}
}

func newTestServer(t *testing.T) (*Server, *httptest.Server) {
	s := NewServer("8443", logrus.NewEntry(logrus.New()))
	front := httptest.NewServer(s.Handler(false))
	t.Cleanup(front.Close)
	t.Cleanup(s.transport.CloseIdleConnections)
	return s, front
}

func do(t *testing.T, method, url, host, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("X-Forwarded-For", "192.0.2.7")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestProxyRoundRobinAndHeaders(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	s := NewServer("8443", logrus.NewEntry(logrus.New()))
	t.Cleanup(s.transport.CloseIdleConnections)
	var clientIP atomic.Value // the address the proxy saw the client at
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		clientIP.Store(ip)
		s.Handler(false).ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	s.Swap(tableWith([]string{a.Listener.Addr().String(), b.Listener.Addr().String()}, false))
	counts := map[string]int{}
	for i := 0; i < 10; i++ {
		resp := do(t, "GET", front.URL+"/x", "web.example:8080", "")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		counts[resp.Header.Get("X-Backend")]++
		if i == 0 {
			h := resp.Header
			if h.Get("X-Seen-Host") != "web.example:8080" || h.Get("X-Seen-XFH") != "web.example:8080" ||
				h.Get("X-Seen-Proto") != "http" || h.Get("X-Seen-XFF") != "192.0.2.7, "+clientIP.Load().(string) {
				t.Errorf("backend saw Host %q X-Forwarded-Host %q -Proto %q -For %q", h.Get("X-Seen-Host"), h.Get("X-Seen-XFH"), h.Get("X-Seen-Proto"), h.Get("X-Seen-XFF"))
			}
		}
	}
	if counts["a"] != 5 || counts["b"] != 5 {
		t.Errorf("round robin: %v, want 5/5", counts)
	}
}

// TestProxyPassiveHealth: a dead endpoint costs no failed request (the dial is retried on the
// other endpoint, with the body intact) and is skipped afterwards.
func TestProxyPassiveHealth(t *testing.T) {
	live := backend(t, "live")
	dead := deadAddr(t)
	s, front := newTestServer(t)
	s.Swap(tableWith([]string{dead, live.Listener.Addr().String()}, false))
	for i := 0; i < 6; i++ {
		req, _ := http.NewRequest("POST", front.URL+"/upload", strings.NewReader("payload-"+string(rune('0'+i))))
		req.Host = "web.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "payload-"+string(rune('0'+i)) {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if s.healthy(dead, time.Now()) {
		t.Errorf("dead endpoint %s not marked bad", dead)
	}
	// All endpoints dead: 502 after trying each once.
	s.Swap(tableWith([]string{dead, deadAddr(t)}, false))
	if resp := do(t, "GET", front.URL+"/", "web.example", ""); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("all dead: status %d, want 502", resp.StatusCode)
	}
}

func TestProxyStatusCodes(t *testing.T) {
	s, front := newTestServer(t)
	s.Swap(tableWith(nil, false))
	if resp := do(t, "GET", front.URL+"/", "web.example", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("no endpoints: %d, want 503", resp.StatusCode)
	}
	if resp := do(t, "GET", front.URL+"/", "other.example", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("no rule: %d, want 404", resp.StatusCode)
	}
	s.Swap(tableWith([]string{"127.0.0.1:1"}, true))
	resp := do(t, "GET", front.URL+"/a?b=c", "web.example:8080", "")
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != "https://web.example:8443/a?b=c" {
		t.Errorf("ssl-redirect: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The HTTPS listener never redirects.
	tlsFront := httptest.NewServer(s.Handler(true))
	defer tlsFront.Close()
	if resp := do(t, "GET", tlsFront.URL+"/a", "web.example", ""); resp.StatusCode == http.StatusPermanentRedirect {
		t.Errorf("https handler redirected")
	}
	// A refused (resource) backend never reaches the table; a nil pool answers 503, not a panic.
	s.Swap(&Table{def: &Target{Ingress: "default/x"}})
	if resp := do(t, "GET", front.URL+"/", "any", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("nil pool: %d", resp.StatusCode)
	}
}

// TestRoutingPathDoesNotAllocate: finding a request's target, the reverse proxy of its pool
// and the endpoint to send it to allocates nothing once the pool has served a request, and
// the copy buffers come back to their pool.
func TestRoutingPathDoesNotAllocate(t *testing.T) {
	s := NewServer("", logrus.NewEntry(logrus.New()))
	s.Swap(tableWith([]string{"192.0.2.1:80", "192.0.2.2:80"}, false))
	var tried [maxAttempts]string
	route := func() {
		tg := s.Table().Lookup("web.example:8080", "/x/y")
		if tg == nil || s.proxyFor(tg.Pool) == nil {
			t.Fatal("no route")
		}
		if s.pick(tg.Pool, tg.Pool.proxy.Load().next, tried[:0]) == "" {
			t.Fatal("no endpoint")
		}
	}
	if n := testing.AllocsPerRun(1000, route); n != 0 {
		t.Errorf("routing a request: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { s.Table().Lookup("Web.Example.:8080", "/") }); n != 0 {
		t.Errorf("routing a request with capitals in Host: %v allocations, want 0", n)
	}
	for _, h := range []string{"web.example", "WEB.Example.:80", "[::1]:8080", "[::1]", "::1", "ÄBC.example", "", ":80", "x."} {
		if got := string(appendHostKey(nil, h)); got != NormalizeHost(h) {
			t.Errorf("host key of %q is %q, NormalizeHost says %q", h, got, NormalizeHost(h))
		}
	}
	if n := testing.AllocsPerRun(1000, func() { s.buffers.Put(s.buffers.Get()) }); n != 0 {
		t.Errorf("buffer pool: %v allocations, want 0", n)
	}
}

// BenchmarkLookup measures routing one request through a table of 1,000 hosts x 10 paths.
func BenchmarkLookup(b *testing.B) {
	var ings []*networkingv1.Ingress
	for i := 0; i < 1000; i++ {
		var paths []p
		for j := 0; j < 10; j++ {
			paths = append(paths, p{prefix, fmt.Sprintf("/svc%d/v%d", i, j)})
		}
		ing := pathIngress(paths, false)
		ing.Name = fmt.Sprintf("ing-%d", i)
		ing.Spec.Rules[0].Host = fmt.Sprintf("host%d.example.com", i)
		ings = append(ings, ing)
	}
	start := time.Now()
	tab, _ := Compile(Snapshot{Ingresses: ings})
	compile := time.Since(start)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if tab.Lookup("HOST500.example.com:80", "/svc500/v9/x/y") == nil {
			b.Fatal("no match")
		}
	}
	b.ReportMetric(float64(compile.Microseconds()), "compile-µs")
}

// BenchmarkProxy measures requests/s through the handler to a loopback backend (keep-alive on
// both sides), the figure to compare with another proxy on the same machine.
func BenchmarkProxy(b *testing.B) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer be.Close()
	s := NewServer("", logrus.NewEntry(logrus.New()))
	s.Swap(tableWith([]string{be.Listener.Addr().String()}, false))
	front := httptest.NewServer(s.Handler(false))
	defer front.Close()
	defer s.transport.CloseIdleConnections()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	if os.Getenv("BENCH_DIRECT") != "" { // the same client straight to the backend, for comparison
		front.URL = be.URL
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("GET", front.URL+"/", nil)
			req.Host = "web.example"
			resp, err := c.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

// TestRunReportsBusyPort: a port already in use is an error that names what to change.
func TestRunReportsBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = Run(ctx, fake.NewClientset(), Config{NodeName: "n", HTTPAddr: l.Addr().String(), Log: logrus.NewEntry(logrus.New())})
	if err == nil || !strings.Contains(err.Error(), "--ingress-http-port") {
		t.Errorf("Run on a busy port: %v", err)
	}
}
