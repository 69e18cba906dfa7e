// Package host assembles one host of a Flotilla site: every subsystem a host runs, started in
// named phases (pki, membership, etcd, api, node agent, proxy, site, controllers) from one
// Config, behind one handle. Like etcd's embed, Start returns a Host whose Err reports a
// fatal error and whose Close stops everything in reverse order; `flotilla agent` only turns
// flags into a Config.
package host

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/nodes/checkpoint"
	"github.com/flotilla-dev/flotilla/nodes/membership"
	"github.com/flotilla-dev/flotilla/nodes/refcache"
	"github.com/flotilla-dev/flotilla/nodes/runtime"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
	"github.com/flotilla-dev/flotilla/reconciler/etcd"
	"github.com/flotilla-dev/flotilla/reconciler/hostaccess"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// Host is a running host. Start returns it once every phase has started.
type Host struct {
	cfg     Config
	vopts   validation.Options
	log     *logrus.Entry
	dataDir string

	// Addresses, from the config.
	advertise, listen    net.IP
	etcdHost             string
	clientURL, peerURL   url.URL
	apiURL               string
	statePath, adminPath string

	// pki
	bootstrap  bool
	token      etcd.Token
	ca         *pki.CA
	certs      certs
	adminToken string

	// membership
	gossip *membership.Membership
	dead   *etcd.DeadTracker
	// revoked follows the hosts removed from the site (servers, once the API runs).
	revoked *hostaccess.Revocations
	joinErr chan error
	meta    membership.Meta

	// etcd
	state          *etcd.ClusterState
	initialCluster string
	lifecycle      *etcd.Lifecycle
	etcdClient     *clientv3.Client
	memberMu       sync.Mutex
	member         *etcd.Member
	promoted       chan *etcd.Member

	// api
	server     *apiserver.Server
	apiStopped chan struct{}
	// ingressDone is closed when the Ingress proxy has stopped: Close waits for the requests
	// it was serving (a rolling restart drops none).
	ingressDone    chan struct{}
	ingressStarted atomic.Bool
	apiErr         error
	// apiClient is the API server's own (loopback) client, for what the API server keeps
	// up itself: readiness, the kubernetes and kube-dns Services, the IngressClass.
	apiClient kubernetes.Interface
	// client is the host's node identity, for the node agent, pod network and proxies.
	client kubernetes.Interface
	ids    *identities
	// informers is the host's one shared factory for cluster-wide kinds; podInformers
	// watches only the pods bound to this host. Every subsystem of the host registers with
	// these, so each kind is watched once per host.
	informers, podInformers informers.SharedInformerFactory
	// dnsPodInformers holds every Pod of the site, slimmed, for cluster DNS.
	dnsPodInformers informers.SharedInformerFactory
	// objects reads, one by one, the ConfigMaps, Secrets and volumes the pods use and the
	// Ingresses' TLS Secrets: all a host may read of these kinds (nodes/host/caches.go).
	objects *refcache.Objects
	// checkpoints keeps those informers' caches on disk; resume is set when the host
	// starts from them (it has run before).
	checkpoints *checkpoint.Dir
	resume      bool

	rt *runtime.Runtime

	runCtx    context.Context
	cancel    context.CancelFunc
	errc      chan error
	closeOnce sync.Once
}

// phase is one named step of start-up.
type phase struct {
	name string
	run  func() error
}

// Start starts a host and returns when every phase has started (the API answers, the
// subsystems run). ctx bounds the start and the host's life; Close stops it.
func Start(ctx context.Context, cfg Config) (*Host, error) {
	vopts, err := cfg.Complete()
	if err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, vopts: vopts, errc: make(chan error, 1), promoted: make(chan *etcd.Member, 1),
		apiStopped: make(chan struct{}), ingressDone: make(chan struct{}), joinErr: make(chan error, 1)}
	h.log = logrus.WithField("host", cfg.Name)
	h.runCtx, h.cancel = context.WithCancel(ctx)
	run := func(phases ...phase) error {
		for _, p := range phases {
			start := time.Now()
			if err := p.run(); err != nil {
				h.Close()
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("start %s: %w", p.name, err)
			}
			h.log.WithFields(logrus.Fields{"phase": p.name, "took": time.Since(start).Round(time.Millisecond)}).Debug("phase started")
		}
		return nil
	}
	if err := run(phase{"pki", h.startPKI}); err != nil {
		return nil, err
	}
	// A host that has run before starts its pods and proxies from its checkpoint before it
	// waits for the site (an etcd quorum): cut off, it serves what it last knew; a new host
	// has nothing to serve before the API answers.
	h.resume = h.state != nil && checkpoint.Exists(h.checkpointDir())
	site := []phase{{"etcd", h.startEtcd}, {"api", h.startAPI}}
	local := []phase{{"node agent", h.startNodeAgent}, {"proxy", h.startProxy}}
	phases := []phase{{"membership", h.startMembership}, {"identities", h.startIdentities}}
	switch {
	case !cfg.Etcd:
		// A worker has no etcd, API or controllers: it reaches the servers' API.
		phases = append(append(phases, phase{"api proxy", h.startAPIProxy}), local...)
	case h.resume:
		phases = append(append(phases, local...), site...)
	default:
		phases = append(append(phases, site...), local...)
	}
	if cfg.Etcd {
		phases = append(phases, phase{"site", h.startSite}, phase{"controllers", h.startControllers})
	}
	if err := run(phases...); err != nil {
		return nil, err
	}
	go h.supervise()
	h.startSnapshots()
	return h, nil
}

