package scheduler

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/internal/kubeclient"
	sched "github.com/flotilla-dev/flotilla/reconciler/scheduler"
	"github.com/flotilla-dev/flotilla/test/framework"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type benchResult struct {
	once            sync.Once
	podsPerS        float64
	createsPerS     float64
	elapsed         time.Duration
	bindingsInStats int
}

var benchResults = map[string]*benchResult{}

// BenchmarkScheduler measures placement throughput against real agents (make bench-scheduler):
// FLOTILLA_BENCH_NODES simulated Node objects (default 1000, no agents) and
// FLOTILLA_BENCH_PODS pods (default 10000); FLOTILLA_BENCH_BINDINGS overrides
// Options.BindingsInFlight. Controllers are off so only the scheduler works; it runs in this
// process against the API of the first host, as the elected scheduler of a site does.
//
//   - hosts=1: one agent (etcd with one voter); hosts=3: a 3-host site in network namespaces
//     (etcd with 3 voters: every create and binding commits on a majority), the pods created
//     through the three hosts' APIs in turn.
//   - burst: the pods are created at once (64 clients) while the scheduler runs; pods/s from
//     the first create to the last committed binding (create-to-bound; it includes the API
//     server's create rate, printed as creates/s).
//   - backlog: the pods exist before the scheduler starts; bindings/s from its start to the
//     last committed binding (what the scheduler and the API's BindingBatches sustain).
//
// Each case is measured once whatever b.N (a second burst would measure a fuller site): run
// it with -benchtime 1x.
func BenchmarkScheduler(b *testing.B) {
	for _, hosts := range []int{1, 3} {
		for _, mode := range []string{"burst", "backlog"} {
			name := fmt.Sprintf("hosts=%d/%s", hosts, mode)
			b.Run(name, func(b *testing.B) {
				r := benchResults[name]
				if r == nil {
					r = &benchResult{}
					benchResults[name] = r
				}
				r.once.Do(func() { runSchedulerBench(b, r, hosts, mode == "backlog") })
				if mode == "backlog" {
					b.ReportMetric(r.podsPerS, "bindings/s")
				} else {
					b.ReportMetric(r.podsPerS, "pods/s")
					b.ReportMetric(r.createsPerS, "creates/s")
				}
				b.ReportMetric(r.elapsed.Seconds(), "s/run")
				b.ReportMetric(0, "ns/op") // one run: the figures above say what it took
			})
		}
	}
}

// benchAPIs starts the API the benchmark talks to: one agent, or a 3-host site. It returns
// the REST config of every host's API (the first one's for the scheduler).
func benchAPIs(b *testing.B, hosts int) []*rest.Config {
	if hosts == 1 {
		a, _ := startAgent(b, "--controllers=")
		return []*rest.Config{a.RESTConfig()}
	}
	if err := devsite.Preflight(); err != nil {
		if framework.InCI() {
			b.Fatalf("a 3-host site cannot run: %v", err)
		}
		b.Skipf("a 3-host site cannot run: %v", err)
	}
	s, err := devsite.New(devsite.Options{Hosts: hosts, Dir: b.TempDir(), Bin: framework.FlotillaBin(b), Kubectl: framework.KubectlBin(b)})
	if err != nil {
		b.Fatalf("create site: %v", err)
	}
	b.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := s.Hosts[0].Start("--controllers="); err != nil {
		b.Fatal(err)
	}
	if err := s.Hosts[0].WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	for _, h := range s.Hosts[1:] {
		if err := h.StartJoining(s.Hosts[:1], "--controllers="); err != nil {
			b.Fatal(err)
		}
	}
	var cfgs []*rest.Config
	for _, h := range s.Hosts {
		if err := h.WaitReady(ctx); err != nil {
			b.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", h.Kubeconfig())
		if err != nil {
			b.Fatal(err)
		}
		cfg.Host = "https://" + h.IP + ":6443"
		cfgs = append(cfgs, cfg)
	}
	// The hosts' own Nodes take no simulated pods: the figure is the simulated nodes'.
	c, err := kubeclient.New(cfgs[0])
	if err != nil {
		b.Fatal(err)
	}
	for _, h := range s.Hosts {
		cordon(b, c, h.Name)
	}
	// A voter promoted after the creates start would measure its catching up.
	pki := filepath.Join(s.Hosts[0].DataDir, "pki")
	tlsCfg, err := transport.TLSInfo{CertFile: filepath.Join(pki, "etcd-client.crt"), KeyFile: filepath.Join(pki, "etcd-client.key"),
		TrustedCAFile: filepath.Join(pki, "ca.crt")}.ClientConfig()
	if err != nil {
		b.Fatal(err)
	}
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + s.Hosts[0].IP + ":2379"}, TLS: tlsCfg, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer ec.Close()
	waitFor(b, 2*time.Minute, fmt.Sprintf("%d etcd voters", hosts), func() (bool, string) {
		resp, err := ec.MemberList(ctx)
		if err != nil {
			return false, err.Error()
		}
		voters := 0
		for _, m := range resp.Members {
			if !m.IsLearner && len(m.ClientURLs) > 0 {
				voters++
			}
		}
		return voters == hosts, fmt.Sprintf("%d voters of %d members", voters, len(resp.Members))
	})
	return cfgs
}

