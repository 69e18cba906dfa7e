// Package cronjob is the CronJob controller: it creates a Job from .spec.jobTemplate at each
// scheduled time (timeZone, startingDeadlineSeconds, concurrencyPolicy, suspend), refuses to
// guess when more than 100 start times were missed, keeps status.active, lastScheduleTime and
// lastSuccessfulTime, and deletes finished Jobs beyond the history limits.
package cronjob

import (
	"context"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Component is the event source of the controller, as upstream.
const Component = "cronjob-controller"

var controllerKind = batchv1.SchemeGroupVersion.WithKind("CronJob")

// Config holds the controller's tunables.
type Config struct {
	// Clock is the wall clock schedules are evaluated against; tests use a fake one.
	Clock clock.Clock
}

// DefaultConfig uses the real clock.
func DefaultConfig() Config { return Config{Clock: clock.RealClock{}} }

// Controller is the CronJob controller.
type Controller struct {
	client    kubernetes.Interface
	cjLister  batchlisters.CronJobLister
	jobLister batchlisters.JobLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	recorder  record.EventRecorder
	clock     clock.Clock
	log       *logrus.Entry

	keyLocksMu sync.Mutex
	keyLocks   map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// lockKey serialises syncs of one key and returns the unlock function.
func (c *Controller) lockKey(key string) func() {
	c.keyLocksMu.Lock()
	if c.keyLocks == nil {
		c.keyLocks = map[string]*keyLock{}
	}
	l := c.keyLocks[key]
	if l == nil {
		l = &keyLock{}
		c.keyLocks[key] = l
	}
	l.refs++
	c.keyLocksMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		c.keyLocksMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(c.keyLocks, key)
		}
		c.keyLocksMu.Unlock()
	}
}

// New builds the controller with DefaultConfig.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	return NewController(cctx, DefaultConfig())
}

// NewController builds the controller with cfg and registers its informers.
func NewController(cctx *controllers.Context, cfg Config) (*Controller, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	cjInformer := cctx.Informers.Batch().V1().CronJobs()
	jobInformer := cctx.Informers.Batch().V1().Jobs()
	c := &Controller{
		client:    cctx.Client,
		cjLister:  cjInformer.Lister(),
		jobLister: jobInformer.Lister(),
		synced:    []cache.InformerSynced{cjInformer.Informer().HasSynced, jobInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "cronjob"}),
		recorder: cctx.Recorder(Component),
		clock:    cfg.Clock,
		log:      logrus.WithField("controller", "cronjob"),
	}
	if _, err := cjInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, fmt.Errorf("cronjob handler: %w", err)
	}
	if _, err := jobInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.jobChanged,
		UpdateFunc: func(_, cur any) { c.jobChanged(cur) },
		DeleteFunc: c.jobChanged,
	}); err != nil {
		return nil, fmt.Errorf("job handler: %w", err)
	}
	return c, nil
}

// Run processes CronJobs with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "cronjob", c.queue, workers, c.synced, c.sync)
}

// Sync runs one sync of the CronJob with key namespace/name (tests drive it with a fake clock).
func (c *Controller) Sync(ctx context.Context, key string) error { return c.sync(ctx, key) }

func (c *Controller) enqueue(obj any) { internal.Enqueue(c.queue, obj) }

func (c *Controller) jobChanged(obj any) {
	j, ok := obj.(*batchv1.Job)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if j, ok = tomb.Obj.(*batchv1.Job); !ok {
			return
		}
	}
	ref := metav1.GetControllerOf(j)
	if ref == nil || ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
		return
	}
	c.queue.Add(j.Namespace + "/" + ref.Name)
}
