package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/nodes/agent/stats"
	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// fakeHost is a cgroup v2 tree and a /proc in a temporary directory.
type fakeHost struct {
	t          *testing.T
	cgroupRoot string
	procRoot   string
}

func newFakeHost(t *testing.T) *fakeHost {
	h := &fakeHost{t: t, cgroupRoot: t.TempDir(), procRoot: t.TempDir()}
	h.write(filepath.Join(h.cgroupRoot, "cgroup.controllers"), "cpu memory pids")
	return h
}

func (h *fakeHost) write(path, content string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// container sets a container's cumulative CPU time and its memory.
func (h *fakeHost) container(id string, cpuUsec, current, inactiveFile uint64) {
	dir := filepath.Join(h.cgroupRoot, "flotilla", "host-1", id)
	h.write(filepath.Join(dir, "cpu.stat"), fmt.Sprintf("usage_usec %d\nuser_usec %d\nsystem_usec 0\n", cpuUsec, cpuUsec))
	h.write(filepath.Join(dir, "memory.current"), fmt.Sprintf("%d\n", current))
	h.write(filepath.Join(dir, "memory.stat"), fmt.Sprintf("anon %d\ninactive_file %d\n", current-inactiveFile, inactiveFile))
}

// node sets the host's busy CPU ticks (all in user) and its memory in kB.
func (h *fakeHost) node(busyTicks, totalKB, freeKB, inactiveFileKB uint64) {
	h.write(filepath.Join(h.procRoot, "stat"), fmt.Sprintf("cpu  %d 0 0 99999 0 0 0 0 0 0\n", busyTicks))
	h.write(filepath.Join(h.procRoot, "meminfo"), fmt.Sprintf("MemTotal: %d kB\nMemFree: %d kB\nInactive(file): %d kB\n", totalKB, freeKB, inactiveFileKB))
}

func runningContainer(id, podUID, ns, pod, name string, started time.Time) rt.ContainerStatus {
	return rt.ContainerStatus{ID: id, State: rt.StateRunning, StartedAt: started, Labels: map[string]string{
		labelPodUID: podUID, labelPodNamespace: ns, labelPodName: pod, labelContainer: name}}
}

// TestStatsSummary samples the counters, advances them and checks the summary: rates over
// the window since the newest reading at least 10 s old, a container started since then rated
// from its start, working sets, and pods summed over their containers.
func TestStatsSummary(t *testing.T) {
	h := newFakeHost(t)
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	containers := []rt.ContainerStatus{
		runningContainer("web-app", "uid-web", "shop", "web-0", "app", t0.Add(-time.Hour)),
		runningContainer("web-log", "uid-web", "shop", "web-0", "log", t0.Add(-time.Hour)),
		runningContainer("db-main", "uid-db", "data", "db-0", "main", t0.Add(-time.Hour)),
	}
	c := &statsCollector{
		node: "host-1", cgroups: stats.Cgroups{Root: h.cgroupRoot}, procRoot: h.procRoot,
		history: &stats.History{MinWindow: statsMinWindow, MaxAge: statsMaxAge},
		running: func(context.Context) ([]rt.ContainerStatus, error) { return containers, nil },
		cgroupOf: func(id string) string {
			return "/flotilla/host-1/" + id
		},
		now: func() time.Time { return now },
		log: logrus.NewEntry(logrus.StandardLogger()),
	}
	ctx := context.Background()

	h.node(1000, 8_000_000, 2_000_000, 1_000_000)
	h.container("web-app", 1_000_000, 300<<20, 100<<20)
	h.container("web-log", 500_000, 20<<20, 0)
	h.container("db-main", 0, 50<<20, 10<<20)
	sum, err := c.summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Node.CPU == nil || sum.Node.CPU.UsageNanoCores != nil {
		t.Fatalf("before any sample: node CPU %+v, want a counter without rate", sum.Node.CPU)
	}
	if err := c.sample(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ { // samples at 5, 10, 15 s: the web app uses half a core
		now = t0.Add(time.Duration(i) * statsInterval)
		h.node(1000+uint64(i)*500, 8_000_000, 2_000_000, 1_000_000) // 1.0 core: 100 ticks/s
		h.container("web-app", 1_000_000+uint64(i)*2_500_000, 300<<20, 100<<20)
		h.container("web-log", 500_000+uint64(i)*50_000, 20<<20, 0)
		h.container("db-main", uint64(i)*5_000_000, 50<<20, 10<<20)
		if err := c.sample(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// At 17 s: 2 s since the last sample; the baseline is the reading at 5 s.
	now = t0.Add(17 * time.Second)
	h.node(1000+1700, 8_000_000, 2_000_000, 1_000_000)
	h.container("web-app", 1_000_000+8_500_000, 300<<20, 100<<20)
	h.container("web-log", 500_000+170_000, 20<<20, 0)
	h.container("db-main", 17_000_000, 50<<20, 10<<20)
	h.container("db-new", 3_000_000, 8<<20, 0) // started at 14 s
	containers = append(containers, runningContainer("db-new", "uid-db", "data", "db-0", "helper", t0.Add(14*time.Second)))

	sum, err = c.summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	window := 12 * time.Second
	checkCPU := func(what string, s *stats.CPUStats, wantNanoCores uint64, wantWindow time.Duration) {
		t.Helper()
		if s == nil || s.UsageNanoCores == nil {
			t.Errorf("%s: CPU %+v, want a rate", what, s)
			return
		}
		if d := int64(*s.UsageNanoCores) - int64(wantNanoCores); d < -1000 || d > 1000 {
			t.Errorf("%s: %d nanocores, want %d", what, *s.UsageNanoCores, wantNanoCores)
		}
		if s.Window.Duration != wantWindow || !s.Time.Equal(now) {
			t.Errorf("%s: window %v at %v, want %v at %v", what, s.Window.Duration, s.Time, wantWindow, now)
		}
	}
	if sum.Node.NodeName != "host-1" {
		t.Errorf("node name %q", sum.Node.NodeName)
	}
	checkCPU("node", sum.Node.CPU, 1_000_000_000, window)
	if m := sum.Node.Memory; m == nil || m.UsageBytes != 6_000_000*1024 || m.WorkingSetBytes != 5_000_000*1024 {
		t.Errorf("node memory %+v, want usage %d, working set %d", m, 6_000_000*1024, 5_000_000*1024)
	}
	if len(sum.Pods) != 2 || sum.Pods[0].PodRef != (stats.PodReference{Name: "db-0", Namespace: "data", UID: "uid-db"}) ||
		sum.Pods[1].PodRef.Name != "web-0" {
		t.Fatalf("pods %+v, want data/db-0 and shop/web-0", sum.Pods)
	}
	db, web := sum.Pods[0], sum.Pods[1]
	if len(web.Containers) != 2 || web.Containers[0].Name != "app" || web.Containers[1].Name != "log" {
		t.Fatalf("web-0 containers %+v", web.Containers)
	}
	checkCPU("web-0/app", web.Containers[0].CPU, 500_000_000, window)
	checkCPU("web-0/log", web.Containers[1].CPU, 10_000_000, window)
	checkCPU("web-0", web.CPU, 510_000_000, window)
	if m := web.Containers[0].Memory; m == nil || m.WorkingSetBytes != 200<<20 || m.UsageBytes != 300<<20 {
		t.Errorf("web-0/app memory %+v, want working set 200Mi of 300Mi", m)
	}
	if web.Memory == nil || web.Memory.WorkingSetBytes != 220<<20 {
		t.Errorf("web-0 memory %+v, want working set 220Mi", web.Memory)
	}
	if len(db.Containers) != 2 || db.Containers[0].Name != "helper" {
		t.Fatalf("db-0 containers %+v", db.Containers)
	}
	// helper started at 14 s, 3 s ago, and used 3 s of CPU time: one core.
	checkCPU("db-0/helper", db.Containers[0].CPU, 1_000_000_000, 3*time.Second)
	checkCPU("db-0/main", db.Containers[1].CPU, 1_000_000_000, window)
	checkCPU("db-0", db.CPU, 2_000_000_000, 3*time.Second)

	// Served as JSON on the agent endpoint.
	m := &PodManager{stats: c}
	rec := httptest.NewRecorder()
	m.serveStats(rec, httptest.NewRequest(http.MethodGet, stats.SummaryPath, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", stats.SummaryPath, rec.Code, rec.Body)
	}
	var got stats.Summary
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Pods) != 2 || got.Pods[1].CPU == nil || got.Pods[1].CPU.UsageNanoCores == nil ||
		*got.Pods[1].CPU.UsageNanoCores != *web.CPU.UsageNanoCores || got.Pods[1].CPU.Window.Duration != window {
		t.Errorf("decoded summary %+v does not match", got.Pods)
	}
}
