package ingress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flotilla-dev/flotilla/test/netnstest"
)

// TestDrainRefusesNewKeepsQueued, in a network namespace of its own: while the drain table
// is in place a new connection is refused at once (a reset: the client moves on without
// having sent anything), the connections the kernel had queued are still there to accept,
// and removing the table leaves nothing behind.
func TestDrainRefusesNewKeepsQueued(t *testing.T) {
	netnstest.RequireNetAdmin(t)
	ns := fmt.Sprintf("fldrain%05d", rand.Intn(100000))
	netnstest.New(t, ns)
	nsFd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nsFd)

	var l net.Listener
	var queued []net.Conn
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp", l.Addr().String(), 2*time.Second) }
	if err := netnstest.In("/run/netns/"+ns, func() error {
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
		for range 2 {
			c, err := dial()
			if err != nil {
				return err
			}
			queued = append(queued, c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	waitQueue(t, l, 2)
	port := l.Addr().(*net.TCPAddr).Port
	if err := refuseNewConnections(nsFd, netip.MustParseAddr("127.0.0.1"), []int{port}); err != nil {
		t.Fatal(err)
	}
	if err := netnstest.In("/run/netns/"+ns, func() error {
		start := time.Now()
		c, err := dial()
		if err == nil {
			c.Close()
			return errors.New("a new connection completed while the listener drains")
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
			return fmt.Errorf("a new connection while draining: %v after %s, want connection refused at once", err, time.Since(start))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitQueue(t, l, 2)
	for _, c := range queued {
		// The queued connections are intact: accept each and exchange a byte.
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := s.Read(b); err != nil || b[0] != 'x' {
			t.Fatalf("read from a queued connection: %q %v", b, err)
		}
		s.Close()
		c.Close()
	}
	if err := waitAccepted(time.Now().Add(5*time.Second), l); err != nil {
		t.Fatal(err)
	}
	if err := removeDrainTable(nsFd, port); err != nil {
		t.Fatal(err)
	}
	if out := netnstest.Sh(t, "ip", "netns", "exec", ns, "nft", "list", "tables"); strings.Contains(out, DrainTablePrefix) {
		t.Fatalf("drain table left behind:\n%s", out)
	}
	// Removing it again (a start after a clean stop) is no error.
	if err := removeDrainTable(nsFd, port); err != nil {
		t.Fatal(err)
	}
}

func waitQueue(t *testing.T, l net.Listener, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := acceptQueue(l)
		if err != nil {
			t.Fatal(err)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("accept queue: %d, want %d", n, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCloseServersAnswersAcceptedConnections: a client that connected just before the proxy
// began closing and sends its request only then still gets its answer (net/http's Shutdown
// alone drops such a request: the client sees EOF), and keep-alive is over for it.
func TestCloseServersAnswersAcceptedConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := new(atomic.Int64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") }),
		ConnState: countConns(open)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitUntil(t, "the server to accept the connection", func() bool { return open.Load() == 1 })

	closed := make(chan int64, 1)
	go func() { closed <- closeServers([]*http.Server{srv}, []*atomic.Int64{open}, 10*time.Second, l) }()
	waitUntil(t, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("a request sent on a connection accepted before closing began: %v (want its answer)", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "hello" || !resp.Close {
		t.Fatalf("answer %d %q, Connection: close %v; want 200 \"hello\" and the connection closed after it", resp.StatusCode, body, resp.Close)
	}
	select {
	case busy := <-closed:
		if busy != 0 {
			t.Fatalf("closeServers returned with %d connections open", busy)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closeServers did not return once the connection was done")
	}
	if err := <-served; err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
