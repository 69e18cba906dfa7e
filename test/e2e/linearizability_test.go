package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// Linearizability of the API under faults: clients bound to different hosts create, update
// (conditional on resourceVersion), get and delete a few ConfigMaps while a nemesis partitions
// a host and kill -9's a voter; porcupine then checks the history against kvModel
// (linearizability_model_test.go). A request whose answer was lost (timeout, reset
// connection, 5xx) is recorded as unknown: it may have taken effect or not.

const (
	linClients        = 6
	linKeys           = 5
	linNamespace      = "default"
	linRequestTimeout = 3 * time.Second
	// linThink spaces a client's requests: enough operations to exercise every path, few
	// enough that the checker finishes in seconds.
	linThink = 20 * time.Millisecond
)

// TestLinearizability runs the workload for FLOTILLA_LINEARIZABILITY_DURATION (default 60s)
// with one round of faults: a partitioned host, then a killed and restarted voter.
func TestLinearizability(t *testing.T) {
	runLinearizability(t, envDuration(t, "FLOTILLA_LINEARIZABILITY_DURATION", 60*time.Second), time.Minute)
}

// BenchmarkLinearizability is the same for longer (FLOTILLA_LINEARIZABILITY_DURATION, default
// 10m), faults in rounds over every host; make bench-robustness runs it with -benchtime 1x.
func BenchmarkLinearizability(b *testing.B) {
	r := runLinearizability(b, envDuration(b, "FLOTILLA_LINEARIZABILITY_DURATION", 10*time.Minute), 10*time.Minute)
	b.ReportMetric(float64(r.ops), "ops")
	b.ReportMetric(float64(r.faults), "faults")
	b.ReportMetric(float64(r.violations), "violations")
	b.ReportMetric(float64(r.ackWriteP99.Microseconds())/1000, "ms-acked-write-p99")
}

func envDuration(tb testing.TB, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		tb.Fatalf("%s=%q: want a positive duration such as 10m", name, v)
	}
	return d
}

// linRecord is one request as the client saw it. sent is false for a request that never left
// the client (the host refused the connection): it cannot have had an effect.
type linRecord struct {
	proc      int // porcupine's ClientId: a new one after each unknown answer
	host      string
	in        kvInput
	out       kvOutput
	call, ret int64 // ns since the start
	sent      bool
	err       string
}

type linHistory struct {
	start time.Time
	mu    sync.Mutex
	recs  []linRecord
	procs int
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *linHistory) add(r linRecord) {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
}

func (h *linHistory) newProc() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.procs++
	return h.procs - 1
}

// linClient issues requests to one host's API without client-go's retries, so every answer
// is the answer to one request.
type linClient struct {
	host string
	rc   rest.Interface
}

func newLinClient(tb testing.TB, host, kubeconfig, server string) *linClient {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Host = server
	cfg.QPS, cfg.Burst = 1000, 1000
	cfg.Timeout = linRequestTimeout
	return &linClient{host: host, rc: kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient()}
}

// do sends one request and classifies its answer.
func (c *linClient) do(in kvInput) (out kvOutput, sent bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), linRequestTimeout)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: in.Key, Namespace: linNamespace, ResourceVersion: in.RV},
		Data: map[string]string{"v": in.Data}}
	var got corev1.ConfigMap
	switch in.Op {
	case opCreate:
		err = c.rc.Post().Namespace(linNamespace).Resource("configmaps").Body(cm).MaxRetries(0).Do(ctx).Into(&got)
	case opUpdate:
		err = c.rc.Put().Namespace(linNamespace).Resource("configmaps").Name(in.Key).Body(cm).MaxRetries(0).Do(ctx).Into(&got)
	case opGet:
		// No resourceVersion: a quorum read from etcd, not the watch cache.
		err = c.rc.Get().Namespace(linNamespace).Resource("configmaps").Name(in.Key).MaxRetries(0).Do(ctx).Into(&got)
	case opDelete:
		err = c.rc.Delete().Namespace(linNamespace).Resource("configmaps").Name(in.Key).MaxRetries(0).Do(ctx).Error()
	}
	switch {
	case err == nil:
		out = kvOutput{Result: resOK}
		if in.Op != opDelete {
			out.Data, out.RV = got.Data["v"], got.ResourceVersion
		}
	case in.Op == opCreate && apierrors.IsAlreadyExists(err):
		out.Result = resExists
	case in.Op == opUpdate && apierrors.IsConflict(err):
		out.Result = resConflict
	case in.Op != opCreate && apierrors.IsNotFound(err):
		out.Result = resNotFound
	case notSent(err):
		return kvOutput{Result: resUnknown}, false, err
	default:
		out.Result = resUnknown
	}
	return out, true, err
}

