// Package memlimit keeps the Go runtime's soft memory limit in step with the live heap: a
// small heap gets less room to grow before the next collection than the runtime's default
// (GOGC=100 lets the heap double), and a large one gets the default back, so that a small
// host holds less memory and a large site's hot paths do not pay for more collections. While
// the API server takes a burst of writes, the heap gets more room than the default, up to a
// ceiling, and gives it back a few seconds after the burst.
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

	// Writes counts the writes the process has served so far (nil: no bursts). Once it has
	// counted at least BurstRate a second over BurstFor, the collector runs with GOGC at
	// BurstPercent (the heap may grow to 1+BurstPercent/100 times the live heap) under a soft
	// limit of Ceiling (0: none) in place of the limit above; Calm after the last second of
	// that rate, GOGC and the limit return and the runtime gives the room back to the kernel.
	// The collector's CPU goes with the bytes allocated between two collections: a burst of
	// API writes allocates for each request (decoding, admission, the etcd transaction, the
	// watch events), and the collector's share of the process's CPU falls as the room grows.
	Writes       func() uint64
	BurstRate    float64
	BurstFor     time.Duration
	BurstPercent int
	Calm         time.Duration
	Ceiling      int64
	// Bursting, when set, is told when a burst begins (true) and ends.
	Bursting func(bool)
}

// Default is the policy of the agent: an idle host has some 65 MiB of live heap, one with 50
// pods about 80, and the scheduler of a 1,000-node site several hundred. A host's own work
// writes some tens a second (the controllers' leader of a 3-host site starting 150 pods: 60
// a second, 165 at most in one second); creating and binding hundreds of pods a second on a
// 1,000-node site writes several hundred a second for as long as it lasts, and its collector
// takes a quarter to a third of the agent's CPU at GOGC=100. GOGC=200 gave most of what 400
// did there (a median of 653 pods/s created and bound against 688, 553 at 100) for less
// memory (a peak of 0.9-1.0 GiB against 1.2-1.4, 0.8 at 100). The agent sets Writes and
// Ceiling.
var Default = Policy{
	Floor: 150 << 20, Low: 100 << 20, High: 200 << 20,
	BurstRate: 300, BurstFor: 2 * time.Second, BurstPercent: 200, Calm: 3 * time.Second,
}

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

// burstLimit is the soft limit during a burst: the Ceiling, or the limit outside bursts when
// that is higher (a host whose Ceiling is below the Floor).
func (p Policy) burstLimit(live, nonHeap int64) int64 {
	if p.Ceiling <= 0 {
		return math.MaxInt64
	}
	return max(p.Ceiling, p.Limit(live, nonHeap))
}

// burst tells from a count of writes read now and then when a burst begins and ends.
type burst struct {
	rate          float64
	sustain, calm time.Duration

	count          uint64
	at             time.Time
	since, lastHot time.Time // the start of the run of windows at rate; the end of the last
	on             bool
}

// observe takes the count read at now and returns whether the burst mode changed, and to what.
func (b *burst) observe(now time.Time, count uint64) (changed, on bool) {
	if b.at.IsZero() {
		b.count, b.at = count, now
		return false, false
	}
	elapsed := now.Sub(b.at).Seconds()
	if elapsed <= 0 {
		return false, b.on
	}
	hot := float64(count-b.count)/elapsed >= b.rate
	if hot {
		if b.since.IsZero() {
			b.since = b.at
		}
		b.lastHot = now
	} else {
		b.since = time.Time{}
	}
	b.count, b.at = count, now
	switch {
	case !b.on && hot && now.Sub(b.since) >= b.sustain:
		b.on = true
		return true, true
	case b.on && now.Sub(b.lastHot) >= b.calm:
		b.on = false
		return true, false
	}
	return false, b.on
}

// Run applies p now and after every collection (looked for every interval) until ctx ends,
// and, with Writes, follows bursts (reading Writes every interval); then it leaves the
// runtime without a limit and with the GOGC it had.
func (p Policy) Run(ctx context.Context, interval time.Duration) {
	defer debug.SetMemoryLimit(math.MaxInt64)
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(gogc)
	percent := int(gogc[0].Value.Uint64())
	defer debug.SetGCPercent(percent)
	last, _, _ := read()
	p.Apply()
	b := burst{rate: p.BurstRate, sustain: p.BurstFor, calm: p.Calm}
	bursting := false
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p.Writes != nil && p.BurstRate > 0 {
			if changed, on := b.observe(time.Now(), p.Writes()); changed {
				bursting = on
				if on {
					debug.SetGCPercent(p.BurstPercent)
					_, live, nonHeap := read()
					debug.SetMemoryLimit(p.burstLimit(live, nonHeap))
				} else {
					debug.SetGCPercent(percent)
					p.Apply()
					debug.FreeOSMemory()
				}
				if p.Bursting != nil {
					p.Bursting(on)
				}
			}
		}
		if cycles, _, _ := read(); cycles != last {
			last = cycles
			if !bursting {
				p.Apply()
			}
		}
	}
}
