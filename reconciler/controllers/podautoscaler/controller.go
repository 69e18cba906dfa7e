// Package podautoscaler is the HorizontalPodAutoscaler controller. Every sync period it reads
// the resource usage of an HPA's pods from metrics.k8s.io, proposes a replica count for each
// metric (cpu or memory of the pods or of one of their containers, as utilization of the
// requests or as an average value), takes the largest, stabilizes and rate-limits it by
// spec.behavior, and scales the target through its /scale subresource. It reports in the
// HPA's status (current and desired replicas, current metrics, lastScaleTime and the
// conditions AbleToScale, ScalingActive and ScalingLimited) and in events.
//
// The semantics are upstream's for Resource and ContainerResource metrics (replicas.go and
// behavior.go say how pods without metrics or not ready are counted, and how scaling is
// limited). Pods, Object and External metrics need the custom and external metrics APIs,
// which are not served: such a metric is invalid (ScalingActive False), and the HPA scales on
// its other metrics but never down while one is invalid.
package podautoscaler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Component is the event source of the controller, as upstream.
const Component = "horizontal-pod-autoscaler"

// Config tunes the controller; zero fields take the defaults of DefaultConfig.
type Config struct {
	// SyncPeriod is how often each HPA is evaluated (15 s).
	SyncPeriod time.Duration
	// Tolerance is how far the usage ratio may be from 1 without scaling (0.1), unless the
	// HPA's behavior sets its own.
	Tolerance float64
	// DownscaleStabilization is the scale-down stabilization window of HPAs without behavior
	// and of behaviors that leave it out (5 min).
	DownscaleStabilization time.Duration
	// CPUInitializationPeriod is how long after a pod starts its CPU samples are suspect (5 min).
	CPUInitializationPeriod time.Duration
	// InitialReadinessDelay is how long after a pod starts a not-ready pod may still become
	// ready for the first time (30 s).
	InitialReadinessDelay time.Duration
}

// DefaultConfig is upstream's defaults.
func DefaultConfig() Config {
	return Config{
		SyncPeriod:              15 * time.Second,
		Tolerance:               0.1,
		DownscaleStabilization:  5 * time.Minute,
		CPUInitializationPeriod: 5 * time.Minute,
		InitialReadinessDelay:   30 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.SyncPeriod == 0 {
		c.SyncPeriod = d.SyncPeriod
	}
	if c.Tolerance == 0 {
		c.Tolerance = d.Tolerance
	}
	if c.DownscaleStabilization == 0 {
		c.DownscaleStabilization = d.DownscaleStabilization
	}
	if c.CPUInitializationPeriod == 0 {
		c.CPUInitializationPeriod = d.CPUInitializationPeriod
	}
	if c.InitialReadinessDelay == 0 {
		c.InitialReadinessDelay = d.InitialReadinessDelay
	}
	return c
}

// Controller is the HorizontalPodAutoscaler controller.
type Controller struct {
	cfg       Config
	client    kubernetes.Interface
	hpaLister autoscalinglisters.HorizontalPodAutoscalerLister
	podLister corelisters.PodLister
	synced    []cache.InformerSynced
	scales    scale.ScalesGetter
	mapper    meta.RESTMapper
	metrics   metricsClient
	calc      replicaCalculator
	norm      *normalizer
	queue     workqueue.TypedRateLimitingInterface[string]
	recorder  record.EventRecorder
	now       func() time.Time
	log       *logrus.Entry

	selMu sync.Mutex
	// selectors are the pod selectors of the HPAs' targets at their last sync, by HPA key,
	// to find pods that several HPAs would scale.
	selectors map[string]labels.Selector
}

// New builds the controller with the default configuration.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	return NewWithConfig(cctx, DefaultConfig())
}

// NewWithConfig builds the controller and registers its informers on the shared factory.
func NewWithConfig(cctx *controllers.Context, cfg Config) (*Controller, error) {
	scales, err := scale.NewForConfig(cctx.Config, cctx.RESTMapper, dynamic.LegacyAPIPathResolverFunc,
		scale.NewDiscoveryScaleKindResolver(cctx.Discovery))
	if err != nil {
		return nil, fmt.Errorf("scale client: %w", err)
	}
	mc, err := metricsclient.NewForConfig(cctx.Config)
	if err != nil {
		return nil, fmt.Errorf("metrics client: %w", err)
	}
	return newController(cfg, cctx.Client, cctx.Informers, scales, cctx.RESTMapper,
		&resourceMetricsClient{client: mc.MetricsV1beta1()}, cctx.Recorder(Component))
}

func newController(cfg Config, client kubernetes.Interface, factory informers.SharedInformerFactory, scales scale.ScalesGetter,
	mapper meta.RESTMapper, metrics metricsClient, recorder record.EventRecorder) (*Controller, error) {
	cfg = cfg.withDefaults()
	hpaInformer := factory.Autoscaling().V2().HorizontalPodAutoscalers()
	podInformer := factory.Core().V1().Pods()
	c := &Controller{
		cfg:       cfg,
		client:    client,
		hpaLister: hpaInformer.Lister(),
		podLister: podInformer.Lister(),
		synced:    []cache.InformerSynced{hpaInformer.Informer().HasSynced, podInformer.Informer().HasSynced},
		scales:    scales,
		mapper:    mapper,
		metrics:   metrics,
		calc:      replicaCalculator{cpuInitializationPeriod: cfg.CPUInitializationPeriod, delayOfInitialReadinessStatus: cfg.InitialReadinessDelay},
		norm:      newNormalizer(cfg.DownscaleStabilization),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "podautoscaler"}),
		recorder:  recorder,
		now:       time.Now,
		log:       logrus.WithField("controller", "podautoscaler"),
		selectors: map[string]labels.Selector{},
	}
	if _, err := hpaInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		UpdateFunc: func(old, cur any) {
			// Status writes (ours) wait for the next period; a new spec is acted on now.
			o, ok1 := old.(*autoscalingv2.HorizontalPodAutoscaler)
			n, ok2 := cur.(*autoscalingv2.HorizontalPodAutoscaler)
			if !ok1 || !ok2 || !apiequality.Semantic.DeepEqual(o.Spec, n.Spec) {
				c.enqueue(cur)
			}
		},
		DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, fmt.Errorf("horizontalpodautoscaler handler: %w", err)
	}
	return c, nil
}

// Run evaluates HPAs with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "podautoscaler", c.queue, workers, c.synced, c.sync)
}

func (c *Controller) enqueue(obj any) { internal.Enqueue(c.queue, obj) }
