package ingress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testBackend is a loopback HTTP server that reports each connection it closes.
type testBackend struct {
	*httptest.Server
	addr     string
	closed   chan struct{}                  // a value per connection closed
	idleHook atomic.Pointer[func(net.Conn)] // called as a connection goes idle
}

func newBackend(t *testing.T, h http.HandlerFunc) *testBackend {
	t.Helper()
	b := &testBackend{closed: make(chan struct{}, 100)}
	s := httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateIdle:
			if f := b.idleHook.Load(); f != nil {
				(*f)(c)
			}
		case http.StateClosed:
			select {
			case b.closed <- struct{}{}:
			default:
			}
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	b.Server, b.addr = s, s.Listener.Addr().String()
	return b
}

// closeIdle makes the backend close each connection as soon as it is idle, with a reset
// (linger 0) when rst.
func (b *testBackend) closeIdle(rst bool) {
	f := func(c net.Conn) {
		if rst {
			_ = c.(*net.TCPConn).SetLinger(0)
		}
		_ = c.Close()
	}
	b.idleHook.Store(&f)
}

// waitClosed waits for the backend to close one more connection.
func (b *testBackend) waitClosed(t *testing.T) {
	t.Helper()
	select {
	case <-b.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's connection was not closed within 5s")
	}
}

// testTransport returns a transport that counts its dials.
func testTransport(t *testing.T) (*backendTransport, *atomic.Int64) {
	tr := newBackendTransport()
	var dials atomic.Int64
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr, &dials
}

func newRequest(t *testing.T, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// fetch sends a request through tr and reads its response.
func fetch(t *testing.T, tr *backendTransport, method, url string, body io.Reader) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := tr.RoundTrip(newRequest(t, ctx, method, url, body))
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	resp.Body.Close()
	return resp, string(b)
}

func expectDials(t *testing.T, dials *atomic.Int64, want int64) {
	t.Helper()
	if n := dials.Load(); n != want {
		t.Errorf("%d dials, want %d", n, want)
	}
}

// tcpState returns the kernel's TCP state of the newest idle connection to addr.
func tcpState(t *testing.T, tr *backendTransport, addr string) uint8 {
	t.Helper()
	tr.mu.Lock()
	s := tr.idle[addr]
	if s == nil || len(s.conns) == 0 {
		tr.mu.Unlock()
		t.Fatal("no idle connection")
	}
	c := s.conns[len(s.conns)-1]
	tr.mu.Unlock()
	var state uint8
	if err := c.raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			state = info.State
		}
	}); err != nil {
		t.Fatal(err)
	}
	return state
}

// waitTCPState waits until the newest idle connection to addr is in the TCP state want (the
// FIN or the reset the backend sent has arrived).
func waitTCPState(t *testing.T, tr *backendTransport, addr string, want uint8) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for tcpState(t, tr, addr) != want {
		if time.Now().After(deadline) {
			t.Fatalf("idle connection in TCP state %d, want %d", tcpState(t, tr, addr), want)
		}
		time.Sleep(time.Millisecond)
	}
}

const (
	tcpCloseWait = 8 // TCP_CLOSE_WAIT: the backend's FIN came
	tcpClose     = 7 // TCP_CLOSE: the backend's reset came
)

