package agent

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node-pressure eviction, as the kubelet's eviction manager does with hard thresholds: every
// MonitorInterval the host measures what is left of memory, of the filesystems holding its
// data directory (nodefs) and containerd's images (imagefs), and of process IDs. A signal
// below its threshold sets the Node condition (MemoryPressure, DiskPressure, PIDPressure),
// which the node lifecycle controller turns into a NoSchedule taint, and evicts one pod per
// interval until it is not; a condition stays True for the transition period after the
// last time its threshold was met, so it does not flap.

// Signal is an eviction signal, as the kubelet names them.
type Signal string

// The signals the host measures.
const (
	SignalMemoryAvailable   Signal = "memory.available"
	SignalNodeFSAvailable   Signal = "nodefs.available"
	SignalNodeFSInodesFree  Signal = "nodefs.inodesFree"
	SignalImageFSAvailable  Signal = "imagefs.available"
	SignalImageFSInodesFree Signal = "imagefs.inodesFree"
	SignalPIDAvailable      Signal = "pid.available"
)

// DefaultEvictionHard are the kubelet's default hard thresholds on Linux.
const DefaultEvictionHard = "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%,imagefs.inodesFree<5%"

// signalConditions maps each signal to the Node condition it drives and the resource the
// eviction ranks pods by.
var signalConditions = map[Signal]corev1.NodeConditionType{
	SignalMemoryAvailable:   corev1.NodeMemoryPressure,
	SignalNodeFSAvailable:   corev1.NodeDiskPressure,
	SignalNodeFSInodesFree:  corev1.NodeDiskPressure,
	SignalImageFSAvailable:  corev1.NodeDiskPressure,
	SignalImageFSInodesFree: corev1.NodeDiskPressure,
	SignalPIDAvailable:      corev1.NodePIDPressure,
}

// Threshold is one hard eviction threshold: Signal below Quantity, or below Percentage of
// the signal's capacity.
type Threshold struct {
	Signal     Signal
	Quantity   *resource.Quantity
	Percentage float64
}

func (t Threshold) String() string {
	if t.Quantity != nil {
		return string(t.Signal) + "<" + t.Quantity.String()
	}
	return string(t.Signal) + "<" + strconv.FormatFloat(t.Percentage*100, 'f', -1, 64) + "%"
}

// limit is the threshold's value for a signal of capacity.
func (t Threshold) limit(capacity int64) int64 {
	if t.Quantity != nil {
		return t.Quantity.Value()
	}
	return int64(t.Percentage * float64(capacity))
}

// ParseThresholds reads a kubelet --eviction-hard value: comma-separated SIGNAL<QUANTITY or
// SIGNAL<PERCENT%. An empty string means no thresholds.
func ParseThresholds(s string) ([]Threshold, error) {
	var out []Threshold
	seen := map[Signal]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "<")
		if !ok {
			return nil, fmt.Errorf("eviction threshold %q: want SIGNAL<QUANTITY or SIGNAL<PERCENT%%, e.g. memory.available<100Mi", part)
		}
		sig := Signal(strings.TrimSpace(name))
		if _, known := signalConditions[sig]; !known {
			return nil, fmt.Errorf("eviction threshold %q: unknown signal %q (known: memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available)", part, sig)
		}
		if seen[sig] {
			return nil, fmt.Errorf("eviction threshold %q: signal %s given twice", part, sig)
		}
		seen[sig] = true
		t := Threshold{Signal: sig}
		value = strings.TrimSpace(value)
		if pct, ok := strings.CutSuffix(value, "%"); ok {
			f, err := strconv.ParseFloat(pct, 64)
			if err != nil || f <= 0 || f >= 100 {
				return nil, fmt.Errorf("eviction threshold %q: a percentage between 0 and 100 (exclusive), e.g. 10%%", part)
			}
			t.Percentage = f / 100
		} else {
			q, err := resource.ParseQuantity(value)
			if err != nil || q.Sign() <= 0 {
				return nil, fmt.Errorf("eviction threshold %q: %q is not a positive quantity, e.g. 100Mi", part, value)
			}
			t.Quantity = &q
		}
		out = append(out, t)
	}
	return out, nil
}

// observation is what is left of a signal and what its capacity is.
type observation struct{ available, capacity int64 }

