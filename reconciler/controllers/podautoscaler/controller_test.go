package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	scalefake "k8s.io/client-go/scale/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsfake "k8s.io/metrics/pkg/client/clientset/versioned/fake"
	"k8s.io/utils/ptr"
)

// harness runs the controller against fake clients: a Deployment's /scale, PodMetrics served
// from usage, and HPAs and pods in the informers' caches.
type harness struct {
	t        *testing.T
	c        *Controller
	kube     *kubefake.Clientset
	factory  informers.SharedInformerFactory
	recorder *record.FakeRecorder
	now      time.Time
	scales   map[string]*autoscalingv1.Scale // deployment name -> its scale
	getErr   error
	updates  []int32
	usage    map[string]corev1.ResourceList // pod name -> usage of its container "app"
}

func newHarness(t *testing.T, cfg Config) *harness {
	h := &harness{t: t, kube: kubefake.NewClientset(), recorder: record.NewFakeRecorder(100), now: testNow,
		scales: map[string]*autoscalingv1.Scale{}, usage: map[string]corev1.ResourceList{}}
	h.factory = informers.NewSharedInformerFactory(h.kube, 0)

	scales := &scalefake.FakeScaleClient{}
	scales.AddReactor("get", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if h.getErr != nil {
			return true, nil, h.getErr
		}
		s, ok := h.scales[a.(clienttesting.GetAction).GetName()]
		if !ok {
			return true, nil, apierrors.NewNotFound(appsv1.Resource("deployments"), a.(clienttesting.GetAction).GetName())
		}
		return true, s.DeepCopy(), nil
	})
	scales.AddReactor("update", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		s := a.(clienttesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
		h.scales[s.Name] = s.DeepCopy()
		h.updates = append(h.updates, s.Spec.Replicas)
		return true, s, nil
	})
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{appsv1.SchemeGroupVersion})
	mapper.Add(appsv1.SchemeGroupVersion.WithKind("Deployment"), meta.RESTScopeNamespace)

	metrics := metricsfake.NewSimpleClientset()
	metrics.PrependReactor("list", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		sel := a.(clienttesting.ListAction).GetListRestrictions().Labels
		list := &metricsv1beta1.PodMetricsList{}
		pods, _ := h.factory.Core().V1().Pods().Lister().Pods(a.GetNamespace()).List(sel)
		for _, p := range pods {
			u, ok := h.usage[p.Name]
			if !ok {
				continue
			}
			list.Items = append(list.Items, metricsv1beta1.PodMetrics{
				ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels},
				Timestamp:  metav1.NewTime(h.now), Window: metav1.Duration{Duration: 12 * time.Second},
				Containers: []metricsv1beta1.ContainerMetrics{{Name: "app", Usage: u}},
			})
		}
		return true, list, nil
	})

	c, err := newController(cfg, h.kube, h.factory, scales, mapper, &resourceMetricsClient{client: metrics.MetricsV1beta1()}, h.recorder)
	if err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return h.now }
	h.c = c
	t.Cleanup(c.queue.ShutDown)
	return h
}

// deployment gives the harness a Deployment "web" with replicas and pods app=web, each
// requesting 500m CPU and 100Mi memory, running and ready for 10 minutes.
func (h *harness) deployment(name string, replicas int32) {
	h.scales[name] = &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec: autoscalingv1.ScaleSpec{Replicas: replicas}, Status: autoscalingv1.ScaleStatus{Replicas: replicas, Selector: "app=" + name}}
	for i := int32(0); i < replicas; i++ {
		h.pod(fmt.Sprintf("%s-%d", name, i), name)
	}
}

func (h *harness) pod(name, app string) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: apiresource.MustParse("500m"), corev1.ResourceMemory: apiresource.MustParse("100Mi")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: h.now.Add(-10 * time.Minute)},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(h.now.Add(-10 * time.Minute))}}},
	}
	if err := h.factory.Core().V1().Pods().Informer().GetIndexer().Add(p); err != nil {
		h.t.Fatal(err)
	}
}

