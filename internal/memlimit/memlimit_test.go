package memlimit

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"
)

const mib = 1 << 20

func TestLimit(t *testing.T) {
	p := Policy{Floor: 150 * mib, Low: 100 * mib, High: 200 * mib}
	for _, tc := range []struct {
		live, nonHeap, want int64
	}{
		{60 * mib, 25 * mib, 150 * mib},                           // the floor
		{90 * mib, 25 * mib, 160 * mib},                           // half the live heap of room
		{150 * mib, 30 * mib, 150*mib + 112*mib + 30*mib + mib/2}, // three quarters
		{200 * mib, 30 * mib, math.MaxInt64},                      // the runtime's GOGC decides
		{1 << 40, 30 * mib, math.MaxInt64},
	} {
		if got := p.Limit(tc.live, tc.nonHeap); got != tc.want {
			t.Errorf("Limit(%d MiB live, %d MiB other) = %d MiB, want %d MiB", tc.live/mib, tc.nonHeap/mib, got/mib, tc.want/mib)
		}
	}
	// The limit grows with the live heap: no live heap gets less room than a smaller one.
	prev := int64(0)
	for live := int64(0); live < 300*mib; live += mib {
		l := p.Limit(live, 20*mib)
		if l < prev {
			t.Fatalf("the limit falls from %d to %d at %d MiB live", prev, l, live/mib)
		}
		prev = l
	}
}

var retained [][]byte

// heapGoal is the runtime's heap size at which the next collection starts.
func heapGoal() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// The runtime's heap goal follows the policy: with a small live heap the next collection
// comes when the heap has grown by half rather than doubled; with a live heap over High the
// runtime's own doubling applies again. Run stops applying when its context ends.
func TestRunSetsTheHeapGoal(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer func() { retained = nil }()
	retain := func(n int) {
		retained = nil
		for range n {
			retained = append(retained, make([]byte, mib))
		}
		runtime.GC()
	}

	retain(40)
	p := Policy{Floor: 0, Low: 100 * mib, High: 200 * mib}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, 10*time.Millisecond); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for debug.SetMemoryLimit(-1) == math.MaxInt64 {
		if time.Now().After(deadline) {
			t.Fatal("Run set no limit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	runtime.GC()
	_, live, _ := read()
	goal := heapGoal()
	t.Logf("live heap %d MiB: heap goal %d MiB, limit %d MiB", live/mib, goal/mib, debug.SetMemoryLimit(-1)/mib)
	if goal > live*17/10 {
		t.Fatalf("with %d MiB live the heap goal is %d MiB: more than 1.7 times the live heap", live/mib, goal/mib)
	}

	// A live heap over High: Run lifts the limit after the next collection.
	retain(210)
	for debug.SetMemoryLimit(-1) != math.MaxInt64 {
		if time.Now().After(deadline) {
			t.Fatalf("with %d MiB live the limit stays %d MiB", len(retained), debug.SetMemoryLimit(-1)/mib)
		}
		time.Sleep(10 * time.Millisecond)
	}
	runtime.GC()
	_, live, _ = read()
	if goal := heapGoal(); goal < live*19/10 {
		t.Fatalf("with %d MiB live the heap goal is %d MiB: the runtime's doubling should apply", live/mib, goal/mib)
	}

	retain(40)
	cancel()
	<-done
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Fatalf("the limit stays %d MiB after Run ended", l/mib)
	}
}

// A burst begins once the writes have kept the rate for the sustain time, and ends once they
// have stayed under it for the calm time; one busy second alone (a host starting its pods)
// is no burst.
func TestBurstBeginsAndEnds(t *testing.T) {
	b := burst{rate: 100, sustain: 2 * time.Second, calm: 3 * time.Second}
	t0 := time.Unix(1000, 0)
	count := uint64(0)
	for i, step := range []struct {
		writes      uint64
		changed, on bool
	}{
		{0, false, false},   // the first reading
		{50, false, false},  // 50/s
		{165, false, false}, // one busy second
		{40, false, false},  // and a quiet one: no burst
		{150, false, false}, // busy for 1 s
		{150, true, true},   // busy for 2 s: the burst begins
		{400, false, true},
		{10, false, true},  // quiet for 1 s
		{10, false, true},  // quiet for 2 s
		{120, false, true}, // busy again: the calm starts over
		{0, false, true},
		{0, false, true},
		{0, true, false}, // quiet for 3 s: the burst is over
		{0, false, false},
	} {
		count += step.writes
		changed, on := b.observe(t0.Add(time.Duration(i)*time.Second), count)
		if changed != step.changed || on != step.on {
			t.Fatalf("second %d (%d writes): changed %v, bursting %v; want %v, %v", i, step.writes, changed, on, step.changed, step.on)
		}
	}
}

func TestBurstLimit(t *testing.T) {
	p := Policy{Floor: 150 * mib, Low: 100 * mib, High: 200 * mib, Ceiling: 1024 * mib}
	if got := p.burstLimit(80*mib, 20*mib); got != 1024*mib {
		t.Errorf("burst limit with an 80 MiB live heap = %d MiB, want the ceiling (1024 MiB)", got/mib)
	}
	p.Ceiling = 100 * mib // a small host: the ceiling under the floor
	if got, want := p.burstLimit(80*mib, 20*mib), p.Limit(80*mib, 20*mib); got != want {
		t.Errorf("burst limit with a ceiling under the floor = %d MiB, want the limit outside bursts (%d MiB)", got/mib, want/mib)
	}
	p.Ceiling = 0
	if got := p.burstLimit(80*mib, 20*mib); got != math.MaxInt64 {
		t.Errorf("burst limit without a ceiling = %d MiB, want none", got/mib)
	}
}

func gcPercent() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// While writes keep a burst's rate, Run sets the burst's GOGC and the ceiling as the limit;
// after the calm time both return, and when Run ends GOGC is what it was.
func TestRunFollowsBursts(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	var writes atomic.Uint64
	changes := make(chan bool, 4)
	p := Policy{
		Floor: 150 * mib, Low: 100 * mib, High: 200 * mib,
		Writes: writes.Load, BurstRate: 1000, BurstFor: 50 * time.Millisecond, BurstPercent: 300,
		Calm: 100 * time.Millisecond, Ceiling: 3 << 30, Bursting: func(on bool) { changes <- on },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, 10*time.Millisecond); close(done) }()

	stop := make(chan struct{})
	go func() { // some hundred thousand writes a second
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				writes.Add(200)
			}
		}
	}()
	select {
	case on := <-changes:
		if !on {
			t.Fatal("Run reported the end of a burst first")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no burst began in 10 s of writes")
	}
	if got := gcPercent(); got != 300 {
		t.Errorf("GOGC during the burst = %d, want 300", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Errorf("limit during the burst = %d MiB, want the ceiling (3072 MiB)", got/mib)
	}

	close(stop)
	select {
	case on := <-changes:
		if on {
			t.Fatal("Run reported a second beginning")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the burst did not end in 10 s without writes")
	}
	if got := gcPercent(); got != 100 {
		t.Errorf("GOGC after the burst = %d, want 100", got)
	}
	if got := debug.SetMemoryLimit(-1); got >= 3<<30 {
		t.Errorf("limit after the burst = %d MiB, want the policy's own again", got/mib)
	}
	cancel()
	<-done
	if got := gcPercent(); got != 100 {
		t.Errorf("GOGC after Run = %d, want 100", got)
	}
}
