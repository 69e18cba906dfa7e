//go:build linux

package logging

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

// fakeTime replaces the limiter's clock and timer for one test: the clock
// moves only on advance, and scheduled flushes run only on fire.
type fakeTime struct {
	mu      sync.Mutex
	t       time.Time
	pending []*fakeTimer
}

type fakeTimer struct {
	d       time.Duration
	f       func()
	stopped bool
}

func useFakeTime(t *testing.T) *fakeTime {
	ft := &fakeTime{t: time.Date(2024, 1, 2, 15, 4, 5, 0, time.UTC)}
	oldNow, oldAfter := now, afterFunc
	now = ft.now
	afterFunc = ft.afterFunc
	t.Cleanup(func() {
		klogRepeats.reset()
		now, afterFunc = oldNow, oldAfter
	})
	return ft
}

func (ft *fakeTime) now() time.Time {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.t
}

func (ft *fakeTime) advance(d time.Duration) {
	ft.mu.Lock()
	ft.t = ft.t.Add(d)
	ft.mu.Unlock()
}

func (ft *fakeTime) afterFunc(d time.Duration, f func()) func() bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	tm := &fakeTimer{d: d, f: f}
	ft.pending = append(ft.pending, tm)
	return func() bool {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		was := !tm.stopped
		tm.stopped = true
		return was
	}
}

// fire runs the scheduled flushes not stopped and returns their delays.
func (ft *fakeTime) fire() []time.Duration {
	ft.mu.Lock()
	timers := ft.pending
	ft.pending = nil
	ft.mu.Unlock()
	var ds []time.Duration
	for _, tm := range timers {
		ft.mu.Lock()
		run := !tm.stopped
		tm.stopped = true
		ft.mu.Unlock()
		if run {
			ds = append(ds, tm.d)
			tm.f()
		}
	}
	return ds
}

func setupJSON(t *testing.T, level string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	if err := Setup(Config{Level: level, Format: "json", Out: &buf}); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// takeLines returns the lines logged since the last call.
func takeLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	recs := jsonLines(t, buf.String())
	buf.Reset()
	return recs
}

// countMsg counts the lines with msg, and returns the repeated field of the
// one summary among them (0 if none; a second summary fails the test).
func countMsg(t *testing.T, recs []map[string]any, msg string) (lines int, repeated float64) {
	t.Helper()
	for _, rec := range recs {
		if rec["msg"] != msg {
			continue
		}
		lines++
		if n, ok := rec[RepeatedKey].(float64); ok {
			if repeated != 0 {
				t.Errorf("second summary for %q: %v", msg, rec)
			}
			repeated = n
		}
	}
	return lines, repeated
}

func TestKlogStructuredRepeatsAreLimited(t *testing.T) {
	ft := useFakeTime(t)
	buf := setupJSON(t, "info")
	noLeader := errors.New("etcdserver: no leader")

	for i := 0; i < 100; i++ {
		// Like the API server's watchers: same message and error, a
		// different resource each time.
		klog.ErrorS(noLeader, "watch chan error", "key", fmt.Sprintf("/registry/pods/p%d", i))
	}
	recs := takeLines(t, buf)
	if len(recs) != repeatBurst {
		t.Fatalf("100 identical errors gave %d lines, want %d:\n%v", len(recs), repeatBurst, recs)
	}
	for i, rec := range recs {
		if rec["key"] != fmt.Sprintf("/registry/pods/p%d", i) || rec["error"] != "etcdserver: no leader" || rec["level"] != "error" {
			t.Errorf("line %d: %v", i, rec)
		}
		if _, ok := rec[RepeatedKey]; ok {
			t.Errorf("line %d is not a summary but has %s: %v", i, RepeatedKey, rec)
		}
	}

	// Still inside the window: counted, not written.
	ft.advance(repeatWindow - time.Millisecond)
	klog.ErrorS(noLeader, "watch chan error", "key", "late")
	if recs := takeLines(t, buf); len(recs) != 0 {
		t.Fatalf("line inside the window was written: %v", recs)
	}

	ft.advance(time.Millisecond)
	klog.ErrorS(noLeader, "watch chan error", "key", "next")
	recs = takeLines(t, buf)
	if len(recs) != 2 {
		t.Fatalf("after the window want a summary and the line, got:\n%v", recs)
	}
	sum := recs[0]
	if sum["msg"] != "watch chan error" || sum[RepeatedKey] != float64(96) || sum["level"] != "error" ||
		sum["error"] != "etcdserver: no leader" || sum[ComponentKey] != "klog" {
		t.Errorf("summary = %v, want msg, error, level and component of the line with %s=96", sum, RepeatedKey)
	}
	if recs[1]["key"] != "next" || recs[1][RepeatedKey] != nil {
		t.Errorf("line after summary = %v", recs[1])
	}
}