// useAll sets the usage of every pod of the app.
func (h *harness) useAll(app, cpu, memory string) {
	pods, _ := h.factory.Core().V1().Pods().Lister().List(labels.SelectorFromSet(labels.Set{"app": app}))
	for _, p := range pods {
		h.usage[p.Name] = corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse(cpu), corev1.ResourceMemory: apiresource.MustParse(memory)}
	}
}

func cpuHPA(name string, minReplicas, maxReplicas int32, targetUtilization int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Generation: 1},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    &minReplicas, MaxReplicas: maxReplicas,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &targetUtilization}}}},
		},
	}
}

// add stores an HPA in the API and the informer cache.
func (h *harness) add(hpa *autoscalingv2.HorizontalPodAutoscaler) {
	if _, err := h.kube.AutoscalingV2().HorizontalPodAutoscalers(hpa.Namespace).Create(context.Background(), hpa, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	if err := h.factory.Autoscaling().V2().HorizontalPodAutoscalers().Informer().GetIndexer().Add(hpa); err != nil {
		h.t.Fatal(err)
	}
}

// sync evaluates an HPA, brings the written status into the cache as the informer would, and
// returns the HPA and the events recorded.
func (h *harness) sync(name string) (*autoscalingv2.HorizontalPodAutoscaler, []string) {
	h.t.Helper()
	if err := h.c.sync(context.Background(), "shop/"+name); err != nil {
		h.t.Fatalf("sync: %v", err)
	}
	hpa, err := h.kube.AutoscalingV2().HorizontalPodAutoscalers("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.factory.Autoscaling().V2().HorizontalPodAutoscalers().Informer().GetIndexer().Update(hpa); err != nil {
		h.t.Fatal(err)
	}
	var events []string
	for {
		select {
		case e := <-h.recorder.Events:
			events = append(events, e)
		default:
			return hpa, events
		}
	}
}

func condition(hpa *autoscalingv2.HorizontalPodAutoscaler, t autoscalingv2.HorizontalPodAutoscalerConditionType) string {
	for _, c := range hpa.Status.Conditions {
		if c.Type == t {
			return string(c.Status) + " " + c.Reason
		}
	}
	return ""
}

func checkConditions(t *testing.T, hpa *autoscalingv2.HorizontalPodAutoscaler, want map[autoscalingv2.HorizontalPodAutoscalerConditionType]string) {
	t.Helper()
	for ct, w := range want {
		if got := condition(hpa, ct); got != w {
			t.Errorf("condition %s = %q, want %q", ct, got, w)
		}
	}
}

func hasEvent(events []string, prefix string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

func TestScaleUpOnCPU(t *testing.T) {
	h := newHarness(t, Config{})
	h.deployment("web", 2)
	h.useAll("web", "500m", "50Mi") // 100% of the requests, twice the 50% target
	h.add(cpuHPA("web", 1, 10, 50))

	hpa, events := h.sync("web")
	if len(h.updates) != 1 || h.updates[0] != 4 {
		t.Fatalf("scale updates %v, want [4]", h.updates)
	}
	st := hpa.Status
	if st.CurrentReplicas != 2 || st.DesiredReplicas != 4 || st.LastScaleTime == nil || !st.LastScaleTime.Time.Equal(testNow) ||
		ptr.Deref(st.ObservedGeneration, 0) != 1 {
		t.Errorf("status %+v, want 2 -> 4 scaled now, generation 1", st)
	}
	if len(st.CurrentMetrics) != 1 || st.CurrentMetrics[0].Resource == nil || ptr.Deref(st.CurrentMetrics[0].Resource.Current.AverageUtilization, 0) != 100 ||
		st.CurrentMetrics[0].Resource.Current.AverageValue.MilliValue() != 500 {
		t.Errorf("current metrics %+v, want cpu at 100%% (500m)", st.CurrentMetrics)
	}
	checkConditions(t, hpa, map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{
		autoscalingv2.AbleToScale:    "True SucceededRescale",
		autoscalingv2.ScalingActive:  "True ValidMetricFound",
		autoscalingv2.ScalingLimited: "False DesiredWithinRange",
	})
	if !hasEvent(events, "Normal SuccessfulRescale New size: 4; reason: cpu resource utilization (percentage of request) above target") {
		t.Errorf("events %q", events)
	}

	// The next period, at target: no change, no new scale time.
	h.now = h.now.Add(15 * time.Second)
	h.deployment("web", 4)
	h.useAll("web", "250m", "50Mi")
	hpa, _ = h.sync("web")
	if len(h.updates) != 1 || hpa.Status.DesiredReplicas != 4 || !hpa.Status.LastScaleTime.Time.Equal(testNow) {
		t.Errorf("at target: updates %v, status %+v", h.updates, hpa.Status)
	}
	checkConditions(t, hpa, map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.AbleToScale: "True ReadyForNewScale"})
}

func TestScaleDownAfterStabilization(t *testing.T) {
	h := newHarness(t, Config{})
	h.deployment("web", 4)
	h.useAll("web", "50m", "10Mi") // 10% of a 50% target: one replica would do
	h.add(cpuHPA("web", 1, 10, 50))

	hpa, _ := h.sync("web")
	if len(h.updates) != 0 || hpa.Status.DesiredReplicas != 4 {
		t.Fatalf("within the stabilization window: updates %v, desired %d", h.updates, hpa.Status.DesiredReplicas)
	}
	checkConditions(t, hpa, map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.AbleToScale: "True ScaleDownStabilized"})

	h.now = h.now.Add(5*time.Minute + 15*time.Second)
	hpa, events := h.sync("web")
	if len(h.updates) != 1 || h.updates[0] != 1 || hpa.Status.DesiredReplicas != 1 {
		t.Fatalf("after the window: updates %v, status %+v", h.updates, hpa.Status)
	}
	if !hasEvent(events, "Normal SuccessfulRescale New size: 1; reason: All metrics below target") {
		t.Errorf("events %q", events)
	}
}

