// Package memlimit keeps the Go runtime's soft memory limit in step with the live heap: a
// small heap gets less room to grow before the next collection than the runtime's default
// (GOGC=100 lets the heap double), and a large one gets the default back, so that a small
// host holds less memory and a large site's hot paths do not pay for more collections.
package memlimit

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Policy says how much room the heap gets above what is live.
type Policy struct {
	// Floor is the least limit (the runtime's total: heap, stacks and its own metadata).
	Floor int64
	// Below Low bytes of live heap, the heap may grow by half (Go's GOGC=50) before the next
	// collection, unless Floor leaves more; from High on the limit is off and the runtime's
	// GOGC decides (the heap doubles); between the two, the room grows in proportion.
	Low, High int64
}

// Default is the policy of the agent: an idle host has some 65 MiB of live heap, one with 50
// pods about 80, and the scheduler of a 1,000-node site several hundred.
var Default = Policy{Floor: 150 << 20, Low: 100 << 20, High: 200 << 20}

// Limit is the soft limit for live bytes of live heap and nonHeap bytes of the runtime's
// other memory (stacks, metadata); math.MaxInt64 is none.
func (p Policy) Limit(live, nonHeap int64) int64 {
	if live >= p.High {
		return math.MaxInt64
	}
	growth := 0.5
	if live > p.Low {
		growth += 0.5 * float64(live-p.Low) / float64(p.High-p.Low)
	}
	return max(p.Floor, live+int64(growth*float64(live))+nonHeap)
}

var samples = []metrics.Sample{
	{Name: "/gc/cycles/total:gc-cycles"},
	{Name: "/gc/heap/live:bytes"},
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
	{Name: "/memory/classes/heap/free:bytes"},
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/memory/classes/heap/unused:bytes"},
}

// read returns the number of collections so far, the live heap after the last one and the
// runtime's memory that is not heap.
func read() (cycles uint64, live, nonHeap int64) {
	s := make([]metrics.Sample, len(samples))
	copy(s, samples)
	metrics.Read(s)
	v := func(i int) int64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(s[i].Value.Uint64())
	}
	if s[0].Value.Kind() == metrics.KindUint64 {
		cycles = s[0].Value.Uint64()
	}
	return cycles, v(1), v(2) - v(3) - v(4) - v(5) - v(6)
}

// Apply sets the runtime's limit from the last collection's live heap and returns it.
func (p Policy) Apply() int64 {
	_, live, nonHeap := read()
	limit := p.Limit(live, nonHeap)
	debug.SetMemoryLimit(limit)
	return limit
}

// Run applies p now and after every collection (looked for every interval) until ctx ends,
// then leaves the runtime without a limit.
func (p Policy) Run(ctx context.Context, interval time.Duration) {
	defer debug.SetMemoryLimit(math.MaxInt64)
	last, _, _ := read()
	p.Apply()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if cycles, _, _ := read(); cycles != last {
			last = cycles
			p.Apply()
		}
	}
}
