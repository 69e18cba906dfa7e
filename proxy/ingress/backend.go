package ingress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// maxIdlePerBackend and maxIdleBackendConns bound the idle keep-alive connections, per
	// endpoint (ip:port) and in all. A connection goes back to the idle pool as soon as the
	// body of its response has been read, before the client has all of it; a pool smaller
	// than the concurrent requests to one endpoint would close and reopen connections under
	// load. BenchmarkIngressVsNginx logs the dials it sees at 64 concurrent requests.
	maxIdlePerBackend   = 256
	maxIdleBackendConns = 1024
	// backendIdleTimeout is how long a connection may wait in the idle pool; shorter than
	// the keep-alive timeout of most servers (nginx 75 s, Go's http.Server none by default),
	// so that a connection is seldom reused just as the backend closes it.
	backendIdleTimeout = 30 * time.Second
	// backendPeekAfter: a connection idle for longer than this is checked (a non-blocking
	// peek, one system call) before it is reused, and so is any connection a request with a
	// body is about to be sent on: one the backend closed in the meantime (Node and Apache
	// close idle connections after 5 s) is dropped before the request goes out. A request
	// without a body sent on such a connection anyway is sent again on a new one, but a body
	// once read cannot be.
	backendPeekAfter = time.Second
	// maxResponseHeaderBytes bounds the response headers read from a backend, as
	// http.Transport does by default.
	maxResponseHeaderBytes = 10 << 20
	// backendBufferSize is the size of each connection's read and write buffers.
	backendBufferSize = 4 << 10
)

// aLongTimeAgo is a deadline in the past: setting it makes a blocked Read or Write return.
var aLongTimeAgo = time.Unix(1, 0)

var errHeaderTooLarge = fmt.Errorf("backend response headers exceed %d bytes", maxResponseHeaderBytes)

// backendTransport is the HTTP/1.1 client the proxy sends requests to endpoints with. Unlike
// http.Transport, which runs a read and a write goroutine per connection and hands each
// request and response between them and the caller over channels, it does the round trip
// on the calling goroutine: it writes the request, reads the response headers, and the body
// is read from the connection by whoever reads Response.Body (ReverseProxy's copy). The
// connection goes back to the idle pool, LIFO per endpoint, when the body has been read to
// its end.
//
// It speaks plain HTTP/1.1 to req.URL.Host (an ip:port) and does nothing else
// http.Transport does for a client: no proxy, no TLS, no transparent gzip (the client's
// Accept-Encoding goes to the backend as it came), no HTTP/2.
type backendTransport struct {
	// DialContext makes the connections; a dial error must be a *net.OpError with Op
	// "dial" (which the proxy takes as "the request has not left": it tries another
	// endpoint). Other errors are wrapped in one.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	idleTimeout time.Duration
	peekAfter   time.Duration // < 0: never peek (for tests)

	mu          sync.Mutex
	idle        map[string]*idleStack // endpoint -> its idle connections, the newest last
	nIdle       int
	pruner      *time.Timer // closes the expired idle connections
	prunerArmed bool
}

type idleStack struct{ conns []*backendConn }