// notSent reports an error from before the request was written: no connection.
func notSent(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// run issues random requests until stop is closed.
func (c *linClient) run(id int, h *linHistory, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(id)))
	known := map[string]string{} // key -> the resourceVersion this client saw last
	proc := h.newProc()
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		key := fmt.Sprintf("lin-%d", rng.IntN(linKeys))
		in := kvInput{Op: opGet, Key: key}
		switch p := rng.IntN(100); {
		case p < 40:
		case p < 70:
			if rv, ok := known[key]; ok {
				in = kvInput{Op: opUpdate, Key: key, RV: rv}
			}
		case p < 85:
			in.Op = opCreate
		default:
			in.Op = opDelete
		}
		if in.Op == opCreate || in.Op == opUpdate {
			in.Data = fmt.Sprintf("c%d-%d", id, seq) // unique: a read names the write it saw
		}
		call := h.now()
		out, sent, err := c.do(in)
		r := linRecord{proc: proc, host: c.host, in: in, out: out, call: call, ret: h.now(), sent: sent}
		if err != nil {
			r.err = err.Error()
		}
		h.add(r)
		switch {
		case out.Result == resOK && in.Op != opDelete:
			known[key] = out.RV
		case out.Result == resNotFound, out.Result == resConflict, out.Result == resOK:
			delete(known, key) // read it again before the next update
		case out.Result == resUnknown && sent:
			delete(known, key)
			proc = h.newProc() // its operation stays open to the end
		}
		if !sent {
			time.Sleep(100 * time.Millisecond) // the host is down: no need to count every refusal
		}
		time.Sleep(time.Duration(rng.Int64N(int64(2 * linThink))))
	}
}

// linFault is one fault the nemesis injected, for the figures.
type linFault struct {
	at, took time.Duration
	what     string
}

// nemesis injects faults in rounds until deadline (at least one round): partition a host for
// 15s and heal it, then kill -9 another and restart it, waiting until its API answers. It
// leaves every host up and connected.
func nemesis(s *devsite.Site, h *linHistory, deadline time.Time) ([]linFault, error) {
	var faults []linFault
	const roundTook = 45 * time.Second // about: 5+15+5 s, plus a restart
	for round := 0; round == 0 || time.Until(deadline) > roundTook; round++ {
		time.Sleep(5 * time.Second)
		iso := s.Hosts[(round+1)%len(s.Hosts)]
		at := time.Since(h.start)
		if err := iso.Partition(); err != nil {
			iso.Heal()
			return faults, fmt.Errorf("partition %s: %w", iso.Name, err)
		}
		time.Sleep(15 * time.Second)
		iso.Heal()
		faults = append(faults, linFault{at: at, took: time.Since(h.start) - at, what: "partition " + iso.Name})
		time.Sleep(5 * time.Second)

		victim := s.Hosts[(round+2)%len(s.Hosts)]
		at = time.Since(h.start)
		victim.Kill()
		time.Sleep(5 * time.Second)
		if err := victim.Restart(); err != nil {
			return faults, fmt.Errorf("restart %s: %w", victim.Name, err)
		}
		if err := waitAPI(victim, 2*time.Minute); err != nil {
			return faults, err
		}
		faults = append(faults, linFault{at: at, took: time.Since(h.start) - at, what: "kill -9 " + victim.Name})
	}
	time.Sleep(time.Until(deadline))
	return faults, nil
}

