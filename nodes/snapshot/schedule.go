package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/sirupsen/logrus"
)

// ParseSchedule parses a standard 5-field cron expression (minute hour day-of-month month
// day-of-week, in UTC) or a descriptor such as @daily or @every 6h.
func ParseSchedule(expr string) (cron.Schedule, error) {
	s, err := cron.ParseStandard(expr)
	if err != nil {
		return nil, fmt.Errorf("%q is not a cron expression: %v (5 fields: minute hour day-of-month month day-of-week, such as \"0 */6 * * *\"; or @hourly, @daily, @every 6h)", expr, err)
	}
	if s.Next(time.Now().UTC()).IsZero() {
		return nil, fmt.Errorf("%q never fires (no such day in the next 5 years): give a cron expression with a date that exists, such as \"0 3 * * *\"", expr)
	}
	return s, nil
}

// Scheduled snapshots are named snapshot-<UTC time>.tar.gz, so their names sort by time.
const (
	scheduledPrefix = "snapshot-"
	scheduledSuffix = ".tar.gz"
	timeLayout      = "20060102-150405"
)

// ScheduledName is the file name of a scheduled snapshot taken at t.
func ScheduledName(t time.Time) string {
	return scheduledPrefix + t.UTC().Format(timeLayout) + scheduledSuffix
}

// Prune removes the oldest scheduled snapshots in dir beyond the newest keep; files of
// other names are left alone. It returns the names it removed.
func Prune(dir string, keep int) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, scheduledPrefix) || !strings.HasSuffix(n, scheduledSuffix) {
			continue
		}
		if _, err := time.Parse(timeLayout, strings.TrimSuffix(strings.TrimPrefix(n, scheduledPrefix), scheduledSuffix)); err != nil {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) <= keep {
		return nil, nil
	}
	old := names[:len(names)-keep]
	var removed []string
	for _, n := range old {
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			return removed, err
		}
		removed = append(removed, n)
	}
	return removed, nil
}

// Schedule runs scheduled snapshots of a server host into <data-dir>/snapshots.
type Schedule struct {
	// Schedule says when (ParseSchedule); Retention how many snapshots are kept.
	Schedule  cron.Schedule
	Retention int
	// Save takes one snapshot into the file given.
	Save func(ctx context.Context, out string) (*Manifest, error)
	// Dir holds the snapshots.
	Dir string
	Log *logrus.Entry
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Run takes a snapshot at every tick of the schedule until ctx ends. A failed snapshot is
// logged and tried again at the next tick.
func (s *Schedule) Run(ctx context.Context) {
	now := s.Now
	if now == nil {
		now = time.Now
	}
	for {
		next := s.Schedule.Next(now().UTC())
		if next.IsZero() {
			s.Log.Error("--snapshot-schedule never fires again: no scheduled snapshots")
			return
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.Once(ctx, now())
	}
}

// Once takes one scheduled snapshot (named after at) and prunes the old ones.
func (s *Schedule) Once(ctx context.Context, at time.Time) {
	defer func() {
		// A snapshot never takes the agent down.
		if r := recover(); r != nil {
			s.Log.WithField("panic", r).Error("scheduled etcd snapshot failed; trying again at the next tick")
		}
	}()
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		s.Log.WithError(err).Error("scheduled etcd snapshot: create the snapshot directory; trying again at the next tick")
		return
	}
	out := filepath.Join(s.Dir, ScheduledName(at))
	start := time.Now()
	m, err := s.Save(ctx, out)
	if err != nil {
		if ctx.Err() == nil {
			s.Log.WithError(err).Error("scheduled etcd snapshot failed; trying again at the next tick")
		}
		return
	}
	fields := logrus.Fields{"file": out, "revision": m.Revision, "keys": m.Keys, "took": time.Since(start).Round(time.Millisecond)}
	if fi, err := os.Stat(out); err == nil {
		fields["size"] = fi.Size()
	}
	s.Log.WithFields(fields).Info("scheduled etcd snapshot saved")
	removed, err := Prune(s.Dir, s.Retention)
	if err != nil {
		s.Log.WithError(err).Error("remove old scheduled snapshots")
	}
	if len(removed) > 0 {
		s.Log.WithField("removed", removed).Info("removed scheduled snapshots beyond the retention")
	}
}
