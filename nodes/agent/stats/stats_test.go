package stats

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const cgroupPath = "/flotilla/host-1/abc123"

// TestCgroupV2 reads a container's counters from a unified hierarchy: CPU from cpu.stat
// usage_usec, the working set as memory.current less memory.stat inactive_file.
func TestCgroupV2(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "cgroup.controllers"), "cpuset cpu io memory pids\n")
	dir := filepath.Join(root, cgroupPath)
	writeFile(t, filepath.Join(dir, "cpu.stat"), "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 0\n")
	writeFile(t, filepath.Join(dir, "memory.current"), "104857600\n")
	writeFile(t, filepath.Join(dir, "memory.stat"), "anon 73400320\nfile 31457280\nactive_file 10485760\ninactive_file 20971520\n")

	c := Cgroups{Root: root}
	if !c.V2() {
		t.Fatal("V2() = false with cgroup.controllers at the root")
	}
	cpu, err := c.CPU(cgroupPath)
	if err != nil {
		t.Fatal(err)
	}
	if cpu != 2_500_000_000 {
		t.Errorf("CPU = %d ns, want 2500000000 (usage_usec 2500000)", cpu)
	}
	usage, ws, err := c.Memory(cgroupPath)
	if err != nil {
		t.Fatal(err)
	}
	if usage != 104857600 || ws != 104857600-20971520 {
		t.Errorf("Memory = usage %d, working set %d; want 104857600, %d", usage, ws, 104857600-20971520)
	}
	if _, err := c.CPU("/flotilla/host-1/gone"); err == nil {
		t.Error("CPU of a missing cgroup: no error")
	}
	if _, _, err := c.Memory("/flotilla/host-1/gone"); err == nil {
		t.Error("Memory of a missing cgroup: no error")
	}
}

// TestCgroupV1 falls back to the cpuacct and memory controllers of cgroup v1.
func TestCgroupV1(t *testing.T) {
	for _, cpuDir := range []string{"cpuacct", "cpu,cpuacct"} {
		t.Run(cpuDir, func(t *testing.T) {
			root := t.TempDir()
			writeFile(t, filepath.Join(root, cpuDir, cgroupPath, "cpuacct.usage"), "123456789\n")
			writeFile(t, filepath.Join(root, "memory", cgroupPath, "memory.usage_in_bytes"), "50000000\n")
			writeFile(t, filepath.Join(root, "memory", cgroupPath, "memory.stat"), "cache 1000\ninactive_file 7\ntotal_inactive_file 10000000\n")
			c := Cgroups{Root: root}
			if c.V2() {
				t.Fatal("V2() = true without cgroup.controllers")
			}
			cpu, err := c.CPU(cgroupPath)
			if err != nil || cpu != 123456789 {
				t.Errorf("CPU = %d, %v; want 123456789", cpu, err)
			}
			usage, ws, err := c.Memory(cgroupPath)
			if err != nil || usage != 50000000 || ws != 40000000 {
				t.Errorf("Memory = %d, %d, %v; want 50000000, 40000000 (total_inactive_file)", usage, ws, err)
			}
		})
	}
}

func TestWorkingSetNeverNegative(t *testing.T) {
	if got := WorkingSet(100, 200); got != 0 {
		t.Errorf("WorkingSet(100, 200) = %d, want 0", got)
	}
}

func TestParseCPUStatErrors(t *testing.T) {
	if _, err := ParseCPUStat([]byte("user_usec 5\n")); err == nil {
		t.Error("cpu.stat without usage_usec: no error")
	}
}

// TestNodeProc reads the host's figures from a /proc copy: busy time is user + nice + system
// + irq + softirq + steal ticks, working set MemTotal - MemFree - Inactive(file).
func TestNodeProc(t *testing.T) {
	proc := t.TempDir()
	writeFile(t, filepath.Join(proc, "stat"), "cpu  100 20 30 5000 40 5 6 7 8 9\ncpu0 50 10 15 2500 20 2 3 3 4 4\nintr 1 2 3\n")
	writeFile(t, filepath.Join(proc, "meminfo"), "MemTotal:       16000000 kB\nMemFree:         4000000 kB\nMemAvailable:   10000000 kB\nInactive(file):  3000000 kB\n")

	cpu, err := NodeCPU(proc)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(100+20+30+5+6+7) * 10_000_000; cpu != want {
		t.Errorf("NodeCPU = %d, want %d", cpu, want)
	}
	usage, ws, err := NodeMemory(proc)
	if err != nil {
		t.Fatal(err)
	}
	if usage != 12000000*1024 || ws != 9000000*1024 {
		t.Errorf("NodeMemory = %d, %d; want %d, %d", usage, ws, 12000000*1024, 9000000*1024)
	}

	writeFile(t, filepath.Join(proc, "stat"), "intr 1 2 3\n")
	if _, err := NodeCPU(proc); err == nil {
		t.Error("/proc/stat without a cpu line: no error")
	}
	writeFile(t, filepath.Join(proc, "meminfo"), "MemAvailable: 1 kB\n")
	if _, _, err := NodeMemory(proc); err == nil {
		t.Error("/proc/meminfo without MemTotal: no error")
	}
}

