package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla-dev/flotilla/internal/etcdtest"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// memberConfig is the Config of a member on loopback with certificates of the site's CA.
func memberConfig(t *testing.T, ca *pki.CA, dir, name string) Config {
	t.Helper()
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	srvCert, srvKey, err := ca.Ensure(pki.Request{Name: name + "-etcd-server", CommonName: name, Usage: pki.Server | pki.Client, IPs: ips})
	if err != nil {
		t.Fatal(err)
	}
	peerCert, peerKey, err := ca.Ensure(pki.Request{Name: name + "-etcd-peer", CommonName: name, Usage: pki.Server | pki.Client, IPs: ips})
	if err != nil {
		t.Fatal(err)
	}
	return Config{Name: name, DataDir: filepath.Join(dir, name),
		ClientURL: url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t))},
		PeerURL:   url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t))},
		CAFile:    ca.CertFile(), ServerCert: srvCert, ServerKey: srvKey, PeerCert: peerCert, PeerKey: peerKey}
}

// startMember starts member "a" of a new site whose CA is in dir, and returns the CA, the
// member and a client of it; both stop at the end of the test.
func startMember(ctx context.Context, t *testing.T, dir string) (*pki.CA, *Member, *clientv3.Client) {
	t.Helper()
	ca, err := pki.LoadOrCreateCA(filepath.Join(dir, "pki"), "flotilla-ca")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Start(ctx, memberConfig(t, ca, dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return ca, m, clientOfMember(t, ca, m)
}

// startLearner adds member "b" to a's cluster as a learner and starts it; it returns b's
// Config (to start it again), the member and its ID.
func startLearner(ctx context.Context, t *testing.T, ca *pki.CA, dir string, a *Member, cli *clientv3.Client) (Config, *Member, uint64) {
	t.Helper()
	cfg := memberConfig(t, ca, dir, "b")
	added, err := cli.MemberAddAsLearner(ctx, []string{cfg.PeerURL.String()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.InitialCluster = fmt.Sprintf("a=%s,b=%s", a.cfg.PeerURL.String(), cfg.PeerURL.String())
	b, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, b, added.Member.ID
}

// TestRemovedMemberReportsItsStop: a member removed from the cluster stops once a peer tells
// it, and embed.Etcd says nothing of it. Running, Err reports ErrStopped; started again on
// its old data (a host back after another took its seat), Start returns ErrStopped instead of
// waiting for ever for a cluster that no longer has it.
func TestRemovedMemberReportsItsStop(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca, a, cli := startMember(ctx, t, dir)

	bCfg, b, bID := startLearner(ctx, t, ca, dir, a, cli)
	defer b.Close()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}

	removeAt := time.Now()
	if _, err := cli.MemberRemove(ctx, bID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-b.Err():
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("removed member reported %v, want ErrStopped", err)
		}
		t.Logf("removed member reported its stop %s after the removal", time.Since(removeAt).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("a member removed while it runs reported nothing on Err within 30s")
	}
	b.Close()

	// Back on its old data, waiting for a quorum however long (as a host whose pods run).
	bCfg.InitialCluster = ""
	bCfg.ReadyTimeout = -1
	start := time.Now()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	m, err := Start(sctx, bCfg)
	if err == nil {
		m.Close()
		t.Fatal("a removed member started on its old data and served")
	}
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("Start of a removed member on its old data: %v, want ErrStopped (not a wait for ever)", err)
	}
	t.Logf("Start of the removed member returned %s after its start: %v", time.Since(start).Round(time.Millisecond), err)

	// The cluster is untouched: one voter, the key there.
	list, err := cli.MemberList(ctx)
	if err != nil || len(list.Members) != 1 || list.Members[0].Name != "a" {
		t.Fatalf("members after the removed one came back: %v, %v", list, err)
	}
	got, err := cli.Get(ctx, "k", clientv3.WithSerializable())
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("key written before the removal: %v, %v", got, err)
	}
}

// TestQuietWatchLearnsTheRevision: a watch whose keys do not change (the watch cache of a
// quiet resource) learns the revision the writes to other keys reached, even while another
// watch of the same stream makes etcd ignore requests for progress: here one that starts at
// a later revision, as an API server's watch on a member that is behind does.
func TestQuietWatchLearnsTheRevision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, cli := startMember(ctx, t, t.TempDir())

	// Both watches on one stream (the same context metadata), as the API server's are.
	wctx := clientv3.WithRequireLeader(ctx)
	quiet := cli.Watch(wctx, "/registry/quiet/", clientv3.WithPrefix(), clientv3.WithProgressNotify())
	put, err := cli.Put(ctx, "/registry/busy/1", "v")
	if err != nil {
		t.Fatal(err)
	}
	later := cli.Watch(wctx, "/registry/later/", clientv3.WithPrefix(), clientv3.WithRev(put.Header.Revision+1000))
	put, err = cli.Put(ctx, "/registry/busy/2", "v")
	if err != nil {
		t.Fatal(err)
	}
	want := put.Header.Revision
	// What the API server's watch cache does when a read waits for a newer revision.
	if err := cli.RequestProgress(wctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	deadline := time.After(5 * WatchProgressNotifyInterval)
	for {
		select {
		case resp, ok := <-quiet:
			if !ok {
				t.Fatalf("the quiet watch ended: %v", resp.Err())
			}
			if len(resp.Events) > 0 {
				t.Fatalf("the quiet watch got events: %v", resp.Events)
			}
			if resp.IsProgressNotify() && resp.Header.Revision >= want {
				t.Logf("the quiet watch learned revision %d %s after the write", resp.Header.Revision, time.Since(start).Round(time.Millisecond))
				return
			}
		case resp := <-later:
			t.Fatalf("the watch from a later revision got %+v", resp)
		case <-deadline:
			t.Fatalf("the quiet watch did not learn revision %d within %s", want, 5*WatchProgressNotifyInterval)
		}
	}
}

// TestHTTPEndpointsOnTheirOwnSocket: the client URL serves gRPC alone (with gRPC's own
// server), and etcd's HTTP endpoints answer on a Unix socket in the member's data directory,
// to a client with a certificate of the site's CA only. A socket left behind by a member
// that did not stop cleanly does not keep it from starting again.
func TestHTTPEndpointsOnTheirOwnSocket(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca, m, cli := startMember(ctx, t, dir)
	if _, err := cli.Put(ctx, "/registry/k", "v"); err != nil {
		t.Fatalf("gRPC on the client URL: %v", err)
	}
	cliCert, cliKey, err := ca.Ensure(pki.Request{Name: "etcd-client", CommonName: "test", Usage: pki.Client})
	if err != nil {
		t.Fatal(err)
	}
	withCert, err := transport.TLSInfo{CertFile: cliCert, KeyFile: cliKey, TrustedCAFile: ca.CertFile(), ServerName: "127.0.0.1"}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	withoutCert, err := transport.TLSInfo{TrustedCAFile: ca.CertFile(), ServerName: "127.0.0.1"}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(m.cfg.DataDir, "http.sock")
	get := func(tc *tls.Config, dial func(ctx context.Context, _, _ string) (net.Conn, error), url string) (string, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial, TLSClientConfig: tc}}
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b), err
	}
	onSocket := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}
	health := func() (string, error) { return get(withCert, onSocket, "https://127.0.0.1/health") }
	got, err := health()
	if err != nil || !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"health":"true"`) {
		t.Fatalf("/health on %s: %q, %v", sock, got, err)
	}
	if got, err := get(withoutCert, onSocket, "https://127.0.0.1/health"); err == nil {
		t.Fatalf("/health on the socket without a client certificate answered %q", got)
	}
	if got, err := get(withCert, nil, m.ClientURLs()[0]+"/health"); err == nil {
		t.Fatalf("the client URL answered HTTP: %q", got)
	}

	// Stopped without cleaning up (kill -9), the member leaves its socket file behind.
	m.Close()
	l, err := net.Listen("unix", sock)
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Close left the socket %s", sock)
	} else if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()
	m2, err := Start(ctx, m.cfg)
	if err != nil {
		t.Fatalf("restart with a stale socket: %v", err)
	}
	t.Cleanup(m2.Close)
	if got, err := health(); err != nil || !strings.HasPrefix(got, "200 ") {
		t.Fatalf("/health after the restart: %q, %v", got, err)
	}
}

// TestHTTPURLOfADeepDataDirectory: a data directory too deep for a Unix socket's path gets
// a loopback port instead.
func TestHTTPURLOfADeepDataDirectory(t *testing.T) {
	if u := httpURL("/var/lib/flotilla/etcd"); u.String() != "unixs:///var/lib/flotilla/etcd/http.sock" {
		t.Errorf("httpURL of a short directory: %s", u.String())
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if u := httpURL("etcd"); u.Path != filepath.Join(wd, "etcd", "http.sock") && u.Host == "" {
		t.Errorf("httpURL of a relative directory: %s", u.String())
	}
	deep := "/" + strings.Repeat("d", 100)
	if u := httpURL(deep); u.String() != "https://127.0.0.1:0" {
		t.Errorf("httpURL of %d characters: %s", len(deep), u.String())
	}
}

// TestFollowerFarBehindCatchesUpFromASnapshot: a member keeps SnapshotCatchUpEntries raft
// entries for a follower that is behind; one that was away through more writes than that
// comes back with every key, from a snapshot of the leader's database.
func TestFollowerFarBehindCatchesUpFromASnapshot(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ca, a, cli := startMember(ctx, t, dir)

	bCfg, b, bID := startLearner(ctx, t, ca, dir, a, cli)
	if _, err := cli.Put(ctx, "before", "v"); err != nil {
		t.Fatal(err)
	}
	bCli := clientOfMember(t, ca, b)
	waitKey(ctx, t, bCli, "before")
	b.Close()

	sentBefore := snapshotsSent(t, bID)
	n := SnapshotCatchUpEntries + 500
	for i := range n {
		if _, err := cli.Put(ctx, fmt.Sprintf("away-%04d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}

	bCfg.InitialCluster = ""
	b, err := Start(ctx, bCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bCli = clientOfMember(t, ca, b)
	last := fmt.Sprintf("away-%04d", n-1)
	waitKey(ctx, t, bCli, last)
	got, err := bCli.Get(ctx, "away-", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if err != nil || got.Count != int64(n) {
		t.Fatalf("member back after %d writes holds %v of them, %v", n, got, err)
	}
	if sent := snapshotsSent(t, bID) - sentBefore; sent < 1 {
		t.Fatalf("member back after %d writes (more than the %d entries kept) caught up without a snapshot", n, SnapshotCatchUpEntries)
	}
}

// clientOfMember is a client of m alone.
func clientOfMember(t *testing.T, ca *pki.CA, m *Member) *clientv3.Client {
	t.Helper()
	cert, key, err := ca.Ensure(pki.Request{Name: "etcd-client", CommonName: "test", Usage: pki.Client})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(m.ClientURLs(), ca.CertFile(), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitKey waits until the member of c has key (a serializable read: its own data).
func waitKey(ctx context.Context, t *testing.T, c *clientv3.Client, key string) {
	t.Helper()
	for {
		got, err := c.Get(ctx, key, clientv3.WithSerializable())
		if err == nil && len(got.Kvs) == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("key %s never reached the member: %v", key, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// snapshotsSent is how many snapshots this process's etcd members sent to member id.
func snapshotsSent(t *testing.T, id uint64) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	to := types.ID(id).String()
	var n float64
	for _, f := range families {
		if f.GetName() != "etcd_network_snapshot_send_success" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "To" && l.GetValue() == to {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
