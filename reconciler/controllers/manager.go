package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Runner is a constructed controller.
type Runner interface {
	Run(ctx context.Context, workers int) error
}

// Constructor builds a controller from the shared context.
type Constructor func(*Context) (Runner, error)

// Named pairs a controller with its name and worker count.
type Named struct {
	Name    string
	Workers int
	New     Constructor
}

// LeaderConfig tunes leader election. The zero value gives a 30 s Lease renewed every 10 s
// (RetryPeriod), given up after 20 s without a renewal; Kubernetes' defaults are 15 s, 2 s and
// 10 s. Every renewal is a raft entry fsynced on every etcd member, and the leader's renewals
// were most of an idle site's disk writes (docs/endurance.md): a host that dies holding the
// Lease is replaced within 30-42 s (Kubernetes: 15-17 s), one that stops releases it and
// another host takes it within 12 s.
type LeaderConfig struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

func (c LeaderConfig) withDefaults() LeaderConfig {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 30 * time.Second
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = 20 * time.Second
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = 10 * time.Second
	}
	return c
}

// RunWhileLeader runs fn while this host holds the Lease kube-system/<lease>, until ctx ends.
// When leadership is lost fn's context is cancelled and the host campaigns again.
func RunWhileLeader(ctx context.Context, cfg *rest.Config, lease, identity string, lc LeaderConfig, fn func(ctx context.Context)) error {
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return err
	}
	lc = lc.withDefaults()
	log := logrus.WithFields(logrus.Fields{"lease": lease, "host": identity})
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: lease},
				Client:     client.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
			},
			LeaseDuration:   lc.LeaseDuration,
			RenewDeadline:   lc.RenewDeadline,
			RetryPeriod:     lc.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					log.Info("became leader")
					fn(ctx)
				},
				OnStoppedLeading: func() { log.Info("stopped leading") },
			},
		})
		if err != nil {
			return fmt.Errorf("leader election for %s: %w", lease, err)
		}
		le.Run(ctx)
	}
	return nil
}

// RunControllers constructs the controllers, starts the informers and runs every controller
// until ctx ends.
func RunControllers(ctx context.Context, cfg *rest.Config, list []Named, customize ...func(*Context)) error {
	cctx, err := NewContext(cfg)
	if err != nil {
		return err
	}
	for _, f := range customize {
		f(cctx)
	}
	var runners []Runner
	for _, n := range list {
		c := cctx
		if cctx.ConfigFor != nil {
			if c, err = cctx.forController(cctx.ConfigFor(n.Name)); err != nil {
				return fmt.Errorf("controller %s: %w", n.Name, err)
			}
		}
		r, err := n.New(c)
		if err != nil {
			return fmt.Errorf("controller %s: %w", n.Name, err)
		}
		runners = append(runners, r)
	}
	cctx.Informers.Start(ctx.Done())
	cctx.MetadataInformers.Start(ctx.Done())
	var wg sync.WaitGroup
	for i, r := range runners {
		n := list[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			workers := n.Workers
			if workers == 0 {
				workers = 2
			}
			if err := r.Run(ctx, workers); err != nil && ctx.Err() == nil {
				logrus.WithError(err).WithField("controller", n.Name).Error("controller stopped")
			}
		}()
	}
	wg.Wait()
	cctx.Informers.Shutdown()
	cctx.MetadataInformers.Shutdown()
	return nil
}