// TestSyncPeriod: an HPA is evaluated again a sync period later.
func TestSyncPeriod(t *testing.T) {
	h := newHarness(t, Config{SyncPeriod: 20 * time.Millisecond})
	h.deployment("web", 2)
	h.useAll("web", "250m", "50Mi")
	h.add(cpuHPA("web", 1, 10, 50))
	start := time.Now()
	h.sync("web")
	got := make(chan string, 1)
	go func() {
		k, _ := h.c.queue.Get()
		got <- k
	}()
	select {
	case k := <-got:
		if k != "shop/web" {
			t.Errorf("queued %q", k)
		}
		if d := time.Since(start); d < 20*time.Millisecond {
			t.Errorf("requeued after %v, before the period", d)
		}
		h.c.queue.Done(k)
	case <-time.After(5 * time.Second):
		t.Fatal("the HPA was not queued again")
	}
	if DefaultConfig().SyncPeriod != 15*time.Second || (Config{}).withDefaults().SyncPeriod != 15*time.Second {
		t.Error("the default sync period is not 15 s")
	}
}

func TestMemoryAverageValue(t *testing.T) {
	h := newHarness(t, Config{})
	h.deployment("web", 2)
	h.useAll("web", "10m", "200Mi")
	hpa := cpuHPA("web", 1, 10, 50)
	hpa.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: corev1.ResourceMemory, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(apiresource.MustParse("100Mi"))}}}}
	h.add(hpa)

	got, events := h.sync("web")
	if len(h.updates) != 1 || h.updates[0] != 4 {
		t.Fatalf("scale updates %v, want [4]", h.updates)
	}
	m := got.Status.CurrentMetrics
	if len(m) != 1 || m[0].Resource == nil || m[0].Resource.Name != corev1.ResourceMemory || m[0].Resource.Current.AverageUtilization != nil ||
		m[0].Resource.Current.AverageValue.Value() != 200<<20 {
		t.Errorf("current metrics %+v, want memory 200Mi", m)
	}
	if !hasEvent(events, "Normal SuccessfulRescale New size: 4; reason: memory resource above target") {
		t.Errorf("events %q", events)
	}
}

