package services

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/internal/kick"
)

// Proxy modes accepted by Config.Mode (--proxy-mode).
const (
	ModeAuto     = "auto"
	ModeNftables = "nftables"
	ModeIPVS     = "ipvs"
)

// Config configures Run.
type Config struct {
	NodeName string
	// Mode is "auto" (ipvs when the kernel has the IPVS netlink family, see CheckIPVS,
	// else nftables; the choice is logged), "nftables" or "ipvs".
	Mode         string
	ClusterCIDR  string        // pod CIDR, default 10.244.0.0/16: sources outside it are masqueraded
	ResyncPeriod time.Duration // default 30s: check the kernel state and repair drift
	TableName    string        // default "flotilla"
	// NetNS, when set, is the path of a network namespace to program instead of the current
	// one (tests, simulated hosts).
	NetNS string
	// HealthCheckAddress is the address the healthCheckNodePorts are served on; "" all of the
	// host's (as kube-proxy).
	HealthCheckAddress string
	Log                *logrus.Entry
	// Informers is the host's shared factory; nil makes one of its own. Run registers the
	// Service, EndpointSlice and Node informers on it and starts them with its ctx, so give
	// every user of one factory the host's context: an informer stops with the context of
	// whoever started it first. Run never shuts a shared factory down.
	Informers informers.SharedInformerFactory
}

// ErrIPVSUnavailable is returned for --proxy-mode=ipvs when the kernel has no IPVS (see
// CheckIPVS).
var ErrIPVSUnavailable = errors.New("proxy mode ipvs is not available")

// Run watches Services, EndpointSlices and this host's Node and keeps the dataplane in sync
// until ctx ends. The kernel rules stay in place when Run returns, so Service addresses keep
// working while the agent restarts.
func Run(ctx context.Context, client kubernetes.Interface, cfg Config) error {
	if cfg.NodeName == "" {
		return errors.New("services proxy: NodeName is required")
	}
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	log := cfg.Log.WithField("component", "service-proxy")
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = 30 * time.Second
	}
	if cfg.ClusterCIDR == "" {
		cfg.ClusterCIDR = "10.244.0.0/16"
	}
	cidr, err := netip.ParsePrefix(cfg.ClusterCIDR)
	if err != nil || !cidr.Addr().Is4() {
		return fmt.Errorf("services proxy: cluster CIDR %q is not an IPv4 prefix such as 10.244.0.0/16", cfg.ClusterCIDR)
	}
	var ipvsErr error = ErrIPVSUnavailable
	if cfg.Mode != ModeNftables {
		// Only when IPVS may be chosen: the check may load the ip_vs module.
		ipvsErr = CheckIPVS()
	}
	mode, why, err := chooseMode(cfg.Mode, ipvsErr == nil)
	if err != nil {
		if cfg.Mode == ModeIPVS && ipvsErr != nil {
			return fmt.Errorf("services proxy: %w", ipvsErr)
		}
		return err
	}
	log.WithFields(logrus.Fields{"mode": mode, "reason": why}).Info("service proxy mode chosen")

	var nsFd int
	if cfg.NetNS != "" {
		f, err := os.Open(cfg.NetNS)
		if err != nil {
			return fmt.Errorf("services proxy: open network namespace %s: %w", cfg.NetNS, err)
		}
		defer f.Close()
		nsFd = int(f.Fd())
	}
	var backend syncBackend
	if mode == ModeIPVS {
		backend = NewIPVS(IPVSOptions{NetNS: cfg.NetNS, ClusterCIDR: cidr, Log: log})
	} else {
		backend = NewNftables(NftablesOptions{Table: cfg.TableName, ClusterCIDR: cidr, NetNSFd: nsFd, Log: log})
	}
	return run(ctx, client, cfg, backend, log)
}

// syncBackend is what run drives: a Backend that can also repair drift.
type syncBackend interface {
	Backend
	Resyncer
}