func TestBackendKeepAlive(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s ua=%q ae=%q", r.Method, r.URL.Path, r.Host, r.UserAgent(), r.Header.Get("Accept-Encoding"))
	})
	tr, dials := testTransport(t)
	for i := range 5 {
		req := newRequest(t, context.Background(), "GET", b.URL+fmt.Sprintf("/p%d", i), nil)
		req.Host = "web.example"
		req.Header.Set("User-Agent", "") // as ReverseProxy does when the client sent none
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf(`GET /p%d web.example ua="" ae=""`, i); resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("request %d: %d %q, want %q", i, resp.StatusCode, body, want)
		}
	}
	expectDials(t, dials, 1)
	// Two responses open at once take two connections, both kept.
	r1, err := tr.RoundTrip(newRequest(t, context.Background(), "GET", b.URL+"/a", nil))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := tr.RoundTrip(newRequest(t, context.Background(), "GET", b.URL+"/b", nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*http.Response{r1, r2} {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	expectDials(t, dials, 2)
	if n := tr.idleConns(b.addr); n != 2 {
		t.Errorf("%d idle connections, want 2", n)
	}
}

func TestBackendChunkedBodiesAndTrailers(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Trailer", "X-Resp-Trailer")
		fmt.Fprintf(w, "te=%v body=%s ", r.TransferEncoding, body)
		w.(http.Flusher).Flush() // no Content-Length: chunked
		fmt.Fprintf(w, "trailer=%s", r.Trailer.Get("X-Req-Trailer"))
		w.Header().Set("X-Resp-Trailer", "rv")
	})
	tr, dials := testTransport(t)
	for i := range 2 {
		// An io.Reader of unknown length: sent chunked.
		req := newRequest(t, context.Background(), "POST", b.URL+"/", io.MultiReader(strings.NewReader("hello "), strings.NewReader("world")))
		req.Trailer = http.Header{"X-Req-Trailer": {"tv"}}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := "te=[chunked] body=hello world trailer=tv"; string(body) != want {
			t.Errorf("request %d: body %q, want %q", i, body, want)
		}
		if !slices.Equal(resp.TransferEncoding, []string{"chunked"}) || resp.Trailer.Get("X-Resp-Trailer") != "rv" {
			t.Errorf("request %d: Transfer-Encoding %v, trailer %v", i, resp.TransferEncoding, resp.Trailer)
		}
	}
	expectDials(t, dials, 1)
}

// TestBackendResponsesWithoutBody: HEAD, 204 and 304 end with their headers, and the
// connection serves the next request.
func TestBackendResponsesWithoutBody(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.Header().Set("ETag", `"x"`)
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Header().Set("Content-Length", "1000")
			if r.Method != "HEAD" {
				_, _ = w.Write(make([]byte, 1000))
			}
		}
	})
	tr, dials := testTransport(t)
	for _, tc := range []struct {
		method, path string
		code         int
		length       int64
	}{{"HEAD", "/", 200, 1000}, {"GET", "/204", 204, 0}, {"GET", "/304", 304, 0}, {"GET", "/", 200, 1000}} {
		resp, body := fetch(t, tr, tc.method, b.URL+tc.path, nil)
		if resp.StatusCode != tc.code || resp.ContentLength != tc.length && tc.code != 304 || len(body) != int(tc.length) && tc.method != "HEAD" {
			t.Errorf("%s %s: %d, Content-Length %d, %d bytes", tc.method, tc.path, resp.StatusCode, resp.ContentLength, len(body))
		}
		if n := tr.idleConns(b.addr); n != 1 {
			t.Errorf("%s %s: %d idle connections, want 1", tc.method, tc.path, n)
		}
	}
	expectDials(t, dials, 1)
}

func TestBackendConnectionClose(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, "ok")
	})
	tr, dials := testTransport(t)
	for range 3 {
		if resp, body := fetch(t, tr, "GET", b.URL+"/close", nil); resp.StatusCode != 200 || body != "ok" || !resp.Close {
			t.Fatalf("%d %q close=%v", resp.StatusCode, body, resp.Close)
		}
		b.waitClosed(t)
		if n := tr.idleConns(b.addr); n != 0 {
			t.Fatalf("%d idle connections after Connection: close", n)
		}
	}
	expectDials(t, dials, 3)
	// Connection: close from the request side.
	req := newRequest(t, context.Background(), "GET", b.URL+"/", nil)
	req.Close = true
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	b.waitClosed(t)
	if n := tr.idleConns(b.addr); n != 0 {
		t.Errorf("%d idle connections after a request with Connection: close", n)
	}
	expectDials(t, dials, 4)
}