func TestContainerResourceMetric(t *testing.T) {
	h := newHarness(t, Config{})
	h.deployment("web", 2)
	h.useAll("web", "500m", "50Mi")
	hpa := cpuHPA("web", 1, 10, 50)
	hpa.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ContainerResourceMetricSourceType, ContainerResource: &autoscalingv2.ContainerResourceMetricSource{
		Name: corev1.ResourceCPU, Container: "app", Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)}}}}
	h.add(hpa)
	got, _ := h.sync("web")
	if len(h.updates) != 1 || h.updates[0] != 4 {
		t.Fatalf("scale updates %v, want [4]", h.updates)
	}
	if m := got.Status.CurrentMetrics; len(m) != 1 || m[0].ContainerResource == nil || m[0].ContainerResource.Container != "app" {
		t.Errorf("current metrics %+v", m)
	}

	hpa.Spec.Metrics[0].ContainerResource.Container = "sidecar"
	if err := h.factory.Autoscaling().V2().HorizontalPodAutoscalers().Informer().GetIndexer().Update(hpa); err != nil {
		t.Fatal(err)
	}
	got, events := h.sync("web")
	checkConditions(t, got, map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.ScalingActive: "False FailedGetContainerResourceMetric"})
	if !hasEvent(events, "Warning FailedGetContainerResourceMetric") {
		t.Errorf("events %q", events)
	}
}

func TestNoMetrics(t *testing.T) {
	h := newHarness(t, Config{})
	h.deployment("web", 2)
	h.add(cpuHPA("web", 1, 10, 50))
	hpa, events := h.sync("web")
	if len(h.updates) != 0 {
		t.Errorf("scaled without metrics: %v", h.updates)
	}
	checkConditions(t, hpa, map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{
		autoscalingv2.AbleToScale:   "True SucceededGetScale",
		autoscalingv2.ScalingActive: "False FailedGetResourceMetric",
	})
	if hpa.Status.CurrentReplicas != 2 {
		t.Errorf("currentReplicas %d, want 2", hpa.Status.CurrentReplicas)
	}
	if !hasEvent(events, "Warning FailedGetResourceMetric failed to get cpu resource metric value: failed to get cpu utilization: unable to get metrics for resource cpu: no metrics returned") ||
		!hasEvent(events, "Warning FailedComputeMetricsReplicas invalid metrics (1 invalid out of 1)") {
		t.Errorf("events %q", events)
	}
}

