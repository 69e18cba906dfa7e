// Package csrapproving approves the CertificateSigningRequests a node makes for itself, as
// kube-controller-manager's csrapproving, so that csrsigning issues them without a human:
//
//   - kubernetes.io/kube-apiserver-client-kubelet: a node renewing its own client
//     certificate. The requester is system:node:<X>, the request's common name the same, its
//     organization system:nodes (and the rest of the signer's rules), and a
//     SubjectAccessReview says the requester may create certificatesigningrequests/
//     selfnodeclient (upstream's selfnodeclient recognizer);
//   - kubernetes.io/kubelet-serving: a node's serving certificate. The requester is
//     system:node:<X> in group system:nodes, the common name the same, and every name of the
//     request is an address of Node X (see servingNamesAllowed).
//
// Everything else waits for a human (`kubectl certificate approve` or `deny`).
package csrapproving

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Controller is the approver. Its queue holds request names.
type Controller struct {
	client     kubernetes.Interface
	lister     certlisters.CertificateSigningRequestLister
	nodeLister corelisters.NodeLister
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]
	log        *logrus.Entry
}

// New builds the approver and registers its informers on the shared factory.
func New(c *controllers.Context) (controllers.Runner, error) {
	inf := c.Informers.Certificates().V1().CertificateSigningRequests()
	nodes := c.Informers.Core().V1().Nodes()
	ctl := &Controller{
		client:     c.Client,
		lister:     inf.Lister(),
		nodeLister: nodes.Lister(),
		synced:     []cache.InformerSynced{inf.Informer().HasSynced, nodes.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csrapproving"}),
		log: logrus.WithField("controller", "csrapproving"),
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { internal.Enqueue(ctl.queue, obj) },
		UpdateFunc: func(_, cur any) { internal.Enqueue(ctl.queue, cur) },
	}); err != nil {
		return nil, fmt.Errorf("csrapproving: handler: %w", err)
	}
	return ctl, nil
}

// Run approves requests with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "csrapproving", c.queue, workers, c.synced, c.sync)
}