func newBackendTransport() *backendTransport {
	return &backendTransport{
		DialContext: (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		idleTimeout: backendIdleTimeout,
		peekAfter:   backendPeekAfter,
	}
}

// RoundTrip sends req to req.URL.Host on an idle connection or a new one. When a connection
// taken from the idle pool turns out to have been closed by the backend (no byte of a
// response came back) and the request can be sent again (it has no body, or its onceBody
// was not read), it is sent once more on a new connection.
func (t *backendTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	addr := req.URL.Host
	hasBody := req.Body != nil && req.Body != http.NoBody
	for fresh := false; ; fresh = true {
		c, err := t.conn(ctx, addr, fresh, hasBody)
		if err != nil {
			return nil, err
		}
		resp, err := c.roundTrip(req)
		if err == nil {
			return resp, nil
		}
		if fresh || !c.reused || c.nread > 0 || !isConnGone(err) || !replayable(req) {
			return nil, err
		}
	}
}

// isConnGone reports whether err is what a connection the backend closed or reset gives.
func isConnGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// replayable reports whether req can be sent again: none of its body has been read.
func replayable(req *http.Request) bool {
	switch b := req.Body.(type) {
	case nil:
		return true
	case *onceBody:
		return !b.read.Load()
	}
	return req.Body == http.NoBody
}

// conn returns an idle connection to addr (unless fresh) or a new one; hasBody asks for a
// peek at any idle one.
func (t *backendTransport) conn(ctx context.Context, addr string, fresh, hasBody bool) (*backendConn, error) {
	if !fresh {
		for {
			c, idleFor := t.takeIdle(addr)
			if c == nil {
				break
			}
			if t.peekAfter < 0 || (idleFor < t.peekAfter && !hasBody) || c.open() {
				c.reused = true
				return c, nil
			}
			c.close()
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	conn, err := t.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // not the endpoint's fault: the request is gone
		}
		if _, ok := errors.AsType[*net.OpError](err); !ok {
			err = &net.OpError{Op: "dial", Net: "tcp", Err: err}
		}
		return nil, err
	}
	c := &backendConn{t: t, addr: addr, conn: conn}
	c.br, c.bw = getBufio(c)
	c.abort = func() { _ = conn.SetDeadline(aLongTimeAgo) }
	if sc, ok := conn.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	return c, nil
}

// takeIdle pops the newest idle connection to addr and says how long it was idle. One that
// has expired is closed, with all below it (older still), and nil returned.
func (t *backendTransport) takeIdle(addr string) (*backendConn, time.Duration) {
	now := time.Now()
	t.mu.Lock()
	s := t.idle[addr]
	if s == nil || len(s.conns) == 0 {
		t.mu.Unlock()
		return nil, 0
	}
	n := len(s.conns) - 1
	c := s.conns[n]
	idleFor := now.Sub(c.idleAt)
	if idleFor < t.idleTimeout {
		s.conns[n] = nil
		s.conns = s.conns[:n]
		t.nIdle--
		t.mu.Unlock()
		return c, idleFor
	}
	expired := s.conns
	s.conns = nil
	t.nIdle -= len(expired)
	t.mu.Unlock()
	for _, c := range expired {
		c.close()
	}
	return nil, 0
}

// put returns c to the idle pool, or closes it when the pool is full.
func (t *backendTransport) put(c *backendConn) {
	c.ctx, c.reused = nil, false
	c.idleAt = time.Now()
	t.mu.Lock()
	s := t.idle[c.addr]
	if s == nil {
		if t.idle == nil {
			t.idle = make(map[string]*idleStack)
		}
		s = &idleStack{}
		t.idle[c.addr] = s
	}
	if len(s.conns) >= maxIdlePerBackend || t.nIdle >= maxIdleBackendConns {
		t.mu.Unlock()
		c.close()
		return
	}
	s.conns = append(s.conns, c)
	t.nIdle++
	if !t.prunerArmed {
		t.prunerArmed = true
		if t.pruner == nil {
			t.pruner = time.AfterFunc(t.idleTimeout, t.prune)
		} else {
			t.pruner.Reset(t.idleTimeout)
		}
	}
	t.mu.Unlock()
}

// prune closes the idle connections that have expired (the oldest of each endpoint, at the
// bottom of its stack) and forgets endpoints without idle connections; it runs while there
// are idle connections, at the next expiry but at most once a second.
func (t *backendTransport) prune() {
	now := time.Now()
	var expired []*backendConn
	t.mu.Lock()
	next := t.idleTimeout
	for addr, s := range t.idle {
		n := 0
		for n < len(s.conns) && now.Sub(s.conns[n].idleAt) >= t.idleTimeout {
			n++
		}
		if n > 0 {
			expired = append(expired, s.conns[:n]...)
			left := copy(s.conns, s.conns[n:])
			clear(s.conns[left:])
			s.conns = s.conns[:left]
			t.nIdle -= n
		}
		if len(s.conns) == 0 {
			delete(t.idle, addr)
		} else if wait := t.idleTimeout - now.Sub(s.conns[0].idleAt); wait < next {
			next = wait
		}
	}
	if t.nIdle > 0 && t.prunerArmed {
		t.pruner.Reset(max(next, min(time.Second, t.idleTimeout)))
	} else {
		t.prunerArmed = false
	}
	t.mu.Unlock()
	for _, c := range expired {
		c.close()
	}
}

// CloseIdleConnections closes the connections in the idle pool; those in use are not
// affected.
func (t *backendTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.nIdle = nil, 0
	if t.prunerArmed {
		t.pruner.Stop()
		t.prunerArmed = false
	}
	t.mu.Unlock()
	for _, s := range idle {
		for _, c := range s.conns {
			c.close()
		}
	}
}

// idleConns returns the number of idle connections to addr (for tests).
func (t *backendTransport) idleConns(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.idle[addr]; s != nil {
		return len(s.conns)
	}
	return 0
}

var (
	readerPool sync.Pool
	writerPool sync.Pool
)

func getBufio(c *backendConn) (*bufio.Reader, *bufio.Writer) {
	br, _ := readerPool.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(c, backendBufferSize)
	} else {
		br.Reset(c)
	}
	bw, _ := writerPool.Get().(*bufio.Writer)
	if bw == nil {
		bw = bufio.NewWriterSize(c, backendBufferSize)
	} else {
		bw.Reset(c)
	}
	return br, bw
}

