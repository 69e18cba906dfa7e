package apiserver

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	restclient "k8s.io/client-go/rest"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/flotilla-dev/flotilla/nodes/agent/stats"
)

// fakeObjects is a read-only storage of Pods or Nodes for the metrics storages.
type fakeObjects struct {
	pods  []corev1.Pod
	nodes []corev1.Node
}

func (f *fakeObjects) New() runtime.Object {
	if f.nodes != nil {
		return &corev1.Node{}
	}
	return &corev1.Pod{}
}
func (f *fakeObjects) Destroy() {}
func (f *fakeObjects) NewList() runtime.Object {
	if f.nodes != nil {
		return &corev1.NodeList{}
	}
	return &corev1.PodList{}
}
func (f *fakeObjects) ConvertToTable(context.Context, runtime.Object, runtime.Object) (*metav1.Table, error) {
	return nil, nil
}

func (f *fakeObjects) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ns := genericapirequest.NamespaceValue(ctx)
	for i := range f.pods {
		if p := &f.pods[i]; p.Namespace == ns && p.Name == name {
			return p.DeepCopy(), nil
		}
	}
	for i := range f.nodes {
		if n := &f.nodes[i]; n.Name == name {
			return n.DeepCopy(), nil
		}
	}
	return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
}

func (f *fakeObjects) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	ns := genericapirequest.NamespaceValue(ctx)
	sel := labels.Everything()
	if opts != nil && opts.LabelSelector != nil {
		sel = opts.LabelSelector
	}
	if f.nodes != nil {
		if ns != "" {
			panic("nodes listed with namespace " + ns)
		}
		out := &corev1.NodeList{}
		for _, n := range f.nodes {
			if sel.Matches(labels.Set(n.Labels)) {
				out.Items = append(out.Items, n)
			}
		}
		return out, nil
	}
	out := &corev1.PodList{}
	for _, p := range f.pods {
		if (ns == "" || p.Namespace == ns) && sel.Matches(labels.Set(p.Labels)) {
			out.Items = append(out.Items, p)
		}
	}
	return out, nil
}

var _ metricsSource = &fakeObjects{}

// fakeAgent serves a summary like a node agent, behind the bearer token.
func fakeAgent(t *testing.T, token string, sum *stats.Summary, requests *atomic.Int32) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		if r.URL.Path != stats.SummaryPath {
			http.NotFound(w, r)
			return
		}
		requests.Add(1)
		_ = json.NewEncoder(w).Encode(sum)
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, ca
}

// newTestAPIServer builds a generic API server with the scheme and OpenAPI definitions of the
// real one, every request authenticated as an admin, and the metrics API installed.
func newTestAPIServer(t *testing.T, pods, nodes metricsSource, conn NodeConnection) *httptest.Server {
	t.Helper()
	scheme, codecs, gc := newTestGenericConfig()
	gc.Authentication.Authenticator = authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}}, true, nil
	})
	gc.Authorization.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()
	s, err := gc.Complete(nil).New("metrics-test", genericapiserver.NewEmptyDelegate())
	if err != nil {
		t.Fatal(err)
	}
	if err := installMetricsAPI(s, scheme, codecs, pods, nodes, conn); err != nil {
		t.Fatalf("installMetricsAPI: %v", err)
	}
	srv := httptest.NewServer(s.Handler)
	t.Cleanup(srv.Close)
	return srv
}

func agentNode(name, addr string, lbls map[string]string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
	if addr != "" {
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}}
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(p)
	}
	return n
}

func testPodOn(ns, name, uid, node string, lbls map[string]string, containers ...string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Labels: lbls},
		Spec: corev1.PodSpec{NodeName: node}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	return p
}

func rated(t time.Time, nanoCores uint64, window time.Duration, workingSet uint64) (*stats.CPUStats, *stats.MemoryStats) {
	return &stats.CPUStats{Time: t, UsageCoreNanoSeconds: 1, UsageNanoCores: &nanoCores, Window: metav1.Duration{Duration: window}},
		&stats.MemoryStats{Time: t, UsageBytes: workingSet, WorkingSetBytes: workingSet}
}

