// Package etcd runs the embedded etcd member of a host: its lifecycle now, and (with the
// multi-host issue) membership driven by gossip.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config describes the member to run.
type Config struct {
	// Name identifies the member (the host name, never its address).
	Name string
	// DataDir holds the member's data (DIR/etcd).
	DataDir string
	// ClientURL and PeerURL are where the member listens and what it advertises.
	ClientURL, PeerURL url.URL
	// TLS: the site CA and this member's server (client-facing) and peer certificates.
	CAFile                string
	ServerCert, ServerKey string
	PeerCert, PeerKey     string
	// InitialCluster lists every member ("name=peerURL,...") for a host joining an existing
	// cluster; empty bootstraps a new one-member cluster.
	InitialCluster string
	// ReadyTimeout bounds how long Start waits for the member to serve (default a minute;
	// negative: as long as ctx lasts, e.g. for a quorum of voters to come back).
	ReadyTimeout time.Duration
	// Logger receives etcd's logs; nil logs warnings and errors to stderr.
	Logger *zap.Logger
}

// Member is a running embedded etcd member.
type Member struct {
	e       *embed.Etcd
	cfg     Config
	closing atomic.Bool
	errc    chan error
}

// WatchProgressNotifyInterval is how often a member tells each quiet watch that asked for
// progress notifications the current revision (etcd's default is 10 minutes).
const WatchProgressNotifyInterval = 2 * time.Second

// ErrStopped is the error of a member whose server stopped on its own: above all one removed
// from the cluster while it was away or cut off, which stops as soon as a peer tells it
// (embed.Etcd reports nothing then, and its client port stays open but answers nothing).
var ErrStopped = errors.New("the etcd server stopped on its own (a member removed from the cluster stops once a peer tells it)")

// SnapshotCatchUpEntries is how many raft entries a member keeps in memory for a follower
// that is behind (etcd's default is 5,000).
const SnapshotCatchUpEntries = 1000

// Start starts a member. A new data directory bootstraps a one-member cluster (or joins the
// cluster of cfg.InitialCluster); an existing one restarts the member with its data.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	ec.ListenClientUrls = []url.URL{cfg.ClientURL}
	// etcd's HTTP endpoints (health, version, metrics) get a listener of their own, so that
	// the client URL serves gRPC alone, with gRPC's own server. Sharing the port, etcd serves
	// TLS gRPC through net/http's HTTP/2 server and gRPC's ServeHTTP, which costs the API
	// server's storage round trips a good part of the agent's CPU.
	ec.ListenClientHttpUrls = []url.URL{httpURL(cfg.DataDir)}
	ec.EnableGRPCGateway = false
	ec.AdvertiseClientUrls = []url.URL{cfg.ClientURL}
	ec.ListenPeerUrls = []url.URL{cfg.PeerURL}
	ec.AdvertisePeerUrls = []url.URL{cfg.PeerURL}
	ec.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, cfg.PeerURL.String())
	ec.InitialClusterToken = "flotilla"
	ec.ClusterState = embed.ClusterStateFlagNew
	if cfg.InitialCluster != "" {
		ec.InitialCluster = cfg.InitialCluster
		ec.ClusterState = embed.ClusterStateFlagExisting
	}
	ec.ClientTLSInfo = transport.TLSInfo{
		CertFile: cfg.ServerCert, KeyFile: cfg.ServerKey, TrustedCAFile: cfg.CAFile, ClientCertAuth: true,
	}
	ec.PeerTLSInfo = transport.TLSInfo{
		CertFile: cfg.PeerCert, KeyFile: cfg.PeerKey, TrustedCAFile: cfg.CAFile, ClientCertAuth: true,
	}
	// Every watch that asked for progress notifications (each resource's watch cache in the
	// API server) learns the current revision this often when its own keys are quiet. The
	// watch caches also ask for progress when a read waits for a newer revision, but etcd
	// answers that request for all watches of a stream at once, and not at all while any
	// of them is behind or starts at a later revision; the API server's resources share one
	// client and so one stream. Without this, a quiet resource's cache could stay behind (its
	// reads failing with "Too large resource version") for as long as that lasts.
	ec.WatchProgressNotifyInterval = WatchProgressNotifyInterval
	// Every member keeps the raft entries after its last in-memory snapshot (taken each 100
	// entries) and this many before it, for a follower that falls behind: etcd's 5,000 held
	// some 9 MiB of every host's heap once a site had written that much (the entries of a
	// 3-host site starting 150 pods averaged 1.8 kB). A follower further behind (a host
	// down through more than this many writes, some 15 s of the controllers' leader
	// starting 150 pods) gets the leader's database as a snapshot instead, a few MiB on a
	// small site.
	ec.SnapshotCatchUpEntries = SnapshotCatchUpEntries
	// Keep history for watches; the API server compacts on its own schedule too.
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = "1h"
	ec.ListenMetricsUrls = nil
	lg := cfg.Logger
	if lg == nil {
		zc := zap.NewProductionConfig()
		zc.Level = zap.NewAtomicLevelAt(zapcore.WarnLevel)
		zc.OutputPaths = []string{"stderr"}
		l, err := zc.Build()
		if err != nil {
			return nil, err
		}
		lg = l
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "member")); err == nil {
		ec.ClusterState = embed.ClusterStateFlagExisting
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start etcd member %s in %s: %w", cfg.Name, cfg.DataDir, err)
	}
	timeout := cfg.ReadyTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	var expired <-chan time.Time
	if timeout > 0 {
		expired = time.After(timeout)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		stopped := stoppedOnItsOwn(e)
		e.Close()
		if stopped {
			return nil, fmt.Errorf("etcd member %s, before it served: %w (%v)", cfg.Name, ErrStopped, err)
		}
		return nil, fmt.Errorf("etcd member %s failed: %w", cfg.Name, err)
	case <-e.Server.StopNotify():
		e.Close()
		return nil, fmt.Errorf("etcd member %s, before it served: %w", cfg.Name, ErrStopped)
	case <-expired:
		e.Close()
		return nil, fmt.Errorf("etcd member %s not ready after %s", cfg.Name, timeout)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	m := &Member{e: e, cfg: cfg, errc: make(chan error, 1)}
	go m.watch()
	return m, nil
}

