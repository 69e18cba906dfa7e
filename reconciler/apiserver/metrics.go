package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/flotilla-dev/flotilla/nodes/agent/stats"
)

// metrics.k8s.io/v1beta1 is served by the API server itself: NodeMetrics and PodMetrics are
// read when asked for from the usage summaries of the node agents (stats.SummaryPath), which
// carry CPU rates over the last 10 to 15 s. Nothing is kept here but a few seconds' cache.
const (
	// summaryTTL is how long a node's summary answers further requests (kubectl top, every
	// HPA's sync) before the node agent is asked again.
	summaryTTL = 5 * time.Second
	// summaryTimeout bounds one request to a node agent.
	summaryTimeout = 10 * time.Second
	// summaryFetchers is how many node agents are asked at once.
	summaryFetchers = 16
)

// metricsSource is what the metrics storages read the Pods and Nodes from: their storages.
type metricsSource interface {
	rest.Getter
	rest.Lister
}

// The core storages of installAPIs are metrics sources.
var _ metricsSource = (*store)(nil)

// installMetricsAPI serves metrics.k8s.io/v1beta1 nodes (NodeMetrics) and pods (PodMetrics),
// get and list with label and field selectors (applied to the Nodes and Pods), from the
// summaries of the node agents reached through conn. pods and nodes are the core storages.
// The scheme must have the metrics.k8s.io/v1beta1 types (NewScheme) and the OpenAPI
// definitions must cover them (they do, see hack/update-openapi.sh).
func installMetricsAPI(s *genericapiserver.GenericAPIServer, scheme *runtime.Scheme, codecs serializer.CodecFactory, pods, nodes metricsSource, conn NodeConnection) error {
	storage, err := newMetricsStorage(pods, nodes, conn)
	if err != nil {
		return err
	}
	info := genericapiserver.NewDefaultAPIGroupInfo(metricsv1beta1.GroupName, scheme, metav1.ParameterCodec, codecs)
	info.VersionedResourcesStorageMap[metricsv1beta1.SchemeGroupVersion.Version] = storage
	if err := s.InstallAPIGroup(&info); err != nil {
		return fmt.Errorf("install metrics API: %w", err)
	}
	forgetOpenAPIModels(&info)
	return nil
}

// newMetricsStorage returns the storages of metrics.k8s.io/v1beta1 by resource.
func newMetricsStorage(pods, nodes metricsSource, conn NodeConnection) (map[string]rest.Storage, error) {
	d, err := newNodeDialer(pods, nodes, conn)
	if err != nil {
		return nil, err
	}
	sums := newSummaries(d.transport)
	return map[string]rest.Storage{
		"nodes": &nodeMetricsREST{metricsREST{nodes: nodes, sums: sums, now: time.Now}},
		"pods":  &podMetricsREST{metricsREST: metricsREST{nodes: nodes, sums: sums, now: time.Now}, pods: pods},
	}, nil
}

// summaries fetches node agents' summaries. A summary is reused for summaryTTL, and
// concurrent requests for one node share one fetch; callers must not modify a summary.
type summaries struct {
	client *http.Client
	ttl    time.Duration
	now    func() time.Time
	group  singleflight.Group

	mu    sync.Mutex
	cache map[string]cachedSummary // node name@address -> summary
}

type cachedSummary struct {
	at  time.Time
	sum *stats.Summary
}

func newSummaries(transport http.RoundTripper) *summaries {
	return &summaries{
		client: &http.Client{Transport: transport, Timeout: summaryTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		ttl: summaryTTL, now: time.Now, cache: map[string]cachedSummary{},
	}
}

// get returns a node's summary.
func (s *summaries) get(ctx context.Context, node *corev1.Node) (*stats.Summary, error) {
	u, err := nodeAgentURL(node, stats.SummaryPath)
	if err != nil {
		return nil, err
	}
	key := node.Name + "@" + u.Host
	s.mu.Lock()
	c, ok := s.cache[key]
	s.mu.Unlock()
	if ok && s.now().Sub(c.at) < s.ttl {
		return c.sum, nil
	}
	v, err, _ := s.group.Do(key, func() (any, error) {
		// Shared with other requests: not cancelled with this one.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), summaryTimeout)
		defer cancel()
		sum, err := s.fetch(fctx, u)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", node.Name, err)
		}
		s.store(key, sum)
		return sum, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*stats.Summary), nil
}

// store caches a summary and forgets the expired ones (of nodes gone or moved).
func (s *summaries) store(key string, sum *stats.Summary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, c := range s.cache {
		if now.Sub(c.at) >= s.ttl {
			delete(s.cache, k)
		}
	}
	s.cache[key] = cachedSummary{at: now, sum: sum}
}

func (s *summaries) fetch(ctx context.Context, u *url.URL) (*stats.Summary, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", u.Path, resp.Status, strings.TrimSpace(string(b)))
	}
	var sum stats.Summary
	if err := json.NewDecoder(resp.Body).Decode(&sum); err != nil {
		return nil, fmt.Errorf("GET %s: %w", u.Path, err)
	}
	return &sum, nil
}