// TestBaseline picks the newest reading at least MinWindow old, or while there is none the
// oldest at least a second old, and forgets readings older than MaxAge.
func TestBaseline(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	h := &History{MinWindow: 10 * time.Second, MaxAge: 30 * time.Second}
	if _, ok := h.Baseline(t0); ok {
		t.Fatal("baseline without readings")
	}
	h.Add(Reading{Time: t0, Node: 1})
	if _, ok := h.Baseline(at(0.5)); ok {
		t.Error("a reading half a second old served as baseline")
	}
	if r, ok := h.Baseline(at(2)); !ok || !r.Time.Equal(t0) {
		t.Errorf("Baseline(2s) = %v, %v; want the reading at 0s", r.Time, ok)
	}
	for s := 5; s <= 40; s += 5 {
		h.Add(Reading{Time: at(float64(s)), Node: uint64(s)})
	}
	cases := []struct {
		now  float64
		want float64
	}{
		{41, 30}, // 35 is only 6 s old
		{45, 35},
		{49.9, 35},
	}
	for _, c := range cases {
		r, ok := h.Baseline(at(c.now))
		if !ok || !r.Time.Equal(at(c.want)) {
			t.Errorf("Baseline(%vs) = %v, %v; want the reading at %vs", c.now, r.Time.Sub(t0), ok, c.want)
		}
	}
	h.mu.Lock()
	oldest := h.readings[0].Time
	h.mu.Unlock()
	if !oldest.Equal(at(10)) {
		t.Errorf("oldest kept reading at %v, want 10s (MaxAge 30s before 40s)", oldest.Sub(t0))
	}
}

func TestSetRate(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name       string
		cur, prev  uint64
		window     time.Duration
		want       uint64
		wantRated  bool
		wantWindow time.Duration
	}{
		{"half a core over 10s", 15_000_000_000, 10_000_000_000, 10 * time.Second, 500_000_000, true, 10 * time.Second},
		{"two cores over 12.5s", 25_000_000_000, 0, 12500 * time.Millisecond, 2_000_000_000, true, 12500 * time.Millisecond},
		{"idle", 7, 7, 15 * time.Second, 0, true, 15 * time.Second},
		{"window too short", 20, 10, 500 * time.Millisecond, 0, false, 0},
		{"counter went backwards", 10, 20, 10 * time.Second, 0, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &CPUStats{Time: t0.Add(c.window), UsageCoreNanoSeconds: c.cur}
			s.SetRate(c.prev, t0)
			if (s.UsageNanoCores != nil) != c.wantRated {
				t.Fatalf("rated = %v, want %v", s.UsageNanoCores != nil, c.wantRated)
			}
			if c.wantRated && *s.UsageNanoCores != c.want {
				t.Errorf("UsageNanoCores = %d, want %d", *s.UsageNanoCores, c.want)
			}
			if s.Window.Duration != c.wantWindow {
				t.Errorf("Window = %v, want %v", s.Window.Duration, c.wantWindow)
			}
		})
	}
}

func TestPodSum(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	rate := func(n uint64) *uint64 { return &n }
	cpu := func(total uint64, r *uint64, window time.Duration) *CPUStats {
		s := &CPUStats{Time: t0, UsageCoreNanoSeconds: total, UsageNanoCores: r}
		if r != nil {
			s.Window = metav1.Duration{Duration: window}
		}
		return s
	}
	mem := func(ws uint64) *MemoryStats { return &MemoryStats{Time: t0, UsageBytes: ws * 2, WorkingSetBytes: ws} }

	p := PodStats{Containers: []ContainerStats{
		{Name: "app", CPU: cpu(100, rate(300), 12*time.Second), Memory: mem(1000)},
		{Name: "sidecar", CPU: cpu(50, rate(20), 3*time.Second), Memory: mem(24)},
	}}
	p.Sum()
	if p.CPU == nil || p.CPU.UsageNanoCores == nil || *p.CPU.UsageNanoCores != 320 || p.CPU.UsageCoreNanoSeconds != 150 {
		t.Fatalf("pod CPU = %+v, want 320 nanocores, 150 ns", p.CPU)
	}
	if p.CPU.Window.Duration != 3*time.Second {
		t.Errorf("pod window = %v, want the shortest, 3s", p.CPU.Window.Duration)
	}
	if p.Memory == nil || p.Memory.WorkingSetBytes != 1024 || p.Memory.UsageBytes != 2048 {
		t.Errorf("pod memory = %+v, want working set 1024, usage 2048", p.Memory)
	}

	p.Containers[1].CPU.UsageNanoCores = nil
	p.Sum()
	if p.CPU == nil || p.CPU.UsageNanoCores != nil || p.CPU.Window.Duration != 0 {
		t.Errorf("pod CPU with an unrated container = %+v, want a counter without rate", p.CPU)
	}
	p.Containers[1].Memory = nil
	p.Sum()
	if p.Memory != nil {
		t.Errorf("pod memory with a container unread = %+v, want none", p.Memory)
	}
	empty := PodStats{}
	empty.Sum()
	if empty.CPU != nil || empty.Memory != nil {
		t.Error("a pod without containers has figures")
	}
}