// observations measures every signal: memory from /proc/meminfo (MemAvailable), the
// filesystems with statfs (free blocks, the root reserve included), process IDs from
// /proc/sys/kernel/pid_max and sysinfo.
func observations(nodeFS, imageFS string) map[Signal]observation {
	out := map[Signal]observation{}
	if avail, total, err := memInfo(); err == nil {
		out[SignalMemoryAvailable] = observation{available: avail, capacity: total}
	}
	fs := func(dir string, bytes, inodes Signal) {
		if dir == "" {
			return
		}
		// f_bfree, the blocks root may use (see StatfsUsage), not the kubelet's f_bavail.
		u, err := StatfsUsage(dir)
		if err != nil {
			return
		}
		out[bytes] = observation{available: u.Available, capacity: u.Capacity}
		if u.Inodes > 0 {
			out[inodes] = observation{available: u.InodesFree, capacity: u.Inodes}
		}
	}
	fs(nodeFS, SignalNodeFSAvailable, SignalNodeFSInodesFree)
	fs(imageFS, SignalImageFSAvailable, SignalImageFSInodesFree)
	if max, err := strconv.ParseInt(readTrim("/proc/sys/kernel/pid_max"), 10, 64); err == nil {
		var si syscall.Sysinfo_t
		if syscall.Sysinfo(&si) == nil {
			out[SignalPIDAvailable] = observation{available: max - int64(si.Procs), capacity: max}
		}
	}
	return out
}

// memInfo returns MemAvailable and MemTotal in bytes.
func memInfo() (available, total int64, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "MemAvailable:":
			available = kb << 10
		case "MemTotal:":
			total = kb << 10
		}
	}
	if total == 0 {
		return 0, 0, fmt.Errorf("no MemTotal in /proc/meminfo")
	}
	return available, total, sc.Err()
}

// PressureConfig configures a PressureMonitor.
type PressureConfig struct {
	// Hard are the hard eviction thresholds (ParseThresholds of --eviction-hard).
	Hard []Threshold
	// Transition is how long a condition stays True after its threshold was last met
	// (--eviction-pressure-transition-period, 5m).
	Transition time.Duration
	// NodeFS and ImageFS are directories on the node and image filesystems (the data
	// directory and containerd's root).
	NodeFS, ImageFS string
	// Interval is how often the signals are measured (10 s).
	Interval time.Duration
	// observe replaces the measurements in tests.
	observe func() map[Signal]observation
	now     func() time.Time
}

// MetThreshold is a threshold the last measurement found crossed.
type MetThreshold struct {
	Threshold
	Available, Capacity int64
}

// Message describes it as the kubelet's eviction messages do.
func (m MetThreshold) Message() string {
	return fmt.Sprintf("The node was low on resource: %s. Threshold quantity: %s, available: %s.", resourceOf(m.Signal),
		quantityText(m.Signal, m.limit(m.Capacity)), quantityText(m.Signal, m.Available))
}

func resourceOf(s Signal) string {
	switch s {
	case SignalMemoryAvailable:
		return "memory"
	case SignalNodeFSInodesFree, SignalImageFSInodesFree:
		return "inodes"
	case SignalPIDAvailable:
		return "pids"
	}
	return "ephemeral-storage"
}

func quantityText(s Signal, v int64) string {
	switch s {
	case SignalNodeFSInodesFree, SignalImageFSInodesFree, SignalPIDAvailable:
		return strconv.FormatInt(v, 10)
	}
	return resource.NewQuantity(v, resource.BinarySI).String()
}

// Evictor evicts one pod to relieve met (the pod manager).
type Evictor interface {
	EvictForPressure(ctx context.Context, met MetThreshold) (evicted bool, err error)
}

// PressureMonitor measures the signals, keeps the pressure conditions and evicts.
type PressureMonitor struct {
	cfg PressureConfig
	log *logrus.Entry

	mu       sync.Mutex
	met      []MetThreshold
	lastMet  map[corev1.NodeConditionType]time.Time
	measured bool
	evictor  Evictor
}