// many returns the summaries of the nodes that answer, by node name; the others are left out.
func (s *summaries) many(ctx context.Context, nodes []*corev1.Node) map[string]*stats.Summary {
	out := map[string]*stats.Summary{}
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(summaryFetchers)
	for _, n := range nodes {
		g.Go(func() error {
			sum, err := s.get(ctx, n)
			if err != nil {
				logrus.WithError(err).Debug("metrics: no usage summary")
				return nil
			}
			mu.Lock()
			out[n.Name] = sum
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	return out
}

// clusterScoped is ctx without a namespace, for reading Nodes.
func clusterScoped(ctx context.Context) context.Context {
	return genericapirequest.WithNamespace(ctx, metav1.NamespaceNone)
}

// listNodes lists the Nodes matching the selectors of opts (nil: all).
func listNodes(ctx context.Context, nodes metricsSource, opts *metainternalversion.ListOptions) ([]*corev1.Node, error) {
	lo := &metainternalversion.ListOptions{}
	if opts != nil {
		lo.LabelSelector, lo.FieldSelector = opts.LabelSelector, opts.FieldSelector
	}
	obj, err := nodes.List(clusterScoped(ctx), lo)
	if err != nil {
		return nil, err
	}
	list, ok := obj.(*corev1.NodeList)
	if !ok {
		return nil, fmt.Errorf("listing nodes returned %T", obj)
	}
	out := make([]*corev1.Node, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

func getNode(ctx context.Context, nodes metricsSource, name string) (*corev1.Node, error) {
	obj, err := nodes.Get(clusterScoped(ctx), name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return nil, fmt.Errorf("getting node %s returned %T", name, obj)
	}
	return node, nil
}

func cpuQuantity(nanoCores uint64) apiresource.Quantity {
	return *apiresource.NewScaledQuantity(int64(nanoCores), apiresource.Nano)
}

func memoryQuantity(bytes uint64) apiresource.Quantity {
	return *apiresource.NewQuantity(int64(bytes), apiresource.BinarySI)
}

// metricsREST is what the metrics storages share: the Nodes, the summaries of their node
// agents and the clock.
type metricsREST struct {
	nodes metricsSource
	sums  *summaries
	now   func() time.Time
}

func (metricsREST) Destroy() {}

// metricsStorage is what the metrics storages implement.
type metricsStorage interface {
	rest.Getter
	rest.Lister
	rest.Scoper
	rest.SingularNameProvider
	rest.TableConvertor
}

var (
	_ metricsStorage = &nodeMetricsREST{}
	_ metricsStorage = &podMetricsREST{}
)

// metricsTable is the table of obj: one metrics object (*M), or a list of them (*L) whose
// items items returns. row makes the row of one object.
func metricsTable[M, L any](obj runtime.Object, items func(*L) []M, row func(*M) metav1.TableRow) (*metav1.Table, error) {
	var ms []M
	switch o := any(obj).(type) {
	case *M:
		ms = []M{*o}
	case *L:
		ms = items(o)
	default:
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
	t := &metav1.Table{ColumnDefinitions: metricsColumns}
	for i := range ms {
		t.Rows = append(t.Rows, row(&ms[i]))
	}
	return t, nil
}

// nodeMetricsREST serves metrics.k8s.io nodes.
type nodeMetricsREST struct {
	metricsREST
}

func (r *nodeMetricsREST) New() runtime.Object     { return &metricsv1beta1.NodeMetrics{} }
func (r *nodeMetricsREST) NewList() runtime.Object { return &metricsv1beta1.NodeMetricsList{} }
func (r *nodeMetricsREST) NamespaceScoped() bool   { return false }
func (r *nodeMetricsREST) GetSingularName() string { return "node" }

// nodeMetrics is a node's metrics, false while its summary has no CPU rate or memory.
func nodeMetrics(node *corev1.Node, sum *stats.Summary, now time.Time) (*metricsv1beta1.NodeMetrics, bool) {
	cpu, mem := sum.Node.CPU, sum.Node.Memory
	if cpu == nil || cpu.UsageNanoCores == nil || mem == nil {
		return nil, false
	}
	return &metricsv1beta1.NodeMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: node.Labels, CreationTimestamp: metav1.NewTime(now)},
		Timestamp:  metav1.NewTime(cpu.Time),
		Window:     cpu.Window,
		Usage: corev1.ResourceList{
			corev1.ResourceCPU:    cpuQuantity(*cpu.UsageNanoCores),
			corev1.ResourceMemory: memoryQuantity(mem.WorkingSetBytes),
		},
	}, true
}

func (r *nodeMetricsREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	node, err := getNode(ctx, r.nodes, name)
	if err != nil {
		return nil, err
	}
	sum, err := r.sums.get(ctx, node)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("metrics of node %s: %v", name, err))
	}
	m, ok := nodeMetrics(node, sum, r.now())
	if !ok {
		return nil, apierrors.NewNotFound(metricsv1beta1.Resource("nodes"), name)
	}
	return m, nil
}

func (r *nodeMetricsREST) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	nodes, err := listNodes(ctx, r.nodes, opts)
	if err != nil {
		return nil, err
	}
	sums := r.sums.many(ctx, nodes)
	out := &metricsv1beta1.NodeMetricsList{Items: []metricsv1beta1.NodeMetrics{}}
	now := r.now()
	for _, n := range nodes {
		if sum := sums[n.Name]; sum != nil {
			if m, ok := nodeMetrics(n, sum, now); ok {
				out.Items = append(out.Items, *m)
			}
		}
	}
	sort.Slice(out.Items, func(i, j int) bool { return out.Items[i].Name < out.Items[j].Name })
	return out, nil
}

func (r *nodeMetricsREST) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	return metricsTable(obj, func(l *metricsv1beta1.NodeMetricsList) []metricsv1beta1.NodeMetrics { return l.Items },
		func(m *metricsv1beta1.NodeMetrics) metav1.TableRow { return metricsRow(m, m.Name, m.Usage, m.Window) })
}