// waitAPI waits until a (re)started host's API reads from etcd: a quorum GET of a Namespace.
func waitAPI(h *devsite.Host, timeout time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", h.Kubeconfig())
	if err != nil {
		return err
	}
	cfg.Host = "https://" + h.IP + ":6443"
	cfg.Timeout = 2 * time.Second
	c := kubernetes.NewForConfigOrDie(cfg)
	end := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s: API not answering %s after a restart: %v", h.Name, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// linResult are the figures of a run.
type linResult struct {
	ops, faults, violations int
	ackWriteP99             time.Duration
}

func runLinearizability(tb testing.TB, duration, checkTimeout time.Duration) linResult {
	s := newSite(tb, 3)
	took := startSite(tb, s)
	tb.Logf("site of 3 hosts ready in %s; workload %s, %d clients over %d keys", took.Round(100*time.Millisecond), duration, linClients, linKeys)
	clients := make([]*linClient, linClients)
	for i := range clients {
		h := s.Hosts[i%len(s.Hosts)]
		clients[i] = newLinClient(tb, h.Name, h.Kubeconfig(), "https://"+h.IP+":6443")
	}

	h := &linHistory{start: time.Now()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); c.run(i, h, stop) }()
	}
	faults, nemesisErr := nemesis(s, h, h.start.Add(duration))
	close(stop)
	wg.Wait()
	if nemesisErr != nil {
		tb.Fatal(nemesisErr)
	}
	// Last, read every key through every host, after the faults: acknowledged writes must
	// have survived and every host must agree.
	for _, c := range clients[:len(s.Hosts)] {
		for k := 0; k < linKeys; k++ {
			in := kvInput{Op: opGet, Key: fmt.Sprintf("lin-%d", k)}
			end := time.Now().Add(30 * time.Second)
			for {
				call := h.now()
				out, _, err := c.do(in)
				if out.Result != resUnknown {
					h.add(linRecord{proc: h.newProc(), host: c.host, in: in, out: out, call: call, ret: h.now(), sent: true})
					break
				}
				if time.Now().After(end) {
					tb.Fatalf("final read of %s through %s: %v", in.Key, c.host, err)
				}
				time.Sleep(500 * time.Millisecond)
			}
		}
	}
	return checkLinearizability(tb, h, faults, checkTimeout)
}