func TestKlogSummaryOfHundred(t *testing.T) {
	ft := useFakeTime(t)
	buf := setupJSON(t, "info")
	for i := 0; i < 100; i++ {
		klog.ErrorS(errors.New("etcdserver: no leader"), "watch chan error", "key", i)
	}
	if lines, _ := countMsg(t, takeLines(t, buf), "watch chan error"); lines != 5 {
		t.Fatalf("got %d lines, want 5", lines)
	}
	// klog then falls silent: the scheduled flush writes the summary.
	ft.advance(repeatWindow)
	ds := ft.fire()
	if len(ds) != 1 || ds[0] != repeatWindow {
		t.Errorf("flushes scheduled after %v, want one after %v", ds, repeatWindow)
	}
	recs := takeLines(t, buf)
	if lines, n := countMsg(t, recs, "watch chan error"); lines != 1 || n != 95 || len(recs) != 1 {
		t.Fatalf("want one summary with %s=95, got:\n%v", RepeatedKey, recs)
	}
	// Nothing left to report, nothing rescheduled.
	if ds := ft.fire(); len(ds) != 0 {
		t.Errorf("flush rescheduled after %v with nothing suppressed", ds)
	}
}

func TestKlogPrintfRepeatsAreLimited(t *testing.T) {
	ft := useFakeTime(t)
	buf := setupJSON(t, "info")
	err := errors.New("etcdserver: no leader")
	for i := 0; i < 100; i++ {
		klog.Errorf("watch chan error: %v", err) // k8s.io/apiserver/pkg/storage/etcd3
		klog.Warningf("watch chan error: %v", err)
	}
	const msg = "watch chan error: etcdserver: no leader"
	recs := takeLines(t, buf)
	var errs, warns int
	for _, rec := range recs {
		if rec["msg"] != msg {
			t.Errorf("unexpected line %v", rec)
		}
		switch rec["level"] {
		case "error":
			errs++
		case "warning":
			warns++
		}
	}
	if errs != 5 || warns != 5 {
		t.Fatalf("got %d errors and %d warnings, want 5 of each (levels limited apart):\n%v", errs, warns, recs)
	}

	ft.advance(repeatWindow)
	klog.Errorf("watch chan error: %v", err)
	recs = takeLines(t, buf)
	if len(recs) != 2 || recs[0][RepeatedKey] != float64(95) || recs[0]["level"] != "error" ||
		recs[0]["msg"] != msg || recs[1][RepeatedKey] != nil {
		t.Fatalf("want error summary with %s=95 then the line, got:\n%v", RepeatedKey, recs)
	}
	// The warning's window ended too; the flush reports it.
	ft.fire()
	recs = takeLines(t, buf)
	if len(recs) != 1 || recs[0][RepeatedKey] != float64(95) || recs[0]["level"] != "warning" {
		t.Fatalf("want warning summary with %s=95, got:\n%v", RepeatedKey, recs)
	}
}

func TestKlogDifferentLinesAreLimitedApart(t *testing.T) {
	useFakeTime(t)
	buf := setupJSON(t, "info")
	for i := 0; i < 20; i++ {
		klog.ErrorS(errors.New("etcdserver: no leader"), "watch chan error")
		klog.ErrorS(errors.New("context canceled"), "watch chan error")
		klog.InfoS("watch chan error")
		klog.Background().WithName("ctrl").Error(errors.New("etcdserver: no leader"), "watch chan error")
		if i < 4 {
			klog.InfoS(fmt.Sprintf("starting worker %d", i))
			klog.Infof("synced %d", i)
		}
	}
	recs := takeLines(t, buf)
	type line struct{ level, component, err string }
	got := map[line]int{}
	for _, rec := range recs {
		errText, _ := rec["error"].(string)
		got[line{rec["level"].(string), rec[ComponentKey].(string), errText}]++
	}
	want := map[line]int{
		{"error", "klog", "etcdserver: no leader"}: 5,
		{"error", "klog", "context canceled"}:      5,
		{"info", "klog", ""}:                       5 + 4 + 4,
		{"error", "ctrl", "etcdserver: no leader"}: 5,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines by level, component, error = %v, want %v", got, want)
	}
}