// podMetricsREST serves metrics.k8s.io pods.
type podMetricsREST struct {
	metricsREST
	pods metricsSource
}

func (r *podMetricsREST) New() runtime.Object     { return &metricsv1beta1.PodMetrics{} }
func (r *podMetricsREST) NewList() runtime.Object { return &metricsv1beta1.PodMetricsList{} }
func (r *podMetricsREST) NamespaceScoped() bool   { return true }
func (r *podMetricsREST) GetSingularName() string { return "pod" }

// podMetrics is a pod's metrics from its node's summary, false unless every running
// container of the pod has a CPU rate and a working set. Containers come in the order of the
// pod's spec, init containers (sidecars) first.
func podMetrics(pod *corev1.Pod, sum *stats.Summary, now time.Time) (*metricsv1beta1.PodMetrics, bool) {
	var ps *stats.PodStats
	for i := range sum.Pods {
		if sum.Pods[i].PodRef.UID == string(pod.UID) {
			ps = &sum.Pods[i]
			break
		}
	}
	if ps == nil || ps.CPU == nil || ps.CPU.UsageNanoCores == nil || ps.Memory == nil {
		return nil, false
	}
	order := map[string]int{}
	for i, c := range pod.Spec.InitContainers {
		order[c.Name] = i - len(pod.Spec.InitContainers)
	}
	for i, c := range pod.Spec.Containers {
		order[c.Name] = i
	}
	m := &metricsv1beta1.PodMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, Labels: pod.Labels, CreationTimestamp: metav1.NewTime(now)},
		Timestamp:  metav1.NewTime(ps.CPU.Time),
		Window:     ps.CPU.Window,
		Containers: make([]metricsv1beta1.ContainerMetrics, 0, len(ps.Containers)),
	}
	for _, c := range ps.Containers {
		// Sum set the pod's rate and memory: every container has both.
		m.Containers = append(m.Containers, metricsv1beta1.ContainerMetrics{Name: c.Name, Usage: corev1.ResourceList{
			corev1.ResourceCPU:    cpuQuantity(*c.CPU.UsageNanoCores),
			corev1.ResourceMemory: memoryQuantity(c.Memory.WorkingSetBytes),
		}})
	}
	sort.SliceStable(m.Containers, func(i, j int) bool { return order[m.Containers[i].Name] < order[m.Containers[j].Name] })
	return m, true
}

