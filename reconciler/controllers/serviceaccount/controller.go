// Package serviceaccount is the ServiceAccount controller: every namespace that is not being
// deleted has a ServiceAccount named default, re-created if someone deletes it.
package serviceaccount

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// DefaultName is the ServiceAccount every namespace gets.
const DefaultName = "default"

// Controller is the ServiceAccount controller. Its queue holds namespace names.
type Controller struct {
	client   kubernetes.Interface
	nsLister corelisters.NamespaceLister
	saLister corelisters.ServiceAccountLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	log      *logrus.Entry
}

// New builds the controller and registers its informers on the shared factory.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	nsInformer := cctx.Informers.Core().V1().Namespaces()
	saInformer := cctx.Informers.Core().V1().ServiceAccounts()
	c := &Controller{
		client:   cctx.Client,
		nsLister: nsInformer.Lister(),
		saLister: saInformer.Lister(),
		synced:   []cache.InformerSynced{nsInformer.Informer().HasSynced, saInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "serviceaccount"}),
		log: logrus.WithField("controller", "serviceaccount"),
	}
	if err := internal.QueueNamespaces(nsInformer, c.queue); err != nil {
		return nil, err
	}
	if _, err := saInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			sa, ok := obj.(*corev1.ServiceAccount)
			if !ok {
				tomb, ok := obj.(cache.DeletedFinalStateUnknown)
				if !ok {
					return
				}
				if sa, ok = tomb.Obj.(*corev1.ServiceAccount); !ok {
					return
				}
			}
			if sa.Name == DefaultName {
				c.queue.Add(sa.Namespace)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("serviceaccount handler: %w", err)
	}
	return c, nil
}

// Run processes namespaces with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "serviceaccount", c.queue, workers, c.synced, c.sync)
}
