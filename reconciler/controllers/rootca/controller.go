// Package rootca is the root CA publisher: every namespace that is not being deleted has a
// ConfigMap kube-root-ca.crt holding the site CA certificate, which pods mount (with their
// ServiceAccount token) to verify the API server. A deleted ConfigMap is re-created, a changed
// one restored.
package rootca

import (
	"context"
	"errors"
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

const (
	// ConfigMapName is the ConfigMap of every namespace that holds the CA.
	ConfigMapName = "kube-root-ca.crt"
	// DataKey is the key of the CA certificate in the ConfigMap.
	DataKey = "ca.crt"
	// DescriptionAnnotation and Description say what the ConfigMap is for, as in Kubernetes.
	DescriptionAnnotation = "kubernetes.io/description"
	Description           = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. " +
		"No other usage is guaranteed across distributions of Kubernetes clusters."
)

// Controller is the root CA publisher. Its queue holds namespace names.
type Controller struct {
	client   kubernetes.Interface
	rootCA   string
	nsLister corelisters.NamespaceLister
	cmLister corelisters.ConfigMapLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	log      *logrus.Entry
}

// New builds the controller, which publishes c.RootCA, and registers its informers on the
// shared factory.
func New(c *controllers.Context) (controllers.Runner, error) {
	if len(c.RootCA) == 0 {
		return nil, errors.New("rootca: no site CA certificate to publish")
	}
	nsInformer := c.Informers.Core().V1().Namespaces()
	cmInformer := c.Informers.Core().V1().ConfigMaps()
	ctl := &Controller{
		client:   c.Client,
		rootCA:   string(c.RootCA),
		nsLister: nsInformer.Lister(),
		cmLister: cmInformer.Lister(),
		synced:   []cache.InformerSynced{nsInformer.Informer().HasSynced, cmInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "rootca"}),
		log: logrus.WithField("controller", "rootca"),
	}
	if err := internal.QueueNamespaces(nsInformer, ctl.queue); err != nil {
		return nil, err
	}
	if _, err := cmInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) { ctl.configMapChanged(cur) },
		DeleteFunc: ctl.configMapChanged,
	}); err != nil {
		return nil, fmt.Errorf("configmap handler: %w", err)
	}
	return ctl, nil
}

// configMapChanged queues the namespace of a changed or deleted kube-root-ca.crt.
func (c *Controller) configMapChanged(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == ConfigMapName {
		c.queue.Add(cm.Namespace)
	}
}

// Run processes namespaces with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "rootca", c.queue, workers, c.synced, c.sync)
}