func runSchedulerBench(b *testing.B, r *benchResult, hosts int, backlog bool) {
	nodes, pods := envInt("FLOTILLA_BENCH_NODES", 1000), envInt("FLOTILLA_BENCH_PODS", 10000)
	cfgs := benchAPIs(b, hosts)
	var cs []kubernetes.Interface
	for _, cfg := range cfgs {
		cfg.QPS, cfg.Burst = 5000, 10000
		// As the agent's own clients (its scheduler among them): the API server gzips every
		// watch event for a client that accepts it, which the scheduler in the agent never
		// asks for; with it, the benchmark measured compression on both ends as well.
		cfg.DisableCompression = true
		// The pods' creators get a connection of their own, as the site's other clients
		// (gitsync, controllers, kubectl) have theirs: client-go shares one HTTP/2 connection
		// between clients of equal configurations, and the scheduler's watches and bindings
		// would queue behind 64 creates on it. A configuration with its own dialer is given
		// a transport of its own.
		creators := rest.CopyConfig(cfg)
		creators.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		c, err := kubeclient.New(creators)
		if err != nil {
			b.Fatal(err)
		}
		cs = append(cs, c)
	}
	c, err := kubeclient.New(cfgs[0])
	if err != nil {
		b.Fatal(err)
	}
	var ns []string
	for i := 0; i < nodes; i++ {
		ns = append(ns, fmt.Sprintf("sim-%04d", i))
	}
	err = parallel(32, len(ns), func(i int) error {
		// 32 cores, 128 GiB, 110 pods: 10 pods of 100m each per node never fill one.
		_, err := c.CoreV1().Nodes().Create(context.Background(), fakeNode(ns[i], 32000, 131072, 110, map[string]string{
			"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3)}), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("create nodes: %v", err)
	}
	// A site's controllers create every namespace's default ServiceAccount; without it the
	// API server would look it up once more for each pod created (the controllers are off here).
	if _, err := c.CoreV1().ServiceAccounts("default").Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		b.Fatalf("create the default ServiceAccount: %v", err)
	}
	createPods := func() error {
		return parallel(64, pods, func(i int) error {
			_, err := cs[i%len(cs)].CoreV1().Pods("default").Create(context.Background(), testPod(fmt.Sprintf("bench-%05d", i), 100, 64, nil), metav1.CreateOptions{})
			return err
		})
	}
	if backlog {
		t0 := time.Now()
		if err := createPods(); err != nil {
			b.Fatalf("create pods: %v", err)
		}
		b.Logf("backlog: %d pods created in %v", pods, time.Since(t0).Round(time.Millisecond))
	}

	// Bindings are counted from a watch: a binding whose response was lost (the scheduler
	// retries it and gets 409) still counts once, when the API shows it.
	allBound := watchBound(b, c, pods)

	b.ResetTimer()
	start := time.Now()
	s := startScheduler(b, cfgs[0], sched.Options{BindingsInFlight: envInt("FLOTILLA_BENCH_BINDINGS", 0)})
	if !backlog {
		// The burst measures placing, not the scheduler's first list of the nodes.
		waitFor(b, 2*time.Minute, "the scheduler to see every node", func() (bool, string) {
			n := s.Stats().Nodes
			return n == nodes+hosts, fmt.Sprintf("%d nodes", n) // + the agents' own (cordoned) hosts
		})
		start = time.Now()
	}
	type result struct {
		took time.Duration
		err  error
	}
	createDone := make(chan result, 1)
	if !backlog {
		go func() {
			err := createPods()
			createDone <- result{time.Since(start), err}
		}()
	}
	var createTime time.Duration
	select {
	case <-allBound:
	case res := <-createDone:
		if res.err != nil {
			b.Fatalf("create pods: %v", res.err)
		}
		createTime = res.took
		select {
		case <-allBound:
		case <-time.After(30 * time.Minute):
			b.Fatalf("not every pod bound after 30 min: %+v", s.Stats())
		}
	case <-time.After(30 * time.Minute):
		b.Fatalf("not every pod bound after 30 min: %+v", s.Stats())
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if !backlog && createTime == 0 {
		res := <-createDone
		if res.err != nil {
			b.Fatalf("create pods: %v", res.err)
		}
		createTime = res.took
	}
	// The watch can show a binding before its call returns to the scheduler: wait for the
	// last calls, so that the counters printed below add up to every pod.
	waitFor(b, time.Minute, "the scheduler's last binding calls to return", func() (bool, string) {
		st := s.Stats()
		return st.Bound+st.Lost >= int64(pods), fmt.Sprintf("%+v", st)
	})
	r.elapsed = elapsed
	r.podsPerS = float64(pods) / elapsed.Seconds()
	mode := "backlog (scheduler started after the creates)"
	if !backlog {
		r.createsPerS = float64(pods) / createTime.Seconds()
		mode = fmt.Sprintf("burst (creating took %v, %.0f creates/s)", createTime.Round(time.Millisecond), r.createsPerS)
	}
	b.Logf("%d hosts, %d nodes, %d pods, %s: all bound in %v = %.0f pods/s; scheduler %+v",
		hosts, nodes, pods, mode, elapsed.Round(time.Millisecond), r.podsPerS, s.Stats())
}

// parallel runs fn(0..n-1) on workers goroutines; it stops at the first error.
func parallel(workers, n int, fn func(i int) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return firstErr != nil }
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || failed() {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// watchBound counts the pods the API shows bound to a node; the channel it returns is
// closed once target pods are.
func watchBound(b *testing.B, c kubernetes.Interface, target int) <-chan struct{} {
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		done = make(chan struct{})
	)
	count := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			mu.Lock()
			if !seen[p.Name] {
				seen[p.Name] = true
				if len(seen) == target {
					close(done)
				}
			}
			mu.Unlock()
		}
	}
	// Only bound pods: the benchmark's own watch costs the API and this process less (no
	// event for a pod's create, no list of the pending backlog).
	f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace("default"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" }))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: count, UpdateFunc: func(_, cur any) { count(cur) }}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	b.Cleanup(func() { close(stop); f.Shutdown() })
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		b.Fatal("pod informer did not sync")
	}
	return done
}
