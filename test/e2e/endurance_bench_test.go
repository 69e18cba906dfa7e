package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// BenchmarkIdleWrites measures the write budget of an idle site (make bench-endurance runs it
// with -benchtime 1x): 3 hosts run FLOTILLA_ENDURANCE_PODS pods (default 20) and nothing
// changes; after FLOTILLA_ENDURANCE_SETTLE (default 60 s) it counts, over
// FLOTILLA_ENDURANCE_WINDOW (default 10m), the bytes each host sends to storage: write_bytes
// minus cancelled_write_bytes of /proc/PID/io of the agent (etcd, the API server, the
// controllers and its own log are in that process), of its containerd and of the
// containerd-shims of its pods. Per host it prints bytes/s and bytes per idle hour, and a
// breakdown: the agent, containerd, the shims, the growth of the agent's and containerd's
// logs, and the etcd writes (raft entries and key revisions of the site, and which keys
// were written).
func BenchmarkIdleWrites(b *testing.B) {
	window := envDuration(b, "FLOTILLA_ENDURANCE_WINDOW", 10*time.Minute)
	settle := envDuration(b, "FLOTILLA_ENDURANCE_SETTLE", 60*time.Second)
	pods := envInt("FLOTILLA_ENDURANCE_PODS", 20)
	s := newSite(b, 3)
	sideLoad(b, s)
	startSite(b, s)
	c := clientOf(b, s.Hosts[0])
	waitFor(b, 2*time.Minute, "3 Ready nodes", func() (bool, string) {
		n, state := readyNodes(s.Hosts[0])
		return n == 3, state
	})
	idle := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(pods)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "idle"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "idle"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(1)),
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
						WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "idle"}}}},
					Containers: []corev1.Container{{Name: "sleep", Image: toolbox, ImagePullPolicy: corev1.PullIfNotPresent,
						Args: []string{"sleep", "inf"},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("4Mi")}}}},
				},
			},
		},
	}
	if _, err := c.AppsV1().Deployments("default").Create(context.Background(), idle, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 10*time.Minute, fmt.Sprintf("%d idle pods available", pods), func() (bool, string) {
		n, state := availableReplicas(c, "default", "idle")
		return n == int32(pods), state
	})
	b.Logf("%d pods available; settling for %s, then measuring for %s", pods, settle, window)
	time.Sleep(settle)

	ec := etcdClient(b, s.Hosts[0])
	before := make([]hostWrites, len(s.Hosts))
	for i, h := range s.Hosts {
		before[i] = measureHost(h)
	}
	st0 := etcdStatus(b, ec, s.Hosts[0])
	b.ResetTimer()
	time.Sleep(window)
	b.StopTimer()
	after := make([]hostWrites, len(s.Hosts))
	for i, h := range s.Hosts {
		after[i] = measureHost(h)
	}
	st1 := etcdStatus(b, ec, s.Hosts[0])
	secs := window.Seconds()

	var worst float64
	for i, h := range s.Hosts {
		d := after[i].minus(before[i])
		perS := float64(d.total()) / secs
		worst = max(worst, perS)
		framework.Figure(b, "idle %s (%d pods on the site): %.0f B/s written, %.1f MB per idle hour: agent %.0f B/s (its log %.0f B/s), containerd %.0f B/s (its log %.0f B/s), %d shims %.0f B/s; etcd data dir %+d kB",
			h.Name, pods, perS, perS*3600/1e6, float64(d.agent)/secs, float64(d.agentLog)/secs,
			float64(d.containerd)/secs, float64(d.containerdLog)/secs, after[i].shims, float64(d.shimBytes)/secs, d.etcdDir/1024)
		b.ReportMetric(perS, "B/s-"+h.Name)
		b.ReportMetric(perS*3600/1e6, "MB/h-"+h.Name)
		if after[i].containerdPID == 0 {
			b.Logf("%s: no containerd started by the agent found (not counted)", h.Name)
		}
		if before[i].agentPID != after[i].agentPID || before[i].containerdPID != after[i].containerdPID {
			b.Errorf("%s: a process was restarted during the window (agent %d -> %d, containerd %d -> %d): the figures are not comparable",
				h.Name, before[i].agentPID, after[i].agentPID, before[i].containerdPID, after[i].containerdPID)
		}
	}
	b.ReportMetric(worst, "B/s-max-host")
	entries := float64(st1.RaftIndex-st0.RaftIndex) / secs
	revs := float64(st1.Header.Revision-st0.Header.Revision) / secs
	framework.Figure(b, "idle site etcd: %.2f raft entries/s, %.2f key revisions/s (db %d kB, in use %d kB)",
		entries, revs, st1.DbSize/1024, st1.DbSizeInUse/1024)
	b.ReportMetric(entries, "etcd-entries/s")
	b.ReportMetric(revs, "etcd-revisions/s")
	writtenKeys(b, ec, st0.Header.Revision, st1.Header.Revision, secs)
}

