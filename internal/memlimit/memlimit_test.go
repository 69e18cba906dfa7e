package memlimit

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
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