// run keeps backend in sync with the informers until ctx ends; cfg has its defaults filled.
func run(ctx context.Context, client kubernetes.Interface, cfg Config, backend syncBackend, log *logrus.Entry) error {
	if r, ok := backend.(interface{ release() }); ok {
		defer r.release()
	}
	factory, nodeFactory := cfg.Informers, cfg.Informers
	if factory == nil {
		factory = informers.NewSharedInformerFactory(client, 0)
		// On its own the proxy need not hold every Node; a shared factory holds them anyway
		// for the routes and the Ingress status.
		nodeFactory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.NodeName).String()
		}))
		defer factory.Shutdown()
		defer nodeFactory.Shutdown()
	}
	svcInf := factory.Core().V1().Services()
	epsInf := factory.Discovery().V1().EndpointSlices()
	nodeInf := nodeFactory.Core().V1().Nodes()

	k := kick.New()
	h := k.Handler()
	// Other hosts' Nodes change with every heartbeat and do not change our rules.
	ownNode := cache.FilteringResourceEventHandler{Handler: h, FilterFunc: func(obj any) bool {
		n, ok := unwrap(obj).(*v1.Node)
		return ok && n.Name == cfg.NodeName
	}}
	// Service and EndpointSlice events are recorded, then kick the loop: a sync woken by a kick
	// finds the change recorded (handlers of one informer run concurrently: one handler does both).
	ch := newChanges(k.Poke)
	remove, err := kick.AddHandlers(kick.On{Informer: nodeInf.Informer(), Handler: ownNode})
	if err != nil {
		return fmt.Errorf("services proxy: add event handler: %w", err)
	}
	// A shared informer outlives Run: leave nothing behind that pokes a dead loop.
	defer remove()
	for _, on := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{{svcInf.Informer(), ch.serviceHandler()}, {epsInf.Informer(), ch.sliceHandler()}} {
		reg, err := on.inf.AddEventHandler(on.h)
		if err != nil {
			return fmt.Errorf("services proxy: add event handler: %w", err)
		}
		defer func() { _ = on.inf.RemoveEventHandler(reg) }()
		// Until the handlers have seen every object (a shared informer replays them to a late
		// handler), the index of EndpointSlices may miss some: sync lists everything.
		ch.synced = append(ch.synced, reg.HasSynced)
	}
	factory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	// Applying before the caches are full would briefly remove every Service.
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.Informer().HasSynced, epsInf.Informer().HasSynced, nodeInf.Informer().HasSynced) {
		return ctx.Err()
	}

	sy := &syncer{backend: backend, compiler: &Compiler{}, svcs: svcInf.Lister(), eps: epsInf.Lister(), nodes: nodeInf.Lister(), nodeName: cfg.NodeName, changes: ch}
	// The health check ports are served from this process, so only where it programs its own
	// network namespace.
	var health *healthChecks
	if cfg.NetNS == "" {
		health = newHealthChecks(cfg.HealthCheckAddress, log)
		defer health.close()
	}
	syncOnce := func(full bool) error {
		ds, took, err := sy.sync(full)
		if ds == nil {
			return err
		}
		if health != nil {
			health.update(*ds)
		}
		recordSync(backend, full, *ds, took, err)
		if err != nil {
			return err
		}
		log.WithFields(logrus.Fields{"servicePorts": len(ds.Services), "resync": full, "took": took.Round(time.Millisecond)}).Debug("dataplane synced")
		return nil
	}

	resync := time.NewTicker(cfg.ResyncPeriod)
	defer resync.Stop()
	var retry <-chan time.Time
	backoff := time.Second
	full := true
	for {
		if err := syncOnce(full); err != nil {
			log.WithError(err).WithField("retryIn", backoff).Error("service dataplane sync failed")
			retry = time.After(backoff)
			backoff = min(backoff*2, 30*time.Second)
			full = true
		} else {
			retry, backoff, full = nil, time.Second, false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-k.C():
		case <-retry:
		case <-resync.C:
			full = true
		}
	}
}

// syncer computes the desired state and applies it: after a change, only the Services the
// informers' events named (changes) are recompiled and compared, when the backend can take
// such a partial update (changeApplier); otherwise, and for full syncs, everything is listed.
type syncer struct {
	backend  syncBackend
	compiler *Compiler // one for the loop: each sync recompiles only what changed
	svcs     corelisters.ServiceLister
	eps      discoverylisters.EndpointSliceLister
	nodes    corelisters.NodeLister
	nodeName string
	changes  *changes
	listed   bool // a sync listed everything since the last failure: changes may follow
}

// changeApplier is a Backend that can apply a DesiredState knowing which ports may have
// changed since its previous Apply (by ServicePort.Key).
type changeApplier interface {
	ApplyChanged(ds DesiredState, keys []string) error
}

// sync applies the current state (full: repairing drift) and returns what it applied and how
// long the backend took, or a nil state when it failed before applying anything.
func (s *syncer) sync(full bool) (_ *DesiredState, took time.Duration, _ error) {
	// The Node's addresses are read on every sync; which endpoints are local depends only on
	// its name, which does not change: Node events need no recompiling.
	dirty := s.changes.take()
	if ca, ok := s.backend.(changeApplier); ok && s.listed && !full && s.changes.ready() {
		ds, keys, ok := s.compiler.compileChanged(dirty, s.get, s.node())
		if ok {
			start := time.Now()
			err := ca.ApplyChanged(ds, keys)
			if err != nil {
				s.listed = false
			}
			return &ds, time.Since(start), err
		}
	}
	// Events taken above are covered by the lists below.
	ds, err := desiredFrom(s.compiler, s.svcs, s.eps, s.nodes, s.nodeName)
	if err != nil {
		s.listed = false
		return nil, 0, err
	}
	start := time.Now()
	if full {
		err = s.backend.Resync(ds)
	} else {
		err = s.backend.Apply(ds)
	}
	s.listed = err == nil
	return &ds, time.Since(start), err
}

// node is this host's Node, or a stand-in with its name when it is not registered yet.
func (s *syncer) node() *v1.Node {
	node, err := s.nodes.Get(s.nodeName)
	if err != nil {
		node = &v1.Node{}
		node.Name = s.nodeName
	}
	return node
}