// hostWrites are a host's byte counters at one moment.
type hostWrites struct {
	agentPID, containerdPID int
	agent, containerd       int64
	shims                   int
	shimBytes               int64
	agentLog, containerdLog int64 // sizes
	etcdDir                 int64 // bytes used by DATA_DIR/etcd
}

func (w hostWrites) total() int64 { return w.agent + w.containerd + w.shimBytes }

func (w hostWrites) minus(o hostWrites) hostWrites {
	return hostWrites{agent: w.agent - o.agent, containerd: w.containerd - o.containerd, shims: w.shims,
		shimBytes: max(0, w.shimBytes-o.shimBytes), agentLog: w.agentLog - o.agentLog,
		containerdLog: w.containerdLog - o.containerdLog, etcdDir: w.etcdDir - o.etcdDir}
}

// measureHost reads the counters of h's agent, its containerd (the one it started, under
// DATA_DIR/containerd, found by its pid file: an agent restarted adopts it) and the shims of
// its pods (their command lines name the socket there).
func measureHost(h *devsite.Host) hostWrites {
	w := hostWrites{agentPID: h.PID()}
	w.agent = writeBytes(w.agentPID)
	if b, err := os.ReadFile(filepath.Join(h.DataDir, "containerd", "containerd.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && comm(pid) == "containerd" {
			w.containerdPID = pid
			w.containerd = writeBytes(pid)
		}
	}
	for _, pid := range pidsWithArg(h.DataDir + "/") {
		if strings.HasPrefix(comm(pid), "containerd-shim") {
			w.shims++
			w.shimBytes += writeBytes(pid)
		}
	}
	w.agentLog = fileSize(h.LogFile())
	logs, _ := filepath.Glob(filepath.Join(h.DataDir, "containerd", "containerd.log*"))
	for _, l := range logs {
		w.containerdLog += fileSize(l)
	}
	w.etcdDir = duBytes(filepath.Join(h.DataDir, "etcd"))
	return w
}

// writeBytes is what a process caused to be sent to storage: write_bytes less the
// cancelled_write_bytes of pages truncated before they were written back.
func writeBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	var wr, cancelled int64
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "write_bytes":
			wr = n
		case "cancelled_write_bytes":
			cancelled = n
		}
	}
	return wr - cancelled
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// duBytes is the disk space the files under dir use (WAL segments are preallocated: it moves
// only when a segment or a snapshot is added or removed, or the database file grows).
func duBytes(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

func etcdStatus(b *testing.B, ec *clientv3.Client, h *devsite.Host) *clientv3.StatusResponse {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := ec.Status(ctx, "https://"+h.IP+":2379")
	if err != nil {
		b.Fatalf("etcd status of %s: %v", h.Name, err)
	}
	return st
}

// writtenKeys prints which keys were written between two revisions, most bytes first (a key
// of a namespaced object is shown as resource/namespace/name).
func writtenKeys(b *testing.B, ec *clientv3.Client, from, to int64, secs float64) {
	if to <= from {
		return
	}
	type tally struct {
		key          string
		writes, size int
	}
	byKey := map[string]*tally{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wc := ec.Watch(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(from+1), clientv3.WithPrevKV())
	done := false
	for resp := range wc {
		if err := resp.Err(); err != nil {
			b.Logf("watch the written keys: %v", err)
			return
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > to {
				done = true
				break
			}
			k := strings.TrimPrefix(string(ev.Kv.Key), "/registry/")
			t := byKey[k]
			if t == nil {
				t = &tally{key: k}
				byKey[k] = t
			}
			t.writes++
			t.size += len(ev.Kv.Key) + len(ev.Kv.Value)
			if ev.Kv.ModRevision == to {
				done = true
			}
		}
		if done {
			break
		}
	}
	var all []*tally
	for _, t := range byKey {
		all = append(all, t)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].size > all[j].size })
	b.Logf("keys written in the window (%d keys), most bytes first:", len(all))
	for i, t := range all {
		if i == 15 {
			break
		}
		b.Logf("  %-70s %6.2f writes/min %8.0f B/s of keys+values", t.key, float64(t.writes)*60/secs, float64(t.size)/secs)
	}
}
