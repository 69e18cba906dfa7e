package scheduler

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	sched "github.com/flotilla-dev/flotilla/reconciler/scheduler"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type benchResult struct {
	once     sync.Once
	podsPerS float64
	elapsed  time.Duration
}

var benchResults = map[string]*benchResult{"burst": {}, "backlog": {}}

// BenchmarkScheduler measures placement throughput against a real agent (make bench-scheduler):
// FLOTILLA_BENCH_NODES simulated Node objects (default 1000, no agents) and
// FLOTILLA_BENCH_PODS pods (default 10000); FLOTILLA_BENCH_BINDINGS overrides
// Options.BindingsInFlight. Controllers are off so only the scheduler works.
//
//   - burst: the pods are created at once (64 clients) while the scheduler runs; pods/s from
//     the first create to the last committed binding (the figure; it includes the
//     API server's create rate).
//   - backlog: the pods exist before the scheduler starts; pods/s from its start to the last
//     binding (what the scheduler and pods/binding alone sustain).
//
// Each burst is measured once (b.N is ignored: a second burst would measure a fuller cluster).
func BenchmarkScheduler(b *testing.B) {
	for _, mode := range []string{"burst", "backlog"} {
		b.Run(mode, func(b *testing.B) {
			r := benchResults[mode]
			r.once.Do(func() { runSchedulerBench(b, r, mode == "backlog") })
			b.ReportMetric(r.podsPerS, "pods/s")
			b.ReportMetric(r.elapsed.Seconds(), "s/burst")
		})
	}
}

func runSchedulerBench(b *testing.B, r *benchResult, backlog bool) {
	nodes, pods := envInt("FLOTILLA_BENCH_NODES", 1000), envInt("FLOTILLA_BENCH_PODS", 10000)
	a, _ := startAgent(b, "--controllers=")
	cfg := a.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 10000
	c, err := kubernetes.NewForConfig(cfg)
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
	createPods := func() error {
		return parallel(64, pods, func(i int) error {
			_, err := c.CoreV1().Pods("default").Create(context.Background(), testPod(fmt.Sprintf("bench-%05d", i), 100, 64, nil), metav1.CreateOptions{})
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
	bound := watchBound(b, c)

	b.ResetTimer()
	start := time.Now()
	s := startScheduler(b, a.RESTConfig(), sched.Options{BindingsInFlight: envInt("FLOTILLA_BENCH_BINDINGS", 0)})
	if !backlog {
		// The burst measures placing, not the scheduler's first list of the nodes.
		waitFor(b, 2*time.Minute, "the scheduler to see every node", func() (bool, string) {
			n := s.Stats().Nodes
			return n == nodes+1, fmt.Sprintf("%d nodes", n) // + the agent's own (cordoned) host
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
	deadline := time.Now().Add(30 * time.Minute)
	for bound.Load() < int64(pods) {
		select {
		case r := <-createDone:
			if r.err != nil {
				b.Fatalf("create pods: %v", r.err)
			}
			createTime = r.took
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d/%d pods bound after 30 min: %+v", bound.Load(), pods, s.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if !backlog && createTime == 0 {
		createTime = (<-createDone).took
	}
	r.elapsed = elapsed
	r.podsPerS = float64(pods) / elapsed.Seconds()
	mode := "backlog (scheduler started after the creates)"
	if !backlog {
		mode = fmt.Sprintf("burst (creating took %v, %.0f creates/s)", createTime.Round(time.Millisecond), float64(pods)/createTime.Seconds())
	}
	b.Logf("%d nodes, %d pods, %s: all bound in %v = %.0f pods/s; scheduler %+v",
		nodes, pods, mode, elapsed.Round(time.Millisecond), r.podsPerS, s.Stats())
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

// watchBound counts the pods the API shows bound to a node, until the benchmark ends.
func watchBound(b *testing.B, c kubernetes.Interface) *atomic.Int64 {
	var (
		n    atomic.Int64
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	count := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			mu.Lock()
			if !seen[p.Name] {
				seen[p.Name] = true
				n.Add(1)
			}
			mu.Unlock()
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace("default"))
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
	return &n
}
