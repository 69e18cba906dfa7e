package netpol

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/internal/kick"
)

// Config configures Run.
type Config struct {
	NodeName string
	// Informers is the host's shared factory of cluster-wide kinds: Run registers the
	// Node, Namespace and NetworkPolicy informers on it. PodInformers holds every pod of the site
	// with its labels, node, addresses and container ports (it may be the same factory).
	// Run starts both with its ctx and never shuts them down.
	Informers, PodInformers informers.SharedInformerFactory
	Table                   string // default DefaultTable
	// NetNS, when set, is the path of a network namespace to program instead of the current
	// one (tests, simulated hosts).
	NetNS string
	// MinSyncInterval spaces syncs so that a burst of changes costs one (default 50 ms).
	MinSyncInterval time.Duration
	ResyncPeriod    time.Duration // default 30 s: check the kernel table and repair drift
	Log             *logrus.Entry
	// Synced, when set, is called after every successful sync with the ruleset applied
	// (tests and metrics).
	Synced func(rs *Ruleset, took time.Duration)
}

// Run keeps this host's policy table in step with the NetworkPolicies, Namespaces and Pods
// until ctx ends. The table stays in the kernel when Run returns: pods stay isolated while
// the agent restarts.
func Run(ctx context.Context, cfg Config) error {
	if cfg.NodeName == "" || cfg.Informers == nil || cfg.PodInformers == nil {
		return errors.New("network policy: NodeName, Informers and PodInformers are required")
	}
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	log := cfg.Log.WithField("component", "network-policy")
	if cfg.MinSyncInterval <= 0 {
		cfg.MinSyncInterval = 50 * time.Millisecond
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = 30 * time.Second
	}
	var nsFd int
	if cfg.NetNS != "" {
		f, err := os.Open(cfg.NetNS)
		if err != nil {
			return fmt.Errorf("network policy: open network namespace %s: %w", cfg.NetNS, err)
		}
		defer f.Close()
		nsFd = int(f.Fd())
	}
	table := NewTable(Options{Table: cfg.Table, NetNSFd: nsFd, Log: log})

	podInf := cfg.PodInformers.Core().V1().Pods()
	nsInf := cfg.Informers.Core().V1().Namespaces()
	npInf := cfg.Informers.Networking().V1().NetworkPolicies()
	nodeInf := cfg.Informers.Core().V1().Nodes()

	k := kick.New()
	h := k.Handler()
	// Nodes change with every heartbeat; only their addresses matter here.
	nodeAddrs := h
	nodeAddrs.UpdateFunc = func(o, n any) {
		on, ok1 := o.(*corev1.Node)
		nn, ok2 := n.(*corev1.Node)
		if !ok1 || !ok2 || !equality.Semantic.DeepEqual(on.Status.Addresses, nn.Status.Addresses) {
			k.Poke()
		}
	}
	remove, err := kick.AddHandlers(kick.On{Informer: podInf.Informer(), Handler: h}, kick.On{Informer: nsInf.Informer(), Handler: h},
		kick.On{Informer: npInf.Informer(), Handler: h}, kick.On{Informer: nodeInf.Informer(), Handler: nodeAddrs})
	if err != nil {
		return fmt.Errorf("network policy: add event handler: %w", err)
	}
	defer remove()
	cfg.Informers.Start(ctx.Done())
	cfg.PodInformers.Start(ctx.Done())
	// Applying before the caches are full would briefly open (or close) pods.
	if !cache.WaitForCacheSync(ctx.Done(), podInf.Informer().HasSynced, nsInf.Informer().HasSynced, npInf.Informer().HasSynced, nodeInf.Informer().HasSynced) {
		return ctx.Err()
	}

	reported := map[string]bool{}
	sync := func() error {
		start := time.Now()
		pods, err := podInf.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		nss, err := nsInf.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		nps, err := npInf.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		nodes, err := nodeInf.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		rs, errs := Compile(Input{NodeName: cfg.NodeName, Nodes: nodes, Pods: pods, Namespaces: nss, Policies: nps})
		for _, e := range errs {
			if !reported[e.Error()] {
				reported[e.Error()] = true
				log.WithError(e).Error("network policy not enforced on this host")
			}
		}
		if err := table.Apply(rs); err != nil {
			return err
		}
		took := time.Since(start)
		log.WithFields(logrus.Fields{"chains": len(rs.Chains), "sets": len(rs.Sets), "isolatedIngress": len(rs.Ingress),
			"isolatedEgress": len(rs.Egress), "took": took.Round(time.Millisecond)}).Debug("network policies synced")
		if cfg.Synced != nil {
			cfg.Synced(rs, took)
		}
		return nil
	}

	resync := time.NewTicker(cfg.ResyncPeriod)
	defer resync.Stop()
	var retry <-chan time.Time
	backoff := time.Second
	for {
		if err := sync(); err != nil {
			log.WithError(err).WithField("retryIn", backoff).Error("network policy sync failed")
			retry = time.After(backoff)
			backoff = min(backoff*2, 30*time.Second)
		} else {
			retry, backoff = nil, time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-retry:
		case <-resync.C:
			if d, err := table.Drift(); err != nil {
				log.WithError(err).Warn("cannot read the network policy table")
			} else if d != "" {
				log.WithField("drift", d).Warn("network policy table drifted; rebuilding it")
			}
		case <-k.C():
		}
		// Let a burst of changes land before compiling again.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cfg.MinSyncInterval):
		}
	}
}
