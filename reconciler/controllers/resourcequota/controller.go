// Package resourcequota is the controller that keeps each ResourceQuota's status: status.hard
// is spec.hard, and status.used what the namespace's objects use of it, measured by the
// evaluators of reconciler/quota (pods' requests and limits in the quota's scopes, Services'
// node ports and load balancers, claims' storage, and object counts, count/<resource>.<group>
// for any kind the API serves). The API server's ResourceQuota admission charges each create
// at once; this controller gives back what deletions and finished pods free, and corrects any
// drift, when the namespace's objects change and every five minutes.
package resourcequota

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	quotav1 "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
	"github.com/flotilla-dev/flotilla/reconciler/quota"
)

const (
	// Component is the event source of the controller.
	Component = "resourcequota-controller"
	// ReasonUnknownResource is the reason of the Warning event on a quota that counts a kind
	// the API does not serve.
	ReasonUnknownResource = "UnknownResource"
)

// ResyncPeriod is how often every quota is recomputed whatever changed (upstream's default).
const ResyncPeriod = 5 * time.Minute

// Controller keeps the quotas' status.
type Controller struct {
	client kubernetes.Interface
	quotas corelisters.ResourceQuotaLister
	cctx   *controllers.Context
	queue  workqueue.TypedRateLimitingInterface[string]
	synced []cache.InformerSynced
	record record.EventRecorder
	log    *logrus.Entry
	now    func() time.Time

	// typed are the shared typed informers of pods, Services and claims, which the other
	// controllers hold anyway; any other kind is counted from a metadata informer registered
	// the first time a quota names it.
	typed map[schema.GroupVersionResource]cache.SharedIndexInformer

	mu       sync.Mutex
	ctx      context.Context // Run's, for informers started later
	registry quotav1.Registry
	watched  map[schema.GroupVersionResource]cache.SharedIndexInformer
}

// New builds the controller.
func New(cctx *controllers.Context) (controllers.Runner, error) { return NewController(cctx) }

// NewController is New returning the controller's own type.
func NewController(cctx *controllers.Context) (*Controller, error) {
	qInf := cctx.Informers.Core().V1().ResourceQuotas()
	c := &Controller{
		client: cctx.Client,
		quotas: qInf.Lister(),
		cctx:   cctx,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "resourcequota"}),
		log:    logrus.WithField("controller", "resourcequota"),
		now:    time.Now,
		record: cctx.Recorder(Component),
		typed: map[schema.GroupVersionResource]cache.SharedIndexInformer{
			corev1.SchemeGroupVersion.WithResource("pods"):                   cctx.Informers.Core().V1().Pods().Informer(),
			corev1.SchemeGroupVersion.WithResource("services"):               cctx.Informers.Core().V1().Services().Informer(),
			corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"): cctx.Informers.Core().V1().PersistentVolumeClaims().Informer(),
		},
		watched: map[schema.GroupVersionResource]cache.SharedIndexInformer{},
	}
	c.registry = generic.NewRegistry(quota.Evaluators(c.listerFor, func() time.Time { return c.now() }))
	if _, err := qInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { internal.Enqueue(c.queue, obj) },
		UpdateFunc: func(old, cur any) {
			o, n := old.(*corev1.ResourceQuota), cur.(*corev1.ResourceQuota)
			// The admission's own charges change only status.used: nothing to recompute.
			if !apiequality.Semantic.DeepEqual(o.Spec, n.Spec) || !quotav1.Equals(n.Spec.Hard, n.Status.Hard) {
				internal.Enqueue(c.queue, cur)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("resourcequota handler: %w", err)
	}
	c.synced = append(c.synced, qInf.Informer().HasSynced)
	for gvr, inf := range c.typed {
		if _, err := inf.AddEventHandler(c.usageHandler(gvr.GroupResource())); err != nil {
			return nil, fmt.Errorf("%s handler: %w", gvr.Resource, err)
		}
		c.synced = append(c.synced, inf.HasSynced)
	}
	return c, nil
}

// Run recomputes the quotas with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	go wait.UntilWithContext(ctx, func(context.Context) { c.enqueueAll() }, ResyncPeriod)
	return internal.RunWorkers(ctx, "resourcequota", c.queue, workers, c.synced, c.sync)
}

// enqueueAll queues every quota (the periodic full recomputation).
func (c *Controller) enqueueAll() {
	all, err := c.quotas.List(labels.Everything())
	if err != nil {
		c.log.WithError(err).Warn("list quotas")
		return
	}
	for _, q := range all {
		internal.Enqueue(c.queue, q)
	}
}

// enqueueNamespace queues the quotas of ns, if it has any.
func (c *Controller) enqueueNamespace(ns string) {
	qs, err := c.quotas.ResourceQuotas(ns).List(labels.Everything())
	if err != nil {
		return
	}
	for _, q := range qs {
		internal.Enqueue(c.queue, q)
	}
}