// TestBackendStaleIdleConnection: a keep-alive connection the backend closed while it was
// idle costs no failed request when the request can be sent again, and a request whose body
// has been read is not sent twice.
func TestBackendStaleIdleConnection(t *testing.T) {
	echo := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s", r.Method, body)
	}

	t.Run("GET is sent again", func(t *testing.T) {
		b := newBackend(t, echo)
		b.closeIdle(false)
		tr, dials := testTransport(t)
		tr.peekAfter = -1 // no peek: the request goes out on the closed connection
		fetch(t, tr, "GET", b.URL+"/", nil)
		b.waitClosed(t)
		if n := tr.idleConns(b.addr); n != 1 {
			t.Fatalf("%d idle connections, want the stale one", n)
		}
		if resp, body := fetch(t, tr, "GET", b.URL+"/", nil); resp.StatusCode != 200 || body != "GET " {
			t.Errorf("after the backend closed the idle connection: %d %q", resp.StatusCode, body)
		}
		expectDials(t, dials, 2)
	})

	t.Run("POST whose body was not read is sent again", func(t *testing.T) {
		b := newBackend(t, echo)
		b.closeIdle(true)
		tr, dials := testTransport(t)
		tr.peekAfter = -1
		fetch(t, tr, "GET", b.URL+"/", nil)
		b.waitClosed(t)
		waitTCPState(t, tr, b.addr, tcpClose) // the reset arrived: the first write fails
		postPayload(t, tr, b.URL+"/")
		expectDials(t, dials, 2)
	})

	t.Run("POST skips a closed connection", func(t *testing.T) {
		b := newBackend(t, echo)
		b.closeIdle(false)
		tr, dials := testTransport(t)
		fetch(t, tr, "GET", b.URL+"/", nil)
		b.waitClosed(t)
		waitTCPState(t, tr, b.addr, tcpCloseWait) // the FIN arrived: a write would still succeed
		postPayload(t, tr, b.URL+"/")
		expectDials(t, dials, 2)
	})

	t.Run("POST whose body was partly sent fails", func(t *testing.T) {
		var posts atomic.Int64
		aborted := make(chan struct{})
		b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != "POST" {
				return
			}
			posts.Add(1)
			_, _ = io.ReadFull(r.Body, make([]byte, 4))
			// The backend dies half way through the body.
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				c.Close()
			}
			close(aborted)
		})
		tr, dials := testTransport(t)
		fetch(t, tr, "GET", b.URL+"/", nil) // the POST goes out on a kept connection
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write([]byte("abcd"))
			<-aborted
			_, _ = pw.Write([]byte("efgh"))
			pw.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := newRequest(t, ctx, "POST", b.URL+"/", nil)
		req.Body, req.ContentLength = &onceBody{rc: pr}, -1
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("status %d, want an error", resp.StatusCode)
		}
		if !isConnGone(err) {
			t.Errorf("error %v, want one of a closed connection", err)
		}
		if n := posts.Load(); n != 1 {
			t.Errorf("the backend got the POST %d times, want 1", n)
		}
		expectDials(t, dials, 1)
	})

	t.Run("unsolicited response on an idle connection", func(t *testing.T) {
		// A raw backend that answers, then sends a 408 and closes once told to, as some
		// servers do when an idle connection times out.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		timeout := make(chan struct{})
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
						return
					}
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					<-timeout
					_, _ = io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
				}()
			}
		}()
		tr, dials := testTransport(t)
		tr.peekAfter = 0 // however short the connection was idle
		addr := l.Addr().String()
		fetch(t, tr, "GET", "http://"+addr+"/", nil)
		close(timeout)
		waitTCPState(t, tr, addr, tcpCloseWait) // the 408 and the FIN arrived
		if resp, body := fetch(t, tr, "GET", "http://"+addr+"/", nil); resp.StatusCode != 200 || body != "ok" {
			t.Errorf("%d %q, want the response to this request, not the 408", resp.StatusCode, body)
		}
		expectDials(t, dials, 2)
	})
}