// TestMetricsAPI serves metrics.k8s.io from a fake node agent's summary and reads it with the
// metrics clientset kubectl top and the HPA controller use.
func TestMetricsAPI(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	window := 12 * time.Second
	container := func(name string, nanoCores, ws uint64) stats.ContainerStats {
		cpu, mem := rated(now, nanoCores, window, ws)
		return stats.ContainerStats{Name: name, CPU: cpu, Memory: mem}
	}
	web := stats.PodStats{PodRef: stats.PodReference{Namespace: "shop", Name: "web-0", UID: "uid-web-0"},
		Containers: []stats.ContainerStats{container("log", 20_000_000, 10<<20), container("app", 480_000_000, 200<<20)}}
	db := stats.PodStats{PodRef: stats.PodReference{Namespace: "data", Name: "db-0", UID: "uid-db-0"},
		Containers: []stats.ContainerStats{container("main", 1_000_000_000, 1<<30)}}
	starting := stats.PodStats{PodRef: stats.PodReference{Namespace: "shop", Name: "web-2", UID: "uid-web-2"},
		Containers: []stats.ContainerStats{{Name: "app", CPU: &stats.CPUStats{Time: now, UsageCoreNanoSeconds: 5}, Memory: &stats.MemoryStats{Time: now}}}}
	for _, p := range []*stats.PodStats{&web, &db, &starting} {
		p.Sum()
	}
	nodeCPU, nodeMem := rated(now, 1_750_000_000, window, 3<<30)
	sum := &stats.Summary{Node: stats.NodeStats{NodeName: "host-1", CPU: nodeCPU, Memory: nodeMem},
		Pods: []stats.PodStats{db, web, starting}}

	const token = "agent-token"
	var requests atomic.Int32
	agent, ca := fakeAgent(t, token, sum, &requests)
	// host-3's agent has just started: no CPU rate yet.
	fresh := &stats.Summary{Node: stats.NodeStats{NodeName: "host-3", CPU: &stats.CPUStats{Time: now, UsageCoreNanoSeconds: 9}, Memory: nodeMem}}
	var freshRequests atomic.Int32
	agent3, _ := fakeAgent(t, token, fresh, &freshRequests)
	// Both fake agents have the same certificate: one CA file serves for both.

	nodes := &fakeObjects{nodes: []corev1.Node{
		agentNode("host-1", agent.Listener.Addr().String(), map[string]string{"role": "edge"}),
		agentNode("host-2", "", map[string]string{"role": "edge"}), // runs no pods: no agent endpoint
		agentNode("host-3", agent3.Listener.Addr().String(), nil),
	}}
	pods := &fakeObjects{pods: []corev1.Pod{
		testPodOn("shop", "web-0", "uid-web-0", "host-1", map[string]string{"app": "web"}, "app", "log"),
		testPodOn("shop", "web-1", "uid-web-1", "host-1", map[string]string{"app": "web"}, "app"), // not running
		testPodOn("shop", "web-2", "uid-web-2", "host-1", map[string]string{"app": "web"}, "app"), // no rate yet
		testPodOn("data", "db-0", "uid-db-0", "host-1", map[string]string{"app": "db"}, "main"),
		testPodOn("data", "db-1", "uid-db-1-old", "host-1", map[string]string{"app": "db"}, "main"), // other incarnation
		testPodOn("shop", "pending", "uid-pending", "", map[string]string{"app": "web"}, "app"),
		testPodOn("shop", "cache-0", "uid-cache-0", "host-2", map[string]string{"app": "cache"}, "app"),
	}}
	srv := newTestAPIServer(t, pods, nodes, NodeConnection{CAFile: ca, Token: token})
	cfg := &restclient.Config{Host: srv.URL, QPS: 1000, Burst: 1000}
	mc := metricsclient.NewForConfigOrDie(cfg)
	ctx := context.Background()

	t.Run("discovery", func(t *testing.T) {
		res, err := mc.Discovery().ServerResourcesForGroupVersion(metricsv1beta1.SchemeGroupVersion.String())
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]metav1.APIResource{}
		for _, r := range res.APIResources {
			got[r.Name] = r
		}
		for name, want := range map[string]struct {
			kind       string
			namespaced bool
		}{"nodes": {"NodeMetrics", false}, "pods": {"PodMetrics", true}} {
			r, ok := got[name]
			if !ok || r.Kind != want.kind || r.Namespaced != want.namespaced || len(r.Verbs) != 2 || r.Verbs[0] != "get" || r.Verbs[1] != "list" {
				t.Errorf("resource %s: %+v, want kind %s, namespaced %v, verbs [get list]", name, r, want.kind, want.namespaced)
			}
		}
	})

	t.Run("nodes", func(t *testing.T) {
		list, err := mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("NodeMetrics %+v, want host-1 only (host-2 has no agent endpoint, host-3 no rate yet)", list.Items)
		}
		m := list.Items[0]
		cpu, mem := m.Usage[corev1.ResourceCPU], m.Usage[corev1.ResourceMemory]
		if m.Name != "host-1" || cpu.MilliValue() != 1750 || mem.Value() != 3<<30 || m.Window.Duration != window ||
			!m.Timestamp.Time.Equal(now) || m.Labels["role"] != "edge" {
			t.Errorf("host-1: %+v, want 1750m, 3Gi over %v at %v with the node's labels", m, window, now)
		}
		edge, err := mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{LabelSelector: "role=edge"})
		if err != nil || len(edge.Items) != 1 {
			t.Errorf("role=edge: %+v, %v; want host-1", edge, err)
		}
		none, err := mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{LabelSelector: "role=core"})
		if err != nil || len(none.Items) != 0 {
			t.Errorf("role=core: %+v, %v; want nothing", none, err)
		}
		if got, err := mc.MetricsV1beta1().NodeMetricses().Get(ctx, "host-1", metav1.GetOptions{}); err != nil || got.Name != "host-1" {
			t.Errorf("get host-1: %+v, %v", got, err)
		}
		if _, err := mc.MetricsV1beta1().NodeMetricses().Get(ctx, "host-3", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get host-3 (no rate yet): %v, want NotFound", err)
		}
		if _, err := mc.MetricsV1beta1().NodeMetricses().Get(ctx, "host-2", metav1.GetOptions{}); !apierrors.IsServiceUnavailable(err) {
			t.Errorf("get host-2 (no agent endpoint): %v, want ServiceUnavailable", err)
		}
		if _, err := mc.MetricsV1beta1().NodeMetricses().Get(ctx, "host-9", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get host-9 (no such node): %v, want NotFound", err)
		}
	})

	t.Run("pods", func(t *testing.T) {
		all, err := mc.MetricsV1beta1().PodMetricses("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(all.Items) != 2 || all.Items[0].Name != "db-0" || all.Items[1].Name != "web-0" {
			t.Fatalf("PodMetrics in all namespaces: %+v, want data/db-0 and shop/web-0", all.Items)
		}
		w := all.Items[1]
		if w.Namespace != "shop" || w.Labels["app"] != "web" || w.Window.Duration != window || !w.Timestamp.Time.Equal(now) {
			t.Errorf("web-0: %+v", w)
		}
		if len(w.Containers) != 2 || w.Containers[0].Name != "app" || w.Containers[1].Name != "log" {
			t.Fatalf("web-0 containers %+v, want app then log (the spec's order)", w.Containers)
		}
		cpu, mem := w.Containers[0].Usage[corev1.ResourceCPU], w.Containers[0].Usage[corev1.ResourceMemory]
		if cpu.MilliValue() != 480 || mem.Value() != 200<<20 {
			t.Errorf("web-0/app usage %v, %v; want 480m, 200Mi", cpu.String(), mem.String())
		}

		shop, err := mc.MetricsV1beta1().PodMetricses("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(shop.Items) != 1 || shop.Items[0].Name != "web-0" {
			t.Errorf("shop, app=web: %+v, %v; want web-0", shop, err)
		}
		db, err := mc.MetricsV1beta1().PodMetricses("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
		if err != nil || len(db.Items) != 0 {
			t.Errorf("shop, app=db: %+v, %v; want nothing", db, err)
		}
		if got, err := mc.MetricsV1beta1().PodMetricses("data").Get(ctx, "db-0", metav1.GetOptions{}); err != nil || len(got.Containers) != 1 {
			t.Errorf("get data/db-0: %+v, %v", got, err)
		}
		for _, name := range []string{"web-1", "web-2", "pending", "nope"} {
			if _, err := mc.MetricsV1beta1().PodMetricses("shop").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("get shop/%s: %v, want NotFound", name, err)
			}
		}
		if _, err := mc.MetricsV1beta1().PodMetricses("data").Get(ctx, "db-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get data/db-1 (the summary has another incarnation): %v, want NotFound", err)
		}
	})

	t.Run("table", func(t *testing.T) {
		body, err := mc.MetricsV1beta1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/namespaces/shop/pods").
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var table metav1.Table
		if err := json.Unmarshal(body, &table); err != nil {
			t.Fatal(err)
		}
		if len(table.Rows) != 1 || len(table.Rows[0].Cells) != 4 {
			t.Fatalf("table %s", body)
		}
		if got := table.Rows[0].Cells; got[0] != "web-0" || got[1] != "500m" || got[2] != "210Mi" || got[3] != "12s" {
			t.Errorf("row %v, want web-0 500m 210Mi 12s", got)
		}
	})

	t.Run("cache", func(t *testing.T) {
		before := requests.Load()
		for i := 0; i < 3; i++ {
			if _, err := mc.MetricsV1beta1().PodMetricses("").List(ctx, metav1.ListOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if n := requests.Load() - before; n > 1 {
			t.Errorf("three lists within %v asked the agent %d times, want at most once", summaryTTL, n)
		}
	})
}

// TestMetricsAgentAuth: a node agent that refuses the token gives no metrics.
func TestMetricsAgentAuth(t *testing.T) {
	var requests atomic.Int32
	agent, ca := fakeAgent(t, "right", &stats.Summary{}, &requests)
	nodes := &fakeObjects{nodes: []corev1.Node{agentNode("host-1", agent.Listener.Addr().String(), nil)}}
	storage, err := newMetricsStorage(&fakeObjects{pods: []corev1.Pod{}}, nodes, NodeConnection{CAFile: ca, Token: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = storage["nodes"].(rest.Getter).Get(context.Background(), "host-1", &metav1.GetOptions{})
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("get with a refused token: %v, want ServiceUnavailable", err)
	}
}