func (r *podMetricsREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.pods.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("getting pod %s returned %T", name, obj)
	}
	notFound := apierrors.NewNotFound(metricsv1beta1.Resource("pods"), name)
	if pod.Spec.NodeName == "" {
		return nil, notFound
	}
	node, err := getNode(ctx, r.nodes, pod.Spec.NodeName)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("metrics of pod %s: %v", name, err))
	}
	sum, err := r.sums.get(ctx, node)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("metrics of pod %s: %v", name, err))
	}
	m, ok := podMetrics(pod, sum, r.now())
	if !ok {
		return nil, notFound
	}
	return m, nil
}

func (r *podMetricsREST) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	lo := &metainternalversion.ListOptions{}
	if opts != nil {
		lo.LabelSelector, lo.FieldSelector = opts.LabelSelector, opts.FieldSelector
	}
	obj, err := r.pods.List(ctx, lo)
	if err != nil {
		return nil, err
	}
	pods, ok := obj.(*corev1.PodList)
	if !ok {
		return nil, fmt.Errorf("listing pods returned %T", obj)
	}
	out := &metricsv1beta1.PodMetricsList{Items: []metricsv1beta1.PodMetrics{}}
	wanted := map[string]bool{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			wanted[p.Spec.NodeName] = true
		}
	}
	if len(wanted) == 0 {
		return out, nil
	}
	nodes, err := listNodes(ctx, r.nodes, nil)
	if err != nil {
		return nil, err
	}
	var on []*corev1.Node
	for _, n := range nodes {
		if wanted[n.Name] {
			on = append(on, n)
		}
	}
	sums := r.sums.many(ctx, on)
	now := r.now()
	for i := range pods.Items {
		p := &pods.Items[i]
		if sum := sums[p.Spec.NodeName]; sum != nil {
			if m, ok := podMetrics(p, sum, now); ok {
				out.Items = append(out.Items, *m)
			}
		}
	}
	sort.Slice(out.Items, func(i, j int) bool {
		a, b := out.Items[i], out.Items[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out, nil
}

func (r *podMetricsREST) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	return metricsTable(obj, func(l *metricsv1beta1.PodMetricsList) []metricsv1beta1.PodMetrics { return l.Items },
		func(m *metricsv1beta1.PodMetrics) metav1.TableRow {
			total := corev1.ResourceList{}
			for _, c := range m.Containers {
				for name, q := range c.Usage {
					sum := total[name]
					sum.Add(q)
					total[name] = sum
				}
			}
			return metricsRow(m, m.Name, total, m.Window)
		})
}

var metricsColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the node or pod."},
	{Name: "CPU", Type: "string", Description: "CPU used, in millicores, averaged over the window."},
	{Name: "Memory", Type: "string", Description: "Working set memory, in MiB."},
	{Name: "Window", Type: "string", Description: "The interval the CPU rate is an average over."},
}

func metricsRow(obj runtime.Object, name string, usage corev1.ResourceList, window metav1.Duration) metav1.TableRow {
	cpu, mem := usage[corev1.ResourceCPU], usage[corev1.ResourceMemory]
	return metav1.TableRow{
		Cells:  []any{name, fmt.Sprintf("%dm", cpu.MilliValue()), fmt.Sprintf("%dMi", mem.Value()/(1<<20)), window.Duration.Round(time.Millisecond).String()},
		Object: runtime.RawExtension{Object: obj},
	}
}
