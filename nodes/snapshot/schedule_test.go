package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

func TestParseSchedule(t *testing.T) {
	at := time.Date(2026, 12, 3, 19, 17, 30, 0, time.UTC)
	for expr, next := range map[string]time.Time{
		"0 */6 * * *": time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC),
		"*/5 * * * *": time.Date(2026, 12, 3, 19, 20, 0, 0, time.UTC),
		"@daily":      time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC),
		"@every 10m":  at.Add(10 * time.Minute),
	} {
		s, err := ParseSchedule(expr)
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		if got := s.Next(at); !got.Equal(next) {
			t.Errorf("%q: next after %s is %s, want %s", expr, at, got, next)
		}
	}
	for _, bad := range []string{"", "every day", "* * * *", "61 * * * *", "* * * * * *"} {
		if _, err := ParseSchedule(bad); err == nil || !strings.Contains(err.Error(), "5 fields") {
			t.Errorf("%q: want a clear error, got %v", bad, err)
		}
	}
	if _, err := ParseSchedule("0 0 30 2 *"); err == nil || !strings.Contains(err.Error(), "never fires") {
		t.Errorf("February 30: want a clear error, got %v", err)
	}
}

func TestPruneKeepsNewest(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	var names []string
	for i := range 7 {
		n := ScheduledName(base.Add(time.Duration(i) * time.Hour))
		names = append(names, n)
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600)
	}
	// Not scheduled snapshots: kept whatever their names.
	for _, other := range []string{"manual.tar.gz", "snapshot-latest.tar.gz", ".snapshot-20261203-230000.tar.gz.tmp-1"} {
		os.WriteFile(filepath.Join(dir, other), []byte("x"), 0o600)
	}
	removed, err := Prune(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, names[:4]) {
		t.Fatalf("removed %v, want the 4 oldest %v", removed, names[:4])
	}
	left, _ := os.ReadDir(dir)
	var got []string
	for _, e := range left {
		got = append(got, e.Name())
	}
	for _, want := range append(names[4:], "manual.tar.gz", "snapshot-latest.tar.gz") {
		if !slices.Contains(got, want) {
			t.Fatalf("%s removed; left %v", want, got)
		}
	}
}

func TestScheduleOnceRetriesAfterFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snapshots")
	fail, panics := true, true
	s := &Schedule{Retention: 2, Dir: dir, Log: logrus.NewEntry(logrus.New()),
		Save: func(ctx context.Context, out string) (*Manifest, error) {
			if panics {
				panics = false
				panic("boom")
			}
			if fail {
				return nil, errors.New("etcd unreachable")
			}
			return &Manifest{Revision: 7}, os.WriteFile(out, []byte("x"), 0o600)
		}}
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	s.Once(context.Background(), at) // panics: logged
	s.Once(context.Background(), at) // fails: logged
	if e, _ := os.ReadDir(dir); len(e) != 0 {
		t.Fatalf("a failed snapshot left %v", e)
	}
	fail = false
	for i := range 4 {
		s.Once(context.Background(), at.Add(time.Duration(i+1)*time.Minute))
	}
	e, _ := os.ReadDir(dir)
	if len(e) != 2 || e[1].Name() != ScheduledName(at.Add(4*time.Minute)) {
		t.Fatalf("want the newest 2 snapshots, got %v", e)
	}
}

func TestScheduleRunFiresAndPrunes(t *testing.T) {
	sched, err := ParseSchedule("@every 1s")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "snapshots")
	saved := make(chan string, 10)
	s := &Schedule{Schedule: sched, Retention: 2, Dir: dir, Log: logrus.NewEntry(logrus.New()),
		Save: func(ctx context.Context, out string) (*Manifest, error) {
			saved <- out
			return &Manifest{}, os.WriteFile(out, []byte("x"), 0o600)
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	for range 3 {
		select {
		case <-saved:
		case <-time.After(10 * time.Second):
			t.Fatal("no scheduled snapshot within 10s of an @every 1s schedule")
		}
	}
	cancel()
	<-done
	if e, _ := os.ReadDir(dir); len(e) != 2 {
		t.Fatalf("want the newest 2 of 3 snapshots kept, got %v", e)
	}
}
