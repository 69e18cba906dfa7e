package services

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
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
	Log   *logrus.Entry
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
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		n, ok := obj.(*v1.Node)
		return ok && n.Name == cfg.NodeName
	}}
	remove, err := kick.AddHandlers(kick.On{Informer: svcInf.Informer(), Handler: h}, kick.On{Informer: epsInf.Informer(), Handler: h},
		kick.On{Informer: nodeInf.Informer(), Handler: ownNode})
	if err != nil {
		return fmt.Errorf("services proxy: add event handler: %w", err)
	}
	// A shared informer outlives Run: leave nothing behind that pokes a dead loop.
	defer remove()
	factory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	// Applying before the caches are full would briefly remove every Service.
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.Informer().HasSynced, epsInf.Informer().HasSynced, nodeInf.Informer().HasSynced) {
		return ctx.Err()
	}

	// One Compiler for the loop: each event recompiles only the Services whose objects changed.
	compiler := &Compiler{}
	desired := func() (DesiredState, error) {
		return desiredFrom(compiler, svcInf.Lister(), epsInf.Lister(), nodeInf.Lister(), cfg.NodeName)
	}
	sync := func(full bool) error {
		ds, err := desired()
		if err != nil {
			return err
		}
		start := time.Now()
		if full {
			err = backend.Resync(ds)
		} else {
			err = backend.Apply(ds)
		}
		recordSync(backend, full, ds, time.Since(start), err)
		if err != nil {
			return err
		}
		log.WithFields(logrus.Fields{"servicePorts": len(ds.Services), "resync": full, "took": time.Since(start).Round(time.Millisecond)}).Debug("dataplane synced")
		return nil
	}

	resync := time.NewTicker(cfg.ResyncPeriod)
	defer resync.Stop()
	var retry <-chan time.Time
	backoff := time.Second
	full := true
	for {
		if err := sync(full); err != nil {
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
