package gitsync

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/internal/kubeclient"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// WarmConfig configures RunWarm.
type WarmConfig struct {
	// CacheDir is the controller's Config.CacheDir on this host.
	CacheDir string
	// Identity is this host's name as it appears in the Lease.
	Identity string
	// Lease is the name of the kube-system Lease whose holder runs the gitsync controller.
	Lease string
	// Limits are the controller's (Config.Limits): a warm clone obeys the same.
	Limits Limits
	// Tick is how often the sources are looked at (default 5 s); each source is fetched at
	// most once per its spec.interval.
	Tick time.Duration
}

// RunWarm keeps this host's clone of every GitSource fresh while another host holds the
// Lease, so that the host starts from a warm cache when it becomes the leader: it only
// fetches, never applies. It runs until ctx ends.
func RunWarm(ctx context.Context, cfg *rest.Config, wc WarmConfig) error {
	if wc.Tick <= 0 {
		wc.Tick = 5 * time.Second
	}
	kube, err := kubeclient.New(cfg)
	if err != nil {
		return fmt.Errorf("warm clone client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("warm clone client: %w", err)
	}
	w := &warmer{cfg: wc, kube: kube, dyn: dyn, last: map[string]time.Time{}, failing: map[string]string{},
		log: logrus.WithFields(logrus.Fields{"component": "gitsync-warm", "host": wc.Identity})}
	t := time.NewTicker(wc.Tick)
	defer t.Stop()
	for {
		w.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type warmer struct {
	cfg     WarmConfig
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	last    map[string]time.Time
	failing map[string]string
	log     *logrus.Entry
}

// leader reports whether this host holds the Lease now (the controller owns the cache then).
func (w *warmer) leader(ctx context.Context) (bool, error) {
	l, err := w.kube.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, w.cfg.Lease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == w.cfg.Identity, nil
}

func (w *warmer) round(ctx context.Context) {
	if lead, err := w.leader(ctx); err != nil || lead {
		return
	}
	list, err := w.dyn.Resource(GitSourceResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		var gs v1alpha1.GitSource
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &gs); err != nil || gs.Spec.Suspend {
			continue
		}
		key := gs.Namespace + "/" + gs.Name
		interval := gs.Spec.Interval.Duration
		if interval <= 0 {
			interval = v1alpha1.DefaultInterval
		}
		if time.Since(w.last[key]) < interval {
			continue
		}
		w.last[key] = time.Now()
		log := w.log.WithField("source", gs.Namespace+"."+gs.Name)
		fctx, cancel := context.WithTimeout(ctx, max(interval, 30*time.Second))
		remote, err := remoteFor(fctx, w.kube, &gs)
		var co *Checkout
		if err == nil {
			co, err = Fetch(fctx, filepath.Join(w.cfg.CacheDir, gs.Namespace, gs.Name), remote, w.cfg.Limits)
		}
		cancel()
		if err != nil {
			// Once per distinct error: the leader reports it in the status anyway.
			if w.failing[key] != err.Error() {
				log.WithError(err).Warn("warm clone: fetch failed")
				w.failing[key] = err.Error()
			}
			continue
		}
		delete(w.failing, key)
		log.WithField("revision", co.Revision).Debug("warm clone fetched")
	}
}