// get is one Service (nil when gone) and its EndpointSlices, from the caches.
func (s *syncer) get(k nsName) (*v1.Service, []*discoveryv1.EndpointSlice) {
	svc, err := s.svcs.Services(k.ns).Get(k.name)
	if err != nil {
		svc = nil
	}
	return svc, s.changes.slicesOf(k)
}

// changes records, from the informers' events, which Services may have changed since the
// last sync, and indexes the EndpointSlices by Service: a sync after one event then looks at
// one Service instead of listing, compiling and comparing all of them (at 10,000 Services,
// the walk alone costs tens of milliseconds). Handlers run on the informers' goroutines.
type changes struct {
	mu     sync.Mutex
	dirty  map[nsName]bool
	slices map[nsName]map[string]*discoveryv1.EndpointSlice
	poke   func() // called after recording a change
	synced []func() bool
}

// ready reports whether the handlers have seen every object of the caches.
func (c *changes) ready() bool {
	for _, f := range c.synced {
		if !f() {
			return false
		}
	}
	return true
}

func newChanges(poke func()) *changes {
	return &changes{dirty: map[nsName]bool{}, slices: map[nsName]map[string]*discoveryv1.EndpointSlice{}, poke: poke}
}

// take returns the Services changed since the previous take.
func (c *changes) take() map[nsName]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.dirty
	c.dirty = map[nsName]bool{}
	return d
}

func (c *changes) slicesOf(k nsName) []*discoveryv1.EndpointSlice {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*discoveryv1.EndpointSlice, 0, len(c.slices[k]))
	for _, s := range c.slices[k] {
		out = append(out, s)
	}
	return out
}

func unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

func (c *changes) serviceHandler() cache.ResourceEventHandlerFuncs {
	mark := func(obj any) {
		if svc, ok := unwrap(obj).(*v1.Service); ok {
			c.mu.Lock()
			c.dirty[nsName{svc.Namespace, svc.Name}] = true
			c.mu.Unlock()
			c.poke()
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: mark, UpdateFunc: func(_, obj any) { mark(obj) }, DeleteFunc: mark}
}

func (c *changes) sliceHandler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.slice(nil, obj) },
		UpdateFunc: func(old, obj any) { c.slice(old, obj) },
		DeleteFunc: func(obj any) { c.slice(obj, nil) },
	}
}

// slice records that an EndpointSlice went from old to cur (either may be nil): both
// versions' Services changed (the service-name label may have changed).
func (c *changes) slice(old, cur any) {
	c.mu.Lock()
	defer func() {
		c.mu.Unlock()
		c.poke()
	}()
	if s, ok := unwrap(old).(*discoveryv1.EndpointSlice); ok {
		k := nsName{s.Namespace, s.Labels[discoveryv1.LabelServiceName]}
		delete(c.slices[k], s.Name)
		if len(c.slices[k]) == 0 {
			delete(c.slices, k)
		}
		c.dirty[k] = true
	}
	if s, ok := unwrap(cur).(*discoveryv1.EndpointSlice); ok {
		k := nsName{s.Namespace, s.Labels[discoveryv1.LabelServiceName]}
		if c.slices[k] == nil {
			c.slices[k] = map[string]*discoveryv1.EndpointSlice{}
		}
		c.slices[k][s.Name] = s
		c.dirty[k] = true
	}
}

// desiredFrom lists the Services, EndpointSlices and this host's Node from the informers'
// caches and compiles them with c: what the loop does on every change.
func desiredFrom(c *Compiler, svcs corelisters.ServiceLister, eps discoverylisters.EndpointSliceLister, nodes corelisters.NodeLister, nodeName string) (DesiredState, error) {
	list, err := svcs.List(labels.Everything())
	if err != nil {
		return DesiredState{}, err
	}
	slices, err := eps.List(labels.Everything())
	if err != nil {
		return DesiredState{}, err
	}
	node, err := nodes.Get(nodeName)
	if err != nil {
		// Not registered yet: no NodePort addresses and no endpoint counts as local.
		node = &v1.Node{}
		node.Name = nodeName
	}
	return c.Compile(list, slices, node), nil
}

// chooseMode resolves --proxy-mode; haveIPVS says whether the kernel has ip_vs.
func chooseMode(mode string, haveIPVS bool) (chosen, reason string, err error) {
	switch mode {
	case "", ModeAuto:
		if haveIPVS {
			return ModeIPVS, "kernel has the IPVS netlink family: using ipvs", nil
		}
		return ModeNftables, "kernel has no ip_vs (no IPVS netlink family): using nftables", nil
	case ModeNftables:
		return ModeNftables, "requested", nil
	case ModeIPVS:
		if !haveIPVS {
			return "", "", fmt.Errorf("%w: the kernel has no IPVS netlink family; load ip_vs or use --proxy-mode=nftables or auto", ErrIPVSUnavailable)
		}
		return ModeIPVS, "requested", nil
	}
	return "", "", fmt.Errorf("services proxy: unknown proxy mode %q: use auto, nftables or ipvs", mode)
}