// NewPressureMonitor makes a monitor (started by Run).
func NewPressureMonitor(cfg PressureConfig) *PressureMonitor {
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.observe == nil {
		cfg.observe = func() map[Signal]observation { return observations(cfg.NodeFS, cfg.ImageFS) }
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	return &PressureMonitor{cfg: cfg, lastMet: map[corev1.NodeConditionType]time.Time{}, log: logrus.WithField("component", "eviction")}
}

// SetEvictor gives the monitor what evicts pods (the pod manager, once it runs).
func (p *PressureMonitor) SetEvictor(e Evictor) {
	p.mu.Lock()
	p.evictor = e
	p.mu.Unlock()
}

// Run measures every interval and evicts while a threshold is met, until ctx ends.
func (p *PressureMonitor) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		met := p.measure()
		p.mu.Lock()
		evictor := p.evictor
		p.mu.Unlock()
		if len(met) > 0 && evictor != nil {
			p.evict(ctx, evictor, met)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// measure records the thresholds met now and returns them, memory first.
func (p *PressureMonitor) measure() []MetThreshold {
	obs := p.cfg.observe()
	now := p.cfg.now()
	var met []MetThreshold
	for _, t := range p.cfg.Hard {
		o, ok := obs[t.Signal]
		if !ok || o.available >= t.limit(o.capacity) {
			continue
		}
		met = append(met, MetThreshold{Threshold: t, Available: o.available, Capacity: o.capacity})
	}
	sort.SliceStable(met, func(i, j int) bool {
		return met[i].Signal == SignalMemoryAvailable && met[j].Signal != SignalMemoryAvailable
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range met {
		cond := signalConditions[m.Signal]
		if _, was := p.lastMet[cond]; !was || now.Sub(p.lastMet[cond]) > p.cfg.Transition {
			p.log.WithFields(logrus.Fields{"condition": cond, "threshold": m.Threshold.String(), "available": quantityText(m.Signal, m.Available)}).Warn("eviction threshold met")
		}
		p.lastMet[cond] = now
	}
	p.met, p.measured = met, true
	return met
}

// evict asks for one pod for the first threshold met that some pod can relieve.
func (p *PressureMonitor) evict(ctx context.Context, e Evictor, met []MetThreshold) {
	for _, m := range met {
		ok, err := e.EvictForPressure(ctx, m)
		if err != nil {
			p.log.WithError(err).WithField("threshold", m.Threshold.String()).Warn("evict a pod")
		}
		if ok {
			return
		}
	}
}

// Conditions returns the pressure conditions as of now (all False before the first
// measurement), with the kubelet's reasons.
func (p *PressureMonitor) Conditions(now metav1.Time) []corev1.NodeCondition {
	p.mu.Lock()
	defer p.mu.Unlock()
	under := func(c corev1.NodeConditionType) bool {
		last, ok := p.lastMet[c]
		return ok && p.cfg.now().Sub(last) <= p.cfg.Transition
	}
	cond := func(t corev1.NodeConditionType, pressure bool, yesReason, yes, noReason, no string) corev1.NodeCondition {
		c := corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, Reason: noReason, Message: no, LastHeartbeatTime: now, LastTransitionTime: now}
		if pressure {
			c.Status, c.Reason, c.Message = corev1.ConditionTrue, yesReason, yes
		}
		return c
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, under(corev1.NodeMemoryPressure), "KubeletHasInsufficientMemory", "flotilla agent has insufficient memory available",
			"KubeletHasSufficientMemory", "flotilla agent has sufficient memory available"),
		cond(corev1.NodeDiskPressure, under(corev1.NodeDiskPressure), "KubeletHasDiskPressure", "flotilla agent has disk pressure",
			"KubeletHasNoDiskPressure", "flotilla agent has no disk pressure"),
		cond(corev1.NodePIDPressure, under(corev1.NodePIDPressure), "KubeletHasInsufficientPID", "flotilla agent has insufficient PID available",
			"KubeletHasSufficientPID", "flotilla agent has sufficient PID available"),
	}
}

// UnderPressure reports whether condition c is True now.
func (p *PressureMonitor) UnderPressure(c corev1.NodeConditionType) bool {
	for _, cond := range p.Conditions(metav1.Now()) {
		if cond.Type == c {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// HardMemory is the memory.available hard threshold (as bytes of capacity), which
// allocatable leaves out as the kubelet does; 0 without one.
func HardMemory(hard []Threshold, capacity int64) int64 {
	for _, t := range hard {
		if t.Signal == SignalMemoryAvailable {
			return t.limit(capacity)
		}
	}
	return 0
}

// HardNodeFS is the nodefs.available hard threshold in bytes of capacity; 0 without one.
func HardNodeFS(hard []Threshold, capacity int64) int64 {
	for _, t := range hard {
		if t.Signal == SignalNodeFSAvailable {
			return t.limit(capacity)
		}
	}
	return 0
}