func TestBackend1xxResponses(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		body, _ := io.ReadAll(r.Body) // sends 100 Continue: the request expects it
		fmt.Fprintf(w, "got %s", body)
	})
	tr, dials := testTransport(t)
	var mu sync.Mutex
	var seen []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%d %s", code, h.Get("Link")))
		return nil
	}}
	for range 2 {
		seen = nil
		ctx := httptrace.WithClientTrace(context.Background(), trace)
		req := newRequest(t, ctx, "POST", b.URL+"/", nil)
		req.Body, req.ContentLength = &onceBody{rc: io.NopCloser(strings.NewReader("data"))}, 4
		req.Header.Set("Expect", "100-continue")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "got data" {
			t.Errorf("%d %q", resp.StatusCode, body)
		}
		mu.Lock()
		if want := []string{"103 </style.css>; rel=preload", "100 "}; !slices.Equal(seen, want) {
			t.Errorf("1xx responses %q, want %q", seen, want)
		}
		mu.Unlock()
	}
	expectDials(t, dials, 1)
}

// TestBackendUpgrade: a 101 response makes the connection the client's, both ways, through
// the proxy, with bytes the backend sent right behind the 101 (already in the connection's
// buffer) first.
func TestBackendUpgrade(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	backendDone := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			backendDone <- err
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			backendDone <- err
			return
		}
		if req.Header.Get("Upgrade") != "echo" {
			backendDone <- fmt.Errorf("Upgrade %q", req.Header.Get("Upgrade"))
			return
		}
		// The greeting goes in the same write as the 101.
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\ngreeting\n")
		line, err := br.ReadString('\n')
		if err != nil {
			backendDone <- err
			return
		}
		_, _ = io.WriteString(c, "echo: "+line)
		_, err = br.ReadByte() // the client closes
		backendDone <- err
	}()

	s, front := newTestServer(t)
	s.Swap(tableWith([]string{l.Addr().String()}, false))
	conn, err := net.DialTimeout("tcp", front.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: web.example\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "greeting\n" {
		t.Fatalf("greeting %q %v", line, err)
	}
	fmt.Fprintf(conn, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
		t.Fatalf("echo %q %v", line, err)
	}
	conn.Close()
	select {
	case err := <-backendDone:
		if !errors.Is(err, io.EOF) {
			t.Errorf("backend: %v, want EOF once the client closed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's connection stayed open after the client closed")
	}
	if n := s.transport.idleConns(l.Addr().String()); n != 0 {
		t.Errorf("%d idle connections: an upgraded connection went back to the pool", n)
	}
}

// TestBackendCancel: the request's context ends a round trip or a body read blocked on a
// slow backend at once, and the connection is closed, not kept.
func TestBackendCancel(t *testing.T) {
	for _, stage := range []string{"headers", "body"} {
		t.Run(stage, func(t *testing.T) {
			started := make(chan struct{})
			b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
				if stage == "body" {
					_, _ = io.WriteString(w, "part")
					w.(http.Flusher).Flush()
				}
				close(started)
				<-r.Context().Done() // until the proxy closes the connection
			})
			tr, _ := testTransport(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if stage == "headers" {
				go func() {
					<-started
					cancel() // while RoundTrip waits for the response
				}()
			}
			begin := time.Now()
			resp, err := tr.RoundTrip(newRequest(t, ctx, "GET", b.URL+"/", nil))
			if stage == "body" {
				if err != nil {
					t.Fatal(err)
				}
				var p [4]byte
				if _, err := io.ReadFull(resp.Body, p[:]); err != nil {
					t.Fatal(err)
				}
				go cancel() // while Read waits for more
				_, err = resp.Body.Read(p[:])
				resp.Body.Close()
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("error %v, want context.Canceled", err)
			}
			if d := time.Since(begin); d > 3*time.Second {
				t.Errorf("cancelled request took %v", d)
			}
			b.waitClosed(t)
			if n := tr.idleConns(b.addr); n != 0 {
				t.Errorf("%d idle connections after a cancelled request", n)
			}
		})
	}
}

