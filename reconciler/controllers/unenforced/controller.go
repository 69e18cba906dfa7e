// Package unenforced is the controller that records a NotEnforced Warning event on each object
// of a kind the API stores but flotilla does not carry out (the list is in reconciler/unenforced,
// shared with the API's warning), so that `kubectl describe` and `kubectl get events` say what
// the warning said when the object was applied.
package unenforced

import (
	"context"
	"fmt"
	"slices"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/unenforced"
)

const (
	// Component is the event source of the controller.
	Component = "unenforced-controller"
	// Reason is the reason of its events.
	Reason = "NotEnforced"
)

// Controller records the events. It has no queue: the informers' handlers record them.
type Controller struct {
	recorder record.EventRecorder
	synced   []cache.InformerSynced
	log      *logrus.Entry
}

// New builds the controller and registers a metadata-only informer for every unenforced kind
// on the shared factory.
func New(cctx *controllers.Context) (controllers.Runner, error) { return NewController(cctx) }

// NewController is New returning the controller's own type.
func NewController(cctx *controllers.Context) (*Controller, error) {
	c := &Controller{recorder: cctx.Recorder(Component), log: logrus.WithField("controller", "unenforced")}
	for _, k := range unenforced.Kinds {
		inf := cctx.MetadataInformers.ForResource(k.GroupVersionResource()).Informer()
		if _, err := inf.AddEventHandler(c.handler(k)); err != nil {
			return nil, fmt.Errorf("%s handler: %w", k.Resource, err)
		}
		c.synced = append(c.synced, inf.HasSynced)
	}
	// Settings of Services (unenforced.ServiceSettings), through the shared typed informer the
	// other controllers hold anyway.
	svcInf := cctx.Informers.Core().V1().Services().Informer()
	if _, err := svcInf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList {
				c.recordServiceSettings(obj)
			}
		},
		UpdateFunc: func(old, cur any) {
			// Annotations (the topology-mode one) change no generation: a change of what
			// is warned about counts too.
			if changed(old, cur) || !slices.Equal(serviceSettings(old), serviceSettings(cur)) {
				c.recordServiceSettings(cur)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("services handler: %w", err)
	}
	c.synced = append(c.synced, svcInf.HasSynced)
	return c, nil
}

// serviceSettings is unenforced.ServiceSettings of obj, nil if obj is not a Service.
func serviceSettings(obj any) []string {
	if svc, ok := obj.(*corev1.Service); ok {
		return unenforced.ServiceSettings(svc)
	}
	return nil
}

// recordServiceSettings records an event for each setting of the Service obj that is not
// carried out.
func (c *Controller) recordServiceSettings(obj any) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	for _, msg := range unenforced.ServiceSettings(svc) {
		c.recorder.Event(svc, corev1.EventTypeWarning, Reason, msg)
	}
}

// Run waits for the informers and then until ctx ends; workers is unused.
func (c *Controller) Run(ctx context.Context, _ int) error {
	defer utilruntime.HandleCrash()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("unenforced: caches did not sync")
	}
	c.log.Info("started")
	<-ctx.Done()
	return nil
}

// handler records the event for objects of k that are created after the informer's first list
// (objects that existed when this leader started got theirs from an earlier one, or were
// created while no leader ran) and for changes of an object's spec, as metadata.generation
// shows them. Kinds that keep no generation (RBAC objects, CertificateSigningRequests) count
// every new resourceVersion as a change.
func (c *Controller) handler(k unenforced.Kind) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList {
				c.record(k, obj)
			}
		},
		UpdateFunc: func(old, cur any) {
			if changed(old, cur) {
				c.record(k, cur)
			}
		},
	}
}

func changed(old, cur any) bool {
	o, err := meta.Accessor(old)
	if err != nil {
		return false
	}
	n, err := meta.Accessor(cur)
	if err != nil {
		return false
	}
	if o.GetGeneration() != 0 || n.GetGeneration() != 0 {
		return o.GetGeneration() != n.GetGeneration()
	}
	return o.GetResourceVersion() != n.GetResourceVersion()
}

// record records the event regarding obj. The reference is built from k, since metadata-only
// objects do not carry their kind; the recorder puts the events of cluster-scoped objects in
// namespace default.
func (c *Controller) record(k unenforced.Kind, obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("unenforced %s: %w", k.Kind, err))
		return
	}
	ref := &corev1.ObjectReference{
		APIVersion:      k.GroupVersionResource().GroupVersion().String(),
		Kind:            k.Kind,
		Namespace:       m.GetNamespace(),
		Name:            m.GetName(),
		UID:             m.GetUID(),
		ResourceVersion: m.GetResourceVersion(),
	}
	c.recorder.Event(ref, corev1.EventTypeWarning, Reason, unenforced.Message(k))
}