func TestScaleTargetStates(t *testing.T) {
	t.Run("scaled to zero by hand", func(t *testing.T) {
		h := newHarness(t, Config{})
		h.deployment("web", 0)
		h.add(cpuHPA("web", 1, 10, 50))
		hpa, _ := h.sync("web")
		if len(h.updates) != 0 || hpa.Status.DesiredReplicas != 0 {
			t.Errorf("updates %v, status %+v", h.updates, hpa.Status)
		}
		checkConditions(t, hpa, map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.ScalingActive: "False ScalingDisabled"})
	})
	t.Run("above max", func(t *testing.T) {
		h := newHarness(t, Config{})
		h.deployment("web", 12)
		h.add(cpuHPA("web", 1, 10, 50))
		_, events := h.sync("web")
		if len(h.updates) != 1 || h.updates[0] != 10 {
			t.Errorf("updates %v, want [10]", h.updates)
		}
		if !hasEvent(events, "Normal SuccessfulRescale New size: 10; reason: Current number of replicas above Spec.MaxReplicas") {
			t.Errorf("events %q", events)
		}
	})
	t.Run("below min", func(t *testing.T) {
		h := newHarness(t, Config{})
		h.deployment("web", 1)
		h.add(cpuHPA("web", 3, 10, 50))
		h.sync("web")
		if len(h.updates) != 1 || h.updates[0] != 3 {
			t.Errorf("updates %v, want [3]", h.updates)
		}
	})
	t.Run("no scale subresource", func(t *testing.T) {
		h := newHarness(t, Config{})
		h.add(cpuHPA("web", 1, 10, 50))
		hpa, events := h.sync("web")
		checkConditions(t, hpa, map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.AbleToScale: "False FailedGetScale"})
		if !hasEvent(events, "Warning FailedGetScale") {
			t.Errorf("events %q", events)
		}
	})
	t.Run("unknown kind", func(t *testing.T) {
		h := newHarness(t, Config{})
		hpa := cpuHPA("web", 1, 10, 50)
		hpa.Spec.ScaleTargetRef.Kind = "Gadget"
		h.add(hpa)
		got, _ := h.sync("web")
		if c := got.Status.Conditions; len(c) == 0 || !strings.Contains(c[0].Message, "unable to determine resource for scale target reference") {
			t.Errorf("conditions %+v", c)
		}
	})
	t.Run("update fails", func(t *testing.T) {
		h := newHarness(t, Config{})
		h.deployment("web", 2)
		h.useAll("web", "500m", "50Mi")
		h.add(cpuHPA("web", 1, 10, 50))
		h.c.scales.(*scalefake.FakeScaleClient).PrependReactor("update", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("etcd is on fire")
		})
		hpa, events := h.sync("web")
		checkConditions(t, hpa, map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.AbleToScale: "False FailedUpdateScale"})
		if hpa.Status.LastScaleTime != nil || hpa.Status.CurrentReplicas != 2 {
			t.Errorf("status %+v", hpa.Status)
		}
		if !hasEvent(events, "Warning FailedRescale New size: 4;") {
			t.Errorf("events %q", events)
		}
	})
}

// TestInvalidMetrics: a metric that cannot be read (here a Pods metric: no custom metrics
// API) does not stop a scale up on the others, but stops a scale down.
func TestInvalidMetrics(t *testing.T) {
	podsMetric := autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: "requests_per_second"},
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(apiresource.MustParse("10"))}}}
	for _, c := range []struct {
		name        string
		cpu         string
		wantUpdates int
		wantActive  string
	}{
		{"scale up on the valid metric", "500m", 1, "True ValidMetricFound"},
		{"no scale down with an invalid metric", "50m", 0, "False FailedGetPodsMetric"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.deployment("web", 2)
			h.useAll("web", c.cpu, "50Mi")
			hpa := cpuHPA("web", 1, 10, 50)
			hpa.Spec.Metrics = append([]autoscalingv2.MetricSpec{podsMetric}, hpa.Spec.Metrics...)
			h.add(hpa)
			got, events := h.sync("web")
			if len(h.updates) != c.wantUpdates {
				t.Errorf("updates %v", h.updates)
			}
			checkConditions(t, got, map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.ScalingActive: c.wantActive})
			if !hasEvent(events, "Warning FailedGetPodsMetric") {
				t.Errorf("events %q", events)
			}
			if len(got.Status.CurrentMetrics) != 2 || got.Status.CurrentMetrics[1].Resource == nil {
				t.Errorf("current metrics %+v: want the cpu one second, as in the spec", got.Status.CurrentMetrics)
			}
		})
	}
}

func TestDefaultMetricIsCPU(t *testing.T) {
	h := newHarness(t, Config{})
	h.deployment("web", 2)
	h.useAll("web", "500m", "50Mi") // 100% of an 80% target
	hpa := cpuHPA("web", 1, 10, 50)
	hpa.Spec.Metrics = nil
	h.add(hpa)
	h.sync("web")
	if len(h.updates) != 1 || h.updates[0] != 3 {
		t.Errorf("updates %v, want [3] (ceil(2 x 100/80))", h.updates)
	}
}