func TestKlogFatalAndVerboseAreNotLimited(t *testing.T) {
	useFakeTime(t)
	buf := setupJSON(t, "debug")
	for i := 0; i < 10; i++ {
		// klog.Fatal would exit the test; this is the line it hands over.
		writeKlogBuffer([]byte("F0102 15:04:05.000000   123 main.go:42] dying\n"))
		klog.V(2).InfoS("verbose")
		// klog.V(3).Infof is not here: printf lines do not say their V and
		// come out, and are limited, at info.
	}
	recs := takeLines(t, buf)
	for _, msg := range []string{"dying", "verbose"} {
		if lines, _ := countMsg(t, recs, msg); lines != 10 {
			t.Errorf("%q: %d of 10 lines written", msg, lines)
		}
	}
}

func TestKlogHiddenLinesAreNotCounted(t *testing.T) {
	useFakeTime(t)
	buf := setupJSON(t, "warning")
	for i := 0; i < 10; i++ {
		klog.InfoS("hidden")
	}
	klogRepeats.mu.Lock()
	n := len(klogRepeats.keys)
	klogRepeats.mu.Unlock()
	if n != 0 || buf.Len() != 0 {
		t.Errorf("lines below the level: %d keys tracked, output %q", n, buf.String())
	}
}

func TestKlogRepeatsMemoryIsBounded(t *testing.T) {
	ft := useFakeTime(t)
	buf := setupJSON(t, "info")
	for i := 0; i < 10; i++ {
		klog.ErrorS(nil, "flood")
	}
	for i := 0; i < 3*repeatMaxKeys; i++ {
		klog.InfoS(fmt.Sprintf("distinct %d", i))
		klogRepeats.mu.Lock()
		n := len(klogRepeats.keys)
		klogRepeats.mu.Unlock()
		if n > repeatMaxKeys {
			t.Fatalf("%d keys tracked", n)
		}
	}
	ft.advance(repeatWindow)
	ft.fire()
	klogRepeats.reset()
	recs := takeLines(t, buf)
	if len(recs) != 5+1+3*repeatMaxKeys {
		t.Errorf("got %d lines, want every distinct line, 5 floods and one summary", len(recs))
	}
	// Evicted early or flushed later, the count is reported exactly once.
	if lines, n := countMsg(t, recs, "flood"); lines != 6 || n != 5 {
		t.Errorf("flood: %d lines, summary %s=%v; want 6 and 5", lines, RepeatedKey, n)
	}
}

func TestKlogRepeatsConcurrent(t *testing.T) {
	ft := useFakeTime(t)
	buf := setupJSON(t, "info")
	const workers, each = 16, 50
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				klog.ErrorS(errors.New("etcdserver: no leader"), "shared", "worker", w)
				klog.Errorf("shared printf %d", 1)
				if i < 3 {
					klog.Background().Info(fmt.Sprintf("own %d", w))
				}
			}
		}()
	}
	wg.Wait()
	recs := takeLines(t, buf)
	for _, msg := range []string{"shared", "shared printf 1"} {
		if lines, _ := countMsg(t, recs, msg); lines != 5 {
			t.Errorf("%q: %d lines, want 5", msg, lines)
		}
	}
	for w := 0; w < workers; w++ {
		if lines, _ := countMsg(t, recs, fmt.Sprintf("own %d", w)); lines != 3 {
			t.Errorf("own %d: %d lines, want 3", w, lines)
		}
	}

	// Flush and new lines racing once the windows have ended.
	ft.advance(repeatWindow)
	wg.Add(2)
	go func() { defer wg.Done(); ft.fire() }()
	go func() { defer wg.Done(); klog.Errorf("shared printf %d", 1) }()
	wg.Wait()
	klogRepeats.reset()
	recs = takeLines(t, buf)
	for _, msg := range []string{"shared", "shared printf 1"} {
		if _, n := countMsg(t, recs, msg); n != workers*each-5 {
			t.Errorf("%q: summary %s=%v, want %d", msg, RepeatedKey, n, workers*each-5)
		}
	}
}

func TestLimitedLevels(t *testing.T) {
	for _, l := range logrus.AllLevels {
		want := l == logrus.ErrorLevel || l == logrus.WarnLevel || l == logrus.InfoLevel
		if limited(l) != want {
			t.Errorf("limited(%v) = %v", l, !want)
		}
	}
}
