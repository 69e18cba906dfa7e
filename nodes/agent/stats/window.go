package stats

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MinRateWindow is the shortest window a rate is computed over: shorter ones say more
// about when the counters were read than about the load.
const MinRateWindow = time.Second

// Reading is the cumulative CPU counters of a host and its containers taken at one time.
type Reading struct {
	Time time.Time
	// Node is the host's CPU time in nanoseconds; NodeOK is false when it could not be read.
	Node   uint64
	NodeOK bool
	// Containers maps container IDs to their CPU time in nanoseconds.
	Containers map[string]uint64
}

// History keeps the recent readings rates are computed from.
type History struct {
	// MinWindow is how old a reading should be to serve as a baseline (10 s): the rates are
	// averages over MinWindow plus at most the sampling interval.
	MinWindow time.Duration
	// MaxAge is how long a reading is kept (30 s); it should exceed MinWindow by more than
	// the sampling interval.
	MaxAge time.Duration

	mu       sync.Mutex
	readings []Reading // oldest first
}

// Add records a reading (readings come in time order) and forgets those older than MaxAge.
func (h *History) Add(r Reading) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.readings = append(h.readings, r)
	cutoff := r.Time.Add(-h.MaxAge)
	drop := 0
	for drop < len(h.readings)-1 && h.readings[drop].Time.Before(cutoff) {
		drop++
	}
	h.readings = append(h.readings[:0], h.readings[drop:]...)
}

// Baseline returns the reading to compute rates at now from: the newest one at least
// MinWindow old or, while there is none yet (the agent just started), the oldest one at
// least MinRateWindow old. ok is false when there is neither.
func (h *History) Baseline(now time.Time) (r Reading, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.readings) - 1; i >= 0; i-- {
		if age := now.Sub(h.readings[i].Time); age >= h.MinWindow {
			return h.readings[i], true
		}
	}
	if len(h.readings) > 0 && now.Sub(h.readings[0].Time) >= MinRateWindow {
		return h.readings[0], true
	}
	return Reading{}, false
}

// SetRate sets the rate of s, read at s.Time, from an earlier reading of the same counter,
// prev taken at prevTime. s keeps no rate when the window is shorter than MinRateWindow or
// the counter went backwards (a new cgroup under the same name).
func (s *CPUStats) SetRate(prev uint64, prevTime time.Time) {
	s.UsageNanoCores, s.Window = nil, metav1.Duration{}
	window := s.Time.Sub(prevTime)
	if window < MinRateWindow || s.UsageCoreNanoSeconds < prev {
		return
	}
	rate := uint64(float64(s.UsageCoreNanoSeconds-prev) / window.Seconds())
	s.UsageNanoCores, s.Window = &rate, metav1.Duration{Duration: window}
}

// Sum sets the pod's CPU and memory to the sums over its containers. The pod has a CPU rate
// only when every container has one, over the shortest of their windows, and a memory figure
// only when every container has one.
func (p *PodStats) Sum() {
	p.CPU, p.Memory = nil, nil
	if len(p.Containers) == 0 {
		return
	}
	cpu, mem := &CPUStats{}, &MemoryStats{}
	var rate uint64
	rated := true
	for _, c := range p.Containers {
		if c.CPU == nil {
			cpu, rated = nil, false
		} else if cpu != nil {
			cpu.UsageCoreNanoSeconds += c.CPU.UsageCoreNanoSeconds
			if c.CPU.Time.After(cpu.Time) {
				cpu.Time = c.CPU.Time
			}
			if c.CPU.UsageNanoCores == nil {
				rated = false
			} else {
				rate += *c.CPU.UsageNanoCores
				if cpu.Window.Duration == 0 || c.CPU.Window.Duration < cpu.Window.Duration {
					cpu.Window = c.CPU.Window
				}
			}
		}
		if c.Memory == nil {
			mem = nil
		} else if mem != nil {
			mem.UsageBytes += c.Memory.UsageBytes
			mem.WorkingSetBytes += c.Memory.WorkingSetBytes
			if c.Memory.Time.After(mem.Time) {
				mem.Time = c.Memory.Time
			}
		}
	}
	if cpu != nil {
		if rated {
			cpu.UsageNanoCores = &rate
		} else {
			cpu.Window = metav1.Duration{}
		}
	}
	p.CPU, p.Memory = cpu, mem
}