func TestAmbiguousSelector(t *testing.T) {
	h := newHarness(t, Config{})
	h.deployment("web", 2)
	h.useAll("web", "250m", "50Mi")
	h.add(cpuHPA("web", 1, 10, 50))
	other := cpuHPA("web-too", 1, 10, 50)
	other.Spec.ScaleTargetRef.Name = "web"
	h.add(other)
	h.sync("web")
	got, events := h.sync("web-too")
	checkConditions(t, got, map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.ScalingActive: "False AmbiguousSelector"})
	if !hasEvent(events, "Warning AmbiguousSelector") {
		t.Errorf("events %q", events)
	}

	// Once web-too is gone, web is alone again.
	if err := h.factory.Autoscaling().V2().HorizontalPodAutoscalers().Informer().GetIndexer().Delete(other); err != nil {
		t.Fatal(err)
	}
	h.c.sync(context.Background(), "shop/web-too")
	got, _ = h.sync("web")
	checkConditions(t, got, map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.ScalingActive: "True ValidMetricFound"})
}

func TestDeletedHPAIsForgotten(t *testing.T) {
	h := newHarness(t, Config{})
	h.deployment("web", 2)
	h.useAll("web", "250m", "50Mi")
	hpa := cpuHPA("web", 1, 10, 50)
	hpa.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{}
	h.add(hpa)
	h.sync("web")
	if len(h.c.norm.recommendations) != 1 || len(h.c.selectors) != 1 {
		t.Fatalf("nothing remembered after a sync")
	}
	if err := h.factory.Autoscaling().V2().HorizontalPodAutoscalers().Informer().GetIndexer().Delete(hpa); err != nil {
		t.Fatal(err)
	}
	if err := h.c.sync(context.Background(), "shop/web"); err != nil {
		t.Fatal(err)
	}
	if len(h.c.norm.recommendations) != 0 || len(h.c.selectors) != 0 {
		t.Error("a deleted HPA's state is kept")
	}
}

func TestResourceMetricsClient(t *testing.T) {
	metrics := metricsfake.NewSimpleClientset()
	items := []metricsv1beta1.PodMetrics{
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Timestamp: metav1.NewTime(testNow), Window: metav1.Duration{Duration: 10 * time.Second},
			Containers: []metricsv1beta1.ContainerMetrics{
				{Name: "app", Usage: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("300m")}},
				{Name: "log", Usage: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("20m")}},
			}},
		{ObjectMeta: metav1.ObjectMeta{Name: "no-cpu"}, Containers: []metricsv1beta1.ContainerMetrics{
			{Name: "app", Usage: corev1.ResourceList{corev1.ResourceMemory: apiresource.MustParse("1Mi")}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "no-containers"}},
	}
	metrics.PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, &metricsv1beta1.PodMetricsList{Items: items}, nil
	})
	c := &resourceMetricsClient{client: metrics.MetricsV1beta1()}
	got, ts, err := c.resourceMetric(context.Background(), corev1.ResourceCPU, "shop", labels.Everything(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["a"].Value != 320 || got["a"].Window != 10*time.Second || !ts.Equal(testNow) {
		t.Errorf("pod metrics %+v at %v, want a: 320m over 10s", got, ts)
	}
	got, _, err = c.resourceMetric(context.Background(), corev1.ResourceCPU, "shop", labels.Everything(), "log")
	if err == nil || !strings.Contains(err.Error(), "container log not present in metrics for pod") {
		t.Errorf("container log: %+v, %v; want an error for the pods without it", got, err)
	}
	items = items[:1]
	got, _, err = c.resourceMetric(context.Background(), corev1.ResourceCPU, "shop", labels.Everything(), "log")
	if err != nil || got["a"].Value != 20 {
		t.Errorf("container log: %+v, %v; want 20m", got, err)
	}
	items = nil
	if _, _, err := c.resourceMetric(context.Background(), corev1.ResourceCPU, "shop", labels.Everything(), ""); err == nil {
		t.Error("no error without metrics")
	}
}