func checkLinearizability(tb testing.TB, h *linHistory, faults []linFault, timeout time.Duration) linResult {
	// counts[op][result], and notSent[op]: requests that never reached a server.
	counts := map[kvOp]map[kvResult]int{}
	notSent := map[kvOp]int{}
	var history []porcupine.Operation
	var ackWrites []time.Duration
	for _, r := range h.recs {
		if !r.sent {
			notSent[r.in.Op]++
			continue // no effect
		}
		if counts[r.in.Op] == nil {
			counts[r.in.Op] = map[kvResult]int{}
		}
		counts[r.in.Op][r.out.Result]++
		switch {
		case r.out.Result == resOK && r.in.Op != opGet:
			ackWrites = append(ackWrites, time.Duration(r.ret-r.call))
		case r.out.Result == resUnknown && r.in.Op == opGet:
			continue // a read without an answer constrains nothing
		case r.out.Result == resUnknown:
			r.ret = unknownReturn
		}
		meta := r.host
		if r.err != "" {
			meta += ": " + r.err
		}
		history = append(history, porcupine.Operation{ClientId: r.proc, Input: r.in, Call: r.call, Output: r.out, Return: r.ret, Metadata: meta})
	}
	var lines []string
	total := 0
	for _, op := range []kvOp{opCreate, opUpdate, opGet, opDelete} {
		var parts []string
		for _, res := range []kvResult{resOK, resExists, resConflict, resNotFound, resUnknown} {
			if n := counts[op][res]; n > 0 {
				total += n
				parts = append(parts, fmt.Sprintf("%d %s", n, res))
			}
		}
		if n := notSent[op]; n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%d not sent", n))
		}
		lines = append(lines, op.String()+" "+strings.Join(parts, ", "))
	}
	framework.Figure(tb, "%d operations: %s", total, strings.Join(lines, "; "))
	// Each fault with the writes each host acknowledged meanwhile: evidence that it bit (the
	// host cut off or killed acknowledges none).
	var fl []string
	for _, f := range faults {
		acked := map[string]int{}
		for _, r := range h.recs {
			if r.in.Op != opGet && r.out.Result == resOK && r.call >= int64(f.at) && r.ret <= int64(f.at+f.took) {
				acked[r.host]++
			}
		}
		var by []string
		for _, host := range hostNames(h.recs) {
			by = append(by, fmt.Sprintf("%s %d", host, acked[host]))
		}
		fl = append(fl, fmt.Sprintf("%s at %s for %s (writes acknowledged: %s)", f.what, f.at.Round(time.Second),
			f.took.Round(100*time.Millisecond), strings.Join(by, ", ")))
	}
	framework.Figure(tb, "%d faults injected: %s", len(faults), strings.Join(fl, "; "))
	res := linResult{ops: total, faults: len(faults)}
	if len(ackWrites) > 0 {
		sort.Slice(ackWrites, func(i, j int) bool { return ackWrites[i] < ackWrites[j] })
		res.ackWriteP99 = ackWrites[len(ackWrites)*99/100]
		framework.Figure(tb, "%d acknowledged writes: latency p50 %s, p99 %s, max %s", len(ackWrites),
			ackWrites[len(ackWrites)/2].Round(100*time.Microsecond), res.ackWriteP99.Round(100*time.Microsecond), ackWrites[len(ackWrites)-1].Round(time.Millisecond))
	}
	if len(ackWrites) < 50 {
		tb.Errorf("only %d writes acknowledged: the workload did not run", len(ackWrites))
	}

	start := time.Now()
	result, info := porcupine.CheckOperationsVerbose(kvModel, history, timeout)
	if result == porcupine.Illegal {
		// Which keys: each is a history of its own.
		for _, part := range kvModel.Partition(history) {
			if porcupine.CheckOperationsTimeout(kvModel, part, timeout) == porcupine.Illegal {
				res.violations++
			}
		}
	}
	framework.Figure(tb, "linearizability %s: %d violations (keys) in %d operations checked in %s", result, res.violations, len(history), time.Since(start).Round(time.Millisecond))
	if result != porcupine.Ok {
		dir, prefix := linLogDir(tb), strings.ReplaceAll(tb.Name(), "/", "_")
		viz := filepath.Join(dir, prefix+"-linearizability.html")
		var notes []porcupine.Annotation
		for _, f := range faults {
			notes = append(notes, porcupine.Annotation{Tag: "nemesis", Start: int64(f.at), End: int64(f.at + f.took), Description: f.what})
		}
		info.AddAnnotations(notes)
		if err := porcupine.VisualizePath(kvModel, info, viz); err != nil {
			tb.Logf("write the visualization: %v", err)
		}
		hist := filepath.Join(dir, prefix+"-history.json")
		if b, err := json.MarshalIndent(history, "", " "); err == nil {
			_ = os.WriteFile(hist, b, 0o644)
		}
		if result == porcupine.Illegal {
			tb.Errorf("the history is not linearizable: %d keys violate the model; visualization %s, history %s", res.violations, viz, hist)
		} else {
			tb.Errorf("the checker did not decide within %s; partial visualization %s, history %s", timeout, viz, hist)
		}
	}
	return res
}

func hostNames(recs []linRecord) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range recs {
		if !seen[r.host] {
			seen[r.host] = true
			out = append(out, r.host)
		}
	}
	sort.Strings(out)
	return out
}

// linLogDir is where a failed check leaves its files: FLOTILLA_E2E_LOGS if set (where the
// hosts' logs go too), else a new temporary folder that outlives the test.
func linLogDir(tb testing.TB) string {
	if dir := os.Getenv("FLOTILLA_E2E_LOGS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err == nil {
			return dir
		}
	}
	dir, err := os.MkdirTemp("", "flotilla-linearizability-")
	if err != nil {
		tb.Logf("no folder for the check's files: %v", err)
		return os.TempDir()
	}
	return dir
}