// Err reports the first fatal error of a running host (its API server or etcd member stopped).
func (h *Host) Err() <-chan error { return h.errc }

// Kubeconfig is the path of this host's admin kubeconfig.
func (h *Host) Kubeconfig() string { return filepath.Join(h.dataDir, "kubeconfig") }

// Name is the host's name in the site.
func (h *Host) Name() string { return h.cfg.Name }

func (h *Host) fail(err error) {
	select {
	case h.errc <- err:
	default:
	}
}

// supervise reports the API server or the etcd member stopping on their own, and takes over
// a member that a standby became.
func (h *Host) supervise() {
	var etcdErr <-chan error
	if m := h.etcdMember(); m != nil {
		etcdErr = m.Err()
	}
	for {
		select {
		case <-h.runCtx.Done():
			return
		case m := <-h.promoted:
			h.memberMu.Lock()
			h.member = m
			h.memberMu.Unlock()
			etcdErr = m.Err()
			h.log.Info("this host is now an etcd voter")
		case <-h.apiStopped:
			h.fail(fmt.Errorf("API server stopped: %w", h.apiErr))
			return
		case err := <-etcdErr:
			h.fail(fmt.Errorf("etcd stopped: %w", err))
			return
		}
	}
}

func (h *Host) etcdMember() *etcd.Member {
	h.memberMu.Lock()
	defer h.memberMu.Unlock()
	return h.member
}

// Close stops the host in reverse order of start. Each step is bounded by a share of
// ShutdownTimeout: etcd's WAL makes an abrupt stop as safe as a crash, so a hung step is
// abandoned rather than waited for. It is safe to call more than once.
func (h *Host) Close() {
	h.closeOnce.Do(func() {
		timeout := h.cfg.ShutdownTimeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		h.cancel()
		if h.server != nil {
			select {
			case <-h.apiStopped:
			case <-time.After(timeout / 2):
				h.log.Warn("API server still stopping; closing storage anyway")
			}
		}
		bounded(time.Second, func() {
			if h.server != nil {
				h.server.Destroy()
			}
			if h.etcdClient != nil {
				_ = h.etcdClient.Close()
			}
		})
		if h.rt != nil {
			h.rt.Close()
		}
		if m := h.etcdMember(); m != nil {
			if !bounded(timeout/3, m.Close) {
				h.log.Warn("etcd still stopping; exiting anyway")
			}
		}
		if h.gossip != nil {
			_ = h.gossip.Leave(300 * time.Millisecond)
		}
		if h.checkpoints != nil && !h.checkpoints.Wait(timeout/3) {
			h.log.Warn("checkpoints still being written; exiting anyway")
		}
		if h.ingressStarted.Load() {
			select {
			case <-h.ingressDone:
			case <-time.After(timeout / 3):
				h.log.Warn("the Ingress proxy still has requests in flight; exiting anyway")
			}
		}
	})
}

// bounded runs f and waits at most d for it; it reports whether f finished.
func bounded(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// startPKI loads or creates the site CA (the first host) and the join token.
func (h *Host) startPKI() error {
	c := h.cfg
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	dataDir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return err
	}
	h.dataDir = dataDir
	h.cfg.DataDir = dataDir
	h.statePath = filepath.Join(dataDir, "cluster.json")
	h.adminPath = filepath.Join(dataDir, "admin-token")
	if h.state, err = etcd.LoadClusterState(h.statePath); err != nil {
		return err
	}
	h.advertise, h.listen = net.ParseIP(c.AdvertiseAddress), net.ParseIP(c.ListenAddress)
	h.etcdHost = c.ListenAddress
	if h.listen.IsUnspecified() {
		h.etcdHost = c.AdvertiseAddress
	}
	h.clientURL = url.URL{Scheme: "https", Host: net.JoinHostPort(h.etcdHost, strconv.Itoa(c.EtcdClientPort))}
	h.peerURL = url.URL{Scheme: "https", Host: net.JoinHostPort(h.etcdHost, strconv.Itoa(c.EtcdPeerPort))}
	h.apiURL = "https://" + net.JoinHostPort(c.AdvertiseAddress, strconv.Itoa(c.APIPort))

	h.bootstrap = len(c.Join) == 0
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return fmt.Errorf("read --token-file: %w", err)
		}
		if h.token, err = etcd.ParseToken(string(b)); err != nil {
			return fmt.Errorf("--token-file %s: %w", c.TokenFile, err)
		}
		h.token.SkipCAPin = c.InsecureSkipCAPin
	}
	if h.state != nil && h.state.Worker != !c.Etcd {
		if h.state.Worker {
			return fmt.Errorf("%s is a worker's data directory (it joined with --etcd=false): it cannot hold etcd; start it with --etcd=false, or join with a new --data-dir", dataDir)
		}
		return fmt.Errorf("%s holds this host's etcd and site CA: it cannot become a worker (--etcd=false); remove it from the site and join with a new --data-dir", dataDir)
	}
	switch {
	case h.state != nil && h.state.Worker:
		if h.ca, err = pki.LoadCACert(filepath.Join(dataDir, "pki")); err != nil {
			return err
		}
	case h.bootstrap || h.state != nil:
		if h.ca, err = pki.LoadOrCreateCA(filepath.Join(dataDir, "pki"), "flotilla-ca"); err != nil {
			return err
		}
	}
	if h.bootstrap {
		return h.ensureSiteToken()
	}
	return nil
}