// usageHandler queues a namespace's quotas when one of its objects of gr appears, goes, or
// changes what it uses (a pod that finished, a Service that became a LoadBalancer).
func (c *Controller) usageHandler(gr schema.GroupResource) cache.ResourceEventHandler {
	namespace := func(obj any) string {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			return m.GetNamespace()
		}
		return ""
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueNamespace(namespace(obj)) },
		UpdateFunc: func(old, cur any) {
			// Most updates are pods' status, mostly in namespaces without quotas: look at the
			// namespace's quotas (an index lookup) before measuring anything.
			ns := namespace(cur)
			if qs, err := c.quotas.ResourceQuotas(ns).List(labels.Everything()); err != nil || len(qs) == 0 {
				return
			}
			e := c.registry.Get(gr)
			o, ok1 := old.(runtime.Object)
			n, ok2 := cur.(runtime.Object)
			if e == nil || !ok1 || !ok2 {
				return
			}
			ou, err1 := e.Usage(o)
			nu, err2 := e.Usage(n)
			if err1 != nil || err2 != nil || !quotav1.Equals(ou, nu) || deadlineChanged(o, n) {
				c.enqueueNamespace(ns)
			}
		},
		DeleteFunc: func(obj any) { c.enqueueNamespace(namespace(obj)) },
	}
}

// deadlineChanged reports whether a pod's activeDeadlineSeconds was set or removed, which
// moves it between the Terminating and NotTerminating scopes without changing its usage (the
// other scopes follow fields that cannot change).
func deadlineChanged(old, cur runtime.Object) bool {
	o, ok1 := old.(*corev1.Pod)
	n, ok2 := cur.(*corev1.Pod)
	return ok1 && ok2 && (o.Spec.ActiveDeadlineSeconds == nil) != (n.Spec.ActiveDeadlineSeconds == nil)
}

// listerFor gives the evaluators the lister of gvr: the shared typed informer's for pods,
// Services and claims, otherwise a metadata informer's, registered and started on first use.
// Until it has synced, its lister answers an error and the quota is tried again.
func (c *Controller) listerFor(gvr schema.GroupVersionResource) (cache.GenericLister, error) {
	if inf, ok := c.typed[gvr]; ok {
		return cache.NewGenericLister(inf.GetIndexer(), gvr.GroupResource()), nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inf, ok := c.watched[gvr]
	if !ok {
		if c.ctx == nil {
			return nil, fmt.Errorf("%s: the controller is not running", gvr.Resource)
		}
		inf = c.cctx.MetadataInformers.ForResource(gvr).Informer()
		if _, err := inf.AddEventHandler(c.usageHandler(gvr.GroupResource())); err != nil {
			return nil, fmt.Errorf("%s handler: %w", gvr.Resource, err)
		}
		c.watched[gvr] = inf
		c.cctx.MetadataInformers.Start(c.ctx.Done())
		c.log.WithField("resource", gvr.String()).Info("counting objects for quotas")
	}
	if !inf.HasSynced() {
		return nil, fmt.Errorf("%s: not yet listed", gvr.GroupResource())
	}
	return cache.NewGenericLister(inf.GetIndexer(), gvr.GroupResource()), nil
}

// countEvaluators adds an object count evaluator for each count/<resource>.<group> of hard
// that no evaluator handles yet and the API serves.
func (c *Controller) countEvaluators(hard corev1.ResourceList) error {
	var errs []error
	for name := range hard {
		gr, ok := quota.ObjectCountResource(name)
		if !ok || c.registry.Get(gr) != nil {
			continue
		}
		if _, ignored := quota.IgnoredResources[gr]; ignored {
			continue
		}
		gvr, err := c.cctx.RESTMapper.ResourceFor(gr.WithVersion(""))
		if err != nil {
			// A CustomResourceDefinition created a moment ago: discovery is read again.
			c.cctx.RESTMapper.Reset()
			if gvr, err = c.cctx.RESTMapper.ResourceFor(gr.WithVersion("")); err != nil {
				errs = append(errs, fmt.Errorf("%s: the API serves no resource %s", name, gr))
				continue
			}
		}
		c.registry.Add(generic.NewObjectCountEvaluator(gr, generic.ListResourceUsingListerFunc(c.listerFor, gvr), ""))
	}
	return utilerrors.NewAggregate(errs)
}

// sync recomputes one quota and writes its status if it changed.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	q, err := c.quotas.ResourceQuotas(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	if err := c.countEvaluators(q.Spec.Hard); err != nil {
		// The rest of the quota is kept; the kind is looked for again with the queue's backoff
		// (a CustomResourceDefinition may come later).
		c.record.Eventf(q, corev1.EventTypeWarning, ReasonUnknownResource, "%v; status.used leaves it out until the API serves it: correct the name in spec.hard or create the CustomResourceDefinition", err)
		errs = append(errs, err)
	}
	hard := quotav1.Add(corev1.ResourceList{}, q.Spec.Hard)
	used := quotav1.Add(corev1.ResourceList{}, q.Status.Used)
	measured, err := quotav1.CalculateUsage(ns, q.Spec.Scopes, hard, c.registry, q.Spec.ScopeSelector)
	if err != nil {
		errs = append(errs, err)
	}
	for r, v := range measured {
		used[r] = v
	}
	used = quotav1.Mask(used, quotav1.ResourceNames(hard))
	if !quotav1.Equals(q.Status.Hard, hard) || !quotav1.Equals(q.Status.Used, used) {
		q = q.DeepCopy()
		q.Status.Hard, q.Status.Used = hard, used
		if _, err := c.client.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("update status: %w", err))
		}
	}
	return utilerrors.NewAggregate(errs)
}
