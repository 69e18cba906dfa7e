package controllers

import (
	"context"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
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