// backendConn is one connection to an endpoint, with its buffers; it reads and writes
// through its own Read and Write, which count what was read and note write errors.
type backendConn struct {
	t      *backendTransport
	addr   string
	conn   net.Conn
	raw    syscall.RawConn // for the liveness peek; nil when conn has no file descriptor
	br     *bufio.Reader
	bw     *bufio.Writer
	abort  func() // sets a past deadline: the request's context is done
	idleAt time.Time
	reused bool // taken from the idle pool for this request

	// The request in progress.
	ctx       context.Context
	stop      func() bool // stops the context.AfterFunc that calls abort; nil when none
	nread     int         // bytes read from conn for this request
	readLimit int64       // bytes conn may still give (the header limit while headers are read)
	writeErr  error       // the first error writing to conn
}

func (c *backendConn) Read(p []byte) (int, error) {
	if int64(len(p)) > c.readLimit {
		if c.readLimit <= 0 {
			return 0, errHeaderTooLarge
		}
		p = p[:c.readLimit]
	}
	n, err := c.conn.Read(p)
	c.nread += n
	c.readLimit -= int64(n)
	return n, err
}

func (c *backendConn) Write(p []byte) (int, error) {
	n, err := c.conn.Write(p)
	if err != nil && c.writeErr == nil {
		c.writeErr = err
	}
	return n, err
}

// open reports whether an idle connection is still usable: a non-blocking peek finds
// neither the end of the stream nor bytes the backend sent unasked (as a 408 before it
// closes).
func (c *backendConn) open() bool {
	if c.raw == nil {
		return true
	}
	open := false
	err := c.raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		open = err == unix.EAGAIN
		return true
	})
	return err == nil && open
}

// stopAbort ends the watch on the request's context; false means the context was done and
// abort has broken (or is about to break) the connection with a past deadline.
func (c *backendConn) stopAbort() bool {
	stop := c.stop
	if stop == nil {
		return true
	}
	c.stop = nil
	return stop()
}

// close closes the connection and recycles its buffers; nothing may use c afterwards
// (except an upgraded connection's body, which never comes here).
func (c *backendConn) close() {
	_ = c.conn.Close()
	c.ctx = nil
	if c.br != nil {
		c.br.Reset(nil)
		readerPool.Put(c.br)
		c.bw.Reset(nil)
		writerPool.Put(c.bw)
		c.br, c.bw = nil, nil
	}
}

// fail closes the connection after err, which becomes the context's error when the request
// was cancelled (the error is then that of the deadline set to interrupt it).
func (c *backendConn) fail(err error) error {
	if !c.stopAbort() {
		err = c.ctx.Err()
	}
	c.close()
	return err
}

