package logging

import (
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Limits for identical klog lines. During a network partition the API
// server's storage logs "watch chan error: etcdserver: no leader" once per open
// watch, over and over (tens of thousands of lines in seconds), which fills an
// edge box's disk and drowns everything else. Like journald's rate limiting,
// the first repeatBurst copies of a line per repeatWindow are written, the rest
// only counted, and one summary line with the count follows the window.
const (
	repeatBurst   = 5
	repeatWindow  = 10 * time.Second
	repeatMaxKeys = 1000
	// RepeatedKey is the field of a summary line: how many identical lines
	// were suppressed in the window before it.
	RepeatedKey = "repeated"
)

// now is the limiter's clock; tests replace it.
var now = time.Now

// afterFunc schedules the flush of a quiet limiter; tests replace it so that
// no real timer outlives them.
var afterFunc = func(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// klogRepeats limits klog lines (see klogSink and writeKlogBuffer).
var klogRepeats = newRepeatLimiter()

// repeatKey identifies "the same line": the other fields (resource, key,
// watch ID) differ per caller of a flood and are deliberately left out.
type repeatKey struct {
	level     logrus.Level
	component string
	msg       string
	err       string // error text of structured calls; "" for printf lines
}

type repeatWindowState struct {
	start      time.Time
	seen       int // lines in this window, written or not
	suppressed int
}

// repeatLimiter is safe for concurrent use; a line costs one mutex and one map
// lookup.
type repeatLimiter struct {
	mu        sync.Mutex
	keys      map[repeatKey]*repeatWindowState
	stopTimer func() bool // nil when no flush is scheduled
	timerAt   time.Time
}

func newRepeatLimiter() *repeatLimiter {
	return &repeatLimiter{keys: make(map[repeatKey]*repeatWindowState)}
}

// limited reports whether lines at level are subject to the limiter. Fatal
// and panic lines always pass; debug and trace are off by default and, when
// turned on, are wanted in full.
func limited(level logrus.Level) bool {
	return level >= logrus.ErrorLevel && level <= logrus.InfoLevel
}

type repeatSummary struct {
	key repeatKey
	n   int
}

// allow reports whether the line k should be written. It first writes the
// summaries of windows that have ended for k or, when the map is full, for
// the keys it drops.
func (l *repeatLimiter) allow(k repeatKey) bool {
	if !limited(k.level) {
		return true
	}
	var summaries []repeatSummary
	l.mu.Lock()
	t := now()
	st := l.keys[k]
	if st != nil && !t.Before(st.start.Add(repeatWindow)) {
		if st.suppressed > 0 {
			summaries = append(summaries, repeatSummary{k, st.suppressed})
		}
		*st = repeatWindowState{start: t}
	}
	if st == nil {
		if len(l.keys) >= repeatMaxKeys {
			summaries = l.evict(t, summaries)
		}
		st = &repeatWindowState{start: t}
		l.keys[k] = st
	}
	st.seen++
	ok := st.seen <= repeatBurst
	if !ok {
		st.suppressed++
		if st.suppressed == 1 {
			l.schedule(t, st.start.Add(repeatWindow))
		}
	}
	l.mu.Unlock()
	writeSummaries(summaries)
	return ok
}

// evict drops ended windows and, if all repeatMaxKeys windows are still
// running, one arbitrary key, so memory stays bounded however many distinct
// lines are logged. Suppressed counts are reported, never dropped.
func (l *repeatLimiter) evict(t time.Time, summaries []repeatSummary) []repeatSummary {
	summaries = l.sweep(t, summaries)
	for k, st := range l.keys {
		if len(l.keys) < repeatMaxKeys {
			break
		}
		if st.suppressed > 0 {
			summaries = append(summaries, repeatSummary{k, st.suppressed})
		}
		delete(l.keys, k)
	}
	return summaries
}

// sweep removes the windows ended at t and collects their summaries.
func (l *repeatLimiter) sweep(t time.Time, summaries []repeatSummary) []repeatSummary {
	for k, st := range l.keys {
		if !t.Before(st.start.Add(repeatWindow)) {
			if st.suppressed > 0 {
				summaries = append(summaries, repeatSummary{k, st.suppressed})
			}
			delete(l.keys, k)
		}
	}
	return summaries
}

// schedule makes sure flush runs by at, so a flood that stops is summed up
// even if klog then falls silent. Called with l.mu held.
func (l *repeatLimiter) schedule(t, at time.Time) {
	if l.stopTimer != nil {
		if !at.Before(l.timerAt) {
			return
		}
		l.stopTimer()
	}
	l.timerAt = at
	l.stopTimer = afterFunc(at.Sub(t), l.flush)
}

// flush writes the summaries of ended windows and reschedules itself for the
// earliest window still holding suppressed lines.
func (l *repeatLimiter) flush() {
	l.mu.Lock()
	l.stopTimer = nil
	t := now()
	summaries := l.sweep(t, nil)
	var next time.Time
	for _, st := range l.keys {
		if end := st.start.Add(repeatWindow); st.suppressed > 0 && (next.IsZero() || end.Before(next)) {
			next = end
		}
	}
	if !next.IsZero() {
		l.schedule(t, next)
	}
	l.mu.Unlock()
	writeSummaries(summaries)
}

// reset forgets all windows, first writing what they suppressed.
func (l *repeatLimiter) reset() {
	l.mu.Lock()
	if l.stopTimer != nil {
		l.stopTimer()
		l.stopTimer = nil
	}
	var summaries []repeatSummary
	for k, st := range l.keys {
		if st.suppressed > 0 {
			summaries = append(summaries, repeatSummary{k, st.suppressed})
		}
	}
	l.keys = make(map[repeatKey]*repeatWindowState)
	l.mu.Unlock()
	writeSummaries(summaries)
}

// writeSummaries logs each suppressed line once more, at its level, with the
// number of copies not written, so nothing is lost without a trace.
func writeSummaries(summaries []repeatSummary) {
	for _, s := range summaries {
		fields := logrus.Fields{ComponentKey: s.key.component, RepeatedKey: s.n}
		if s.key.err != "" {
			fields[logrus.ErrorKey] = s.key.err
		}
		newEntry(fields).Log(s.key.level, s.key.msg)
	}
}