// stoppedOnItsOwn reports whether e's server is stopping or stopped: its client listeners
// then end with "server is stopping", which says less than ErrStopped.
func stoppedOnItsOwn(e *embed.Etcd) bool {
	select {
	case <-e.Server.StoppingNotify():
		return true
	default:
		return false
	}
}

// watch reports on Err what embed.Etcd reports, and the server stopping on its own.
func (m *Member) watch() {
	select {
	case err, ok := <-m.e.Err():
		if ok && !m.closing.Load() {
			if stoppedOnItsOwn(m.e) {
				err = fmt.Errorf("%w (%v)", ErrStopped, err)
			}
			m.errc <- err
		}
	case <-m.e.Server.StopNotify():
		if !m.closing.Load() {
			m.errc <- ErrStopped
		}
	}
}

// ClientURLs returns the URLs clients use.
func (m *Member) ClientURLs() []string { return []string{m.cfg.ClientURL.String()} }

// Err reports a fatal error of the running member, ErrStopped when its server stopped on
// its own. Nothing comes after Close.
func (m *Member) Err() <-chan error { return m.errc }

// Close stops the member; it is safe to call more than once, and returns at once when
// another call is already stopping it.
func (m *Member) Close() {
	if !m.closing.CompareAndSwap(false, true) {
		return
	}
	m.e.Close()
}

// NewClient returns an etcd client for endpoints with the site's client certificate.
func NewClient(endpoints []string, caFile, certFile, keyFile string) (*clientv3.Client, error) {
	tlsInfo := transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile}
	tlsCfg, err := tlsInfo.ClientConfig()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsCfg, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
}

// WaitVoter waits until this member has been promoted from learner to voter (a learner cannot
// serve the API's reads and writes).
func (m *Member) WaitVoter(ctx context.Context, client *clientv3.Client) error {
	id := uint64(m.e.Server.MemberID())
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		list, err := client.MemberList(cctx)
		cancel()
		if err == nil {
			for _, mem := range list.Members {
				if mem.ID == id && !mem.IsLearner {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd member %s still a learner: %w", m.cfg.Name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// maxUnixPath is the longest path a Unix socket address holds (sun_path, less its NUL).
const maxUnixPath = 107

// httpURL is where a member serves etcd's HTTP endpoints: a Unix socket in its data
// directory (private to the agent, and no port taken), over TLS with client certificates as
// its client URL; a data directory too deep for a socket's path gets a loopback port the
// kernel picks instead.
func httpURL(dataDir string) url.URL {
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs // a URL's path is absolute
	}
	if p := filepath.Join(dataDir, "http.sock"); len(p) <= maxUnixPath {
		return url.URL{Scheme: "unixs", Path: p}
	}
	return url.URL{Scheme: "https", Host: "127.0.0.1:0"}
}
