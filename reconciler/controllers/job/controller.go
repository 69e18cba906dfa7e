// Package job is the Job controller: it runs a Job's pods to completion (completions,
// parallelism, Indexed mode), retries failures with an exponential delay up to backoffLimit,
// applies activeDeadlineSeconds, podFailurePolicy and suspend, tracks finished pods through
// the batch.kubernetes.io/job-tracking finalizer, and deletes finished Jobs after
// ttlSecondsAfterFinished.
package job

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Component is the event source of the controller, as upstream.
const Component = "job-controller"

var controllerKind = batchv1.SchemeGroupVersion.WithKind("Job")

// Config holds the controller's tunables; every delay is a field so tests can shorten it.
type Config struct {
	// Clock is the time source (deadlines, TTL, backoff).
	Clock clock.Clock
	// BackoffBase is the delay before recreating a pod after the first failure; it doubles
	// with every further consecutive failure.
	BackoffBase time.Duration
	// BackoffMax caps the retry delay.
	BackoffMax time.Duration
}

// DefaultConfig is upstream's behaviour: 10 s doubling, capped at 6 min, wall clock.
func DefaultConfig() Config {
	return Config{Clock: clock.RealClock{}, BackoffBase: 10 * time.Second, BackoffMax: 6 * time.Minute}
}

// backoffRecord remembers a Job's consecutive pod failures, as upstream's in-memory store.
type backoffRecord struct {
	failures    int
	lastFailure time.Time
	counted     map[types.UID]bool
}

// Controller is the Job controller.
type Controller struct {
	client       kubernetes.Interface
	jobLister    batchlisters.JobLister
	podLister    corelisters.PodLister
	synced       []cache.InformerSynced
	queue        workqueue.TypedRateLimitingInterface[string]
	recorder     record.EventRecorder
	expectations *internal.Expectations
	cfg          Config
	log          *logrus.Entry

	mu       sync.Mutex
	backoffs map[string]*backoffRecord
}

// New builds the controller with DefaultConfig.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	return NewController(cctx, DefaultConfig())
}

// NewController builds the controller with cfg and registers its informers.
func NewController(cctx *controllers.Context, cfg Config) (*Controller, error) {
	def := DefaultConfig()
	if cfg.Clock == nil {
		cfg.Clock = def.Clock
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = def.BackoffBase
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = def.BackoffMax
	}
	jobInformer := cctx.Informers.Batch().V1().Jobs()
	podInformer := cctx.Informers.Core().V1().Pods()
	c := &Controller{
		client:    cctx.Client,
		jobLister: jobInformer.Lister(),
		podLister: podInformer.Lister(),
		synced:    []cache.InformerSynced{jobInformer.Informer().HasSynced, podInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "job"}),
		recorder:     cctx.Recorder(Component),
		expectations: internal.NewExpectations(),
		cfg:          cfg,
		log:          logrus.WithField("controller", "job"),
		backoffs:     map[string]*backoffRecord{},
	}
	if _, err := jobInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.deleteJob,
	}); err != nil {
		return nil, fmt.Errorf("job handler: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addPod,
		UpdateFunc: c.updatePod,
		DeleteFunc: c.deletePod,
	}); err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	return c, nil
}

// Run processes Jobs with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "job", c.queue, workers, c.synced, c.sync)
}

// Sync runs one sync of the Job with key namespace/name (for tests).
func (c *Controller) Sync(ctx context.Context, key string) error { return c.sync(ctx, key) }

func (c *Controller) enqueue(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) deleteJob(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.expectations.Delete(key)
	c.mu.Lock()
	delete(c.backoffs, key)
	c.mu.Unlock()
	c.queue.Add(key)
}

// jobForPod returns the key of the Job controlling pod, or "".
func (c *Controller) jobForPod(pod *corev1.Pod) string {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		// An orphan carrying a job's labels may be adopted by it.
		if name := pod.Labels[batchv1.JobNameLabel]; name != "" {
			return pod.Namespace + "/" + name
		}
		return ""
	}
	if ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
		return ""
	}
	j, err := c.jobLister.Jobs(pod.Namespace).Get(ref.Name)
	if err != nil || j.UID != ref.UID {
		return ""
	}
	return pod.Namespace + "/" + ref.Name
}

func (c *Controller) addPod(obj any) {
	pod := obj.(*corev1.Pod)
	key := c.jobForPod(pod)
	if key == "" {
		return
	}
	if metav1.GetControllerOf(pod) != nil {
		c.expectations.CreationObserved(key)
	}
	c.queue.Add(key)
}

func (c *Controller) updatePod(old, cur any) {
	oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
	if oldPod.ResourceVersion == curPod.ResourceVersion {
		return
	}
	if k := c.jobForPod(oldPod); k != "" {
		c.queue.Add(k)
	}
	if k := c.jobForPod(curPod); k != "" {
		if curPod.DeletionTimestamp != nil && oldPod.DeletionTimestamp == nil {
			c.expectations.DeletionObserved(k, internal.PodKey(curPod))
		}
		c.queue.Add(k)
	}
}

func (c *Controller) deletePod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if pod, ok = tomb.Obj.(*corev1.Pod); !ok {
			return
		}
	}
	key := c.jobForPod(pod)
	if key == "" {
		return
	}
	c.expectations.DeletionObserved(key, internal.PodKey(pod))
	c.queue.Add(key)
}

// podsForJob lists the pods of the Job, adopting matching orphans and releasing pods whose
// labels stopped matching. Finished pods are included.
func (c *Controller) podsForJob(ctx context.Context, j *batchv1.Job) ([]*corev1.Pod, error) {
	selector, err := metav1.LabelSelectorAsSelector(j.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector of job %s/%s: %w", j.Namespace, j.Name, err)
	}
	all, err := c.podLister.Pods(j.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	claimer := internal.Claimer[*corev1.Pod]{
		Owner:    j,
		Selector: selector,
		CanAdopt: func(ctx context.Context) error {
			fresh, err := c.client.BatchV1().Jobs(j.Namespace).Get(ctx, j.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if fresh.UID != j.UID {
				return fmt.Errorf("original Job %s/%s is gone: got uid %v, wanted %v", j.Namespace, j.Name, fresh.UID, j.UID)
			}
			if fresh.DeletionTimestamp != nil {
				return fmt.Errorf("%s/%s has just been deleted at %v", j.Namespace, j.Name, fresh.DeletionTimestamp)
			}
			return nil
		},
		Adopt: func(ctx context.Context, pod *corev1.Pod) error {
			_, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType,
				internal.ControllerRefPatch(j, controllerKind, string(pod.UID)), metav1.PatchOptions{})
			return err
		},
		Release: func(ctx context.Context, pod *corev1.Pod) error {
			_, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType,
				internal.ReleasePatch(j, string(pod.UID)), metav1.PatchOptions{})
			return err
		},
	}
	return claimer.Claim(ctx, all)
}