func TestBackendIdleTimeout(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }

	t.Run("expired when taken", func(t *testing.T) {
		b := newBackend(t, ok)
		tr, dials := testTransport(t)
		fetch(t, tr, "GET", b.URL+"/", nil)
		tr.mu.Lock()
		tr.idle[b.addr].conns[0].idleAt = time.Now().Add(-tr.idleTimeout)
		tr.mu.Unlock()
		fetch(t, tr, "GET", b.URL+"/", nil)
		b.waitClosed(t)
		expectDials(t, dials, 2)
		if n := tr.idleConns(b.addr); n != 1 {
			t.Errorf("%d idle connections, want the new one", n)
		}
	})

	t.Run("closed while idle", func(t *testing.T) {
		b := newBackend(t, ok)
		tr, _ := testTransport(t)
		tr.idleTimeout = 50 * time.Millisecond
		fetch(t, tr, "GET", b.URL+"/", nil)
		b.waitClosed(t)
		tr.mu.Lock()
		n, armed := tr.nIdle, tr.prunerArmed
		tr.mu.Unlock()
		if n != 0 || armed || tr.idleConns(b.addr) != 0 {
			t.Errorf("%d idle connections (pruner armed %v) after the idle timeout", n, armed)
		}
	})
}

func TestBackendBodyClose(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 1<<20))
	})
	tr, dials := testTransport(t)

	// Closed before its end: the connection is closed, not drained.
	resp, err := tr.RoundTrip(newRequest(t, context.Background(), "GET", b.URL+"/", nil))
	if err != nil {
		t.Fatal(err)
	}
	// 64 KiB: large reads bypass the connection's buffer, which holds nothing more.
	if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 10)); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Errorf("Read after Close: %v", err)
	}
	b.waitClosed(t)
	if n := tr.idleConns(b.addr); n != 0 {
		t.Errorf("%d idle connections after closing a body early", n)
	}

	// Closed after its end, twice: the connection is in the pool once.
	resp, err = tr.RoundTrip(newRequest(t, context.Background(), "GET", b.URL+"/", nil))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, resp.Body); n != 1<<20 || err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	resp.Body.Close()
	resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 10)); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Errorf("Read after Close: %v", err)
	}
	if n := tr.idleConns(b.addr); n != 1 {
		t.Errorf("%d idle connections, want 1", n)
	}
	fetch(t, tr, "GET", b.URL+"/", nil)
	expectDials(t, dials, 2)
}

func TestBackendDialErrors(t *testing.T) {
	tr, _ := testTransport(t)
	_, err := tr.RoundTrip(newRequest(t, context.Background(), "GET", "http://"+deadAddr(t)+"/", nil))
	if !isDialError(err) {
		t.Errorf("refused: %v is not a dial error", err)
	}
	tr.DialContext = func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("no route") }
	_, err = tr.RoundTrip(newRequest(t, context.Background(), "GET", "http://192.0.2.1/", nil))
	if !isDialError(err) {
		t.Errorf("custom dialer: %v is not a dial error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr.DialContext = func(context.Context, string, string) (net.Conn, error) {
		cancel()
		return nil, &net.OpError{Op: "dial", Err: context.Canceled}
	}
	_, err = tr.RoundTrip(newRequest(t, ctx, "GET", "http://192.0.2.1/", nil))
	if isDialError(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled and no dial error (the endpoint is not at fault)", err)
	}
}

// postPayload POSTs "payload" (an unread onceBody, as the proxy sends) to url through tr and
// expects the echo backend's answer.
func postPayload(t *testing.T, tr *backendTransport, url string) {
	t.Helper()
	req := newRequest(t, context.Background(), "POST", url, nil)
	req.Body, req.ContentLength = &onceBody{rc: io.NopCloser(strings.NewReader("payload"))}, 7
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "POST payload" {
		t.Errorf("body %q", body)
	}
}