// release ends the request: the connection goes back to the idle pool when keep says the
// response allows it, it was not interrupted, and it holds no byte beyond the response.
func (c *backendConn) release(keep bool) {
	if !c.stopAbort() || !keep || c.br.Buffered() > 0 || c.writeErr != nil {
		c.close()
		return
	}
	c.t.put(c)
}

// roundTrip writes req and reads the response headers; on error c is closed.
func (c *backendConn) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	c.ctx, c.nread, c.writeErr = ctx, 0, nil
	if ctx.Done() != nil {
		c.stop = context.AfterFunc(ctx, c.abort)
	}
	err := req.Write(c.bw)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil && c.writeErr == nil {
		// The request body failed (the client went away or sent less than it announced):
		// the backend has part of a request, the connection cannot be used again.
		return nil, c.fail(err)
	}
	// A write error comes from the backend closing or resetting the connection, maybe after
	// it answered without reading the whole body (413, 401): a response that came is the
	// answer.
	writeErr := err
	c.readLimit = maxResponseHeaderBytes
	resp, err := c.readResponse(req)
	c.readLimit = math.MaxInt64
	if err != nil {
		if writeErr != nil {
			err = writeErr
		}
		return nil, c.fail(err)
	}
	keep := !req.Close && !resp.Close && resp.ProtoAtLeast(1, 1)
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols:
		if !c.stopAbort() {
			err := c.ctx.Err()
			c.close()
			return nil, err
		}
		// The connection is the client's now, through ReverseProxy, which closes it.
		resp.Body = &upgradeBody{c: c}
	case resp.Body == http.NoBody: // HEAD, 204, 304, Content-Length: 0: the response is complete
		c.release(keep)
	default:
		resp.Body = &backendBody{c: c, rc: resp.Body, keep: keep}
	}
	return resp, nil
}

// readResponse reads the response to req, passing 1xx informational responses (100
// Continue, 103 Early Hints) other than 101 to the ClientTrace (ReverseProxy's, which
// forwards them to the client) and reading on, as http.Transport does.
func (c *backendConn) readResponse(req *http.Request) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		code := resp.StatusCode
		if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			return resp, nil
		}
		if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, err
			}
			c.readLimit = maxResponseHeaderBytes // delivered: its headers count no more
		}
	}
}

// backendBody is the body of a response: at its end the connection goes back to the pool,
// closed earlier it closes the connection. It is read and closed by one goroutine at a time
// (ReverseProxy's).
type backendBody struct {
	c    *backendConn // nil once the body is done with its connection
	rc   io.ReadCloser
	keep bool
	err  error // what Read returns once c is nil
}

func (b *backendBody) Read(p []byte) (int, error) {
	c := b.c
	if c == nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	if err == nil {
		return n, nil
	}
	b.c = nil
	if err == io.EOF {
		b.err = io.EOF
		c.release(b.keep)
	} else {
		err = c.fail(err)
		b.err = err
	}
	return n, err
}

// Close before the end of the body closes the connection rather than read the rest.
func (b *backendBody) Close() error {
	if c := b.c; c != nil {
		b.c = nil
		c.stopAbort()
		c.close()
	}
	b.err = http.ErrBodyReadAfterClose
	return nil
}

// upgradeBody is the body of a 101 Switching Protocols response, the connection itself, as
// ReverseProxy requires: reads come from the connection's buffer first, writes go straight
// to it. ReverseProxy copies in both directions at once and closes it from either side.
type upgradeBody struct {
	c      *backendConn
	closed atomic.Bool
}

func (u *upgradeBody) Read(p []byte) (int, error)  { return u.c.br.Read(p) }
func (u *upgradeBody) Write(p []byte) (int, error) { return u.c.conn.Write(p) }

func (u *upgradeBody) Close() error {
	if u.closed.CompareAndSwap(false, true) {
		return u.c.conn.Close()
	}
	return nil
}
