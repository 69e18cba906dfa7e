package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/tools/record"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// fakeImages is an ImageGCRuntime in memory: the filesystem holds base bytes plus the images.
type fakeImages struct {
	mu         sync.Mutex
	images     map[string]rt.Image // by ID
	containers []rt.ContainerStatus
	pinned     map[string]string
	removed    []string
	capacity   int64
	base       int64
	// onList runs at each ListImages (a worker acting while the collector lists).
	onList func()
}

func newFakeImages(capacity, base int64) *fakeImages {
	return &fakeImages{images: map[string]rt.Image{}, pinned: map[string]string{}, capacity: capacity, base: base}
}

func (f *fakeImages) add(name string, size int64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := "sha256:" + name
	f.images[id] = rt.Image{ID: id, Names: []string{"flotilla.local/" + name + ":latest"}, Size: size}
	return id
}

func (f *fakeImages) ListImages(context.Context) ([]rt.Image, error) {
	if f.onList != nil {
		f.onList()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []rt.Image
	for _, i := range f.images {
		out = append(out, i)
	}
	return out, nil
}

func (f *fakeImages) ListContainers(context.Context) ([]rt.ContainerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]rt.ContainerStatus(nil), f.containers...), nil
}

func (f *fakeImages) RemoveImage(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.images[id]; !ok {
		return fmt.Errorf("image %s: %w", id, rt.ErrNotFound)
	}
	for _, c := range f.containers {
		if c.ImageID == id {
			return fmt.Errorf("remove image %s: %w", id, rt.ErrImageInUse)
		}
	}
	delete(f.images, id)
	f.removed = append(f.removed, strings.TrimPrefix(id, "sha256:"))
	return nil
}

func (f *fakeImages) SideLoadedImages(context.Context) (map[string]string, error) {
	return f.pinned, nil
}

func (f *fakeImages) usage(context.Context) (FSUsage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	used := f.base
	for _, i := range f.images {
		used += i.Size
	}
	return FSUsage{Capacity: f.capacity, Available: f.capacity - used}, nil
}

func (f *fakeImages) left() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id := range f.images {
		out = append(out, strings.TrimPrefix(id, "sha256:"))
	}
	sort.Strings(out)
	return out
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestImageGC(f *fakeImages, clock *fakeClock) (*imageGC, *record.FakeRecorder) {
	rec := record.NewFakeRecorder(100)
	cfg := ImageGCConfig{HighThresholdPercent: 85, LowThresholdPercent: 80, MinimumAge: 2 * time.Minute,
		Usage: f.usage, now: clock.now}
	return newImageGC(cfg, f, rec, "host-1", logrus.NewEntry(logrus.StandardLogger())), rec
}

func events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestImageGCLeastRecentlyUsedFirstDownToLow(t *testing.T) {
	ctx := context.Background()
	f := newFakeImages(1000, 450)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	gc, rec := newTestImageGC(f, clock)
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		f.add(n, 100)
	}
	// c is what a container (exited, not removed) was created from; e is side-loaded.
	f.containers = []rt.ContainerStatus{{ID: "c1", ImageID: "sha256:c", State: rt.StateExited}}
	f.pinned["sha256:e"] = "/data/images/e.tar"
	if _, _, err := gc.detect(ctx, clock.now()); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Minute)
	gc.markUsed("flotilla.local/b") // normalized to flotilla.local/b:latest
	clock.advance(time.Minute)
	gc.markUsed("flotilla.local/a:latest")
	clock.advance(10 * time.Minute)

	// 950 of 1000 used: 95% >= 85%; down to 80% needs 150 bytes: d (never used), then b.
	res, err := gc.collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.removed, ","); got != "d,b" {
		t.Errorf("removed %s, want d,b (least recently used first, stopping at the low threshold)", got)
	}
	if got := strings.Join(f.left(), ","); got != "a,c,e" {
		t.Errorf("left %s, want a,c,e", got)
	}
	if res.Freed() != 200 || !res.Reached() || res.After.Percent() != 75 {
		t.Errorf("result %+v: freed %d, reached %v", res, res.Freed(), res.Reached())
	}
	if !gc.report(res, nil) {
		t.Error("report says the low threshold was not reached")
	}
	evs := events(rec)
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal FreedDiskSpace Freed 200 bytes") ||
		!strings.Contains(evs[0], "flotilla.local/d:latest, flotilla.local/b:latest") {
		t.Errorf("events %q, want one FreedDiskSpace of 200 bytes naming d and b", evs)
	}

	// Below the high threshold nothing goes, however old.
	clock.advance(time.Hour)
	f.base = 0
	if res, err := gc.collect(ctx); err != nil || len(res.Removed) > 0 || res.High {
		t.Errorf("below the threshold: %+v, %v", res, err)
	}
}

func TestImageGCNeverInUseOrSideLoaded(t *testing.T) {
	ctx := context.Background()
	f := newFakeImages(1000, 700)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	gc, rec := newTestImageGC(f, clock)
	f.add("running", 100)
	f.add("created", 100)
	f.add("sideloaded", 50)
	f.add("free", 10)
	f.containers = []rt.ContainerStatus{
		{ID: "r", ImageID: "sha256:running", State: rt.StateRunning},
		// A container without the image ID label counts by its image name.
		{ID: "c", Image: "flotilla.local/created", State: rt.StateCreated},
	}
	f.pinned["sha256:sideloaded"] = "/data/images/s.tar"
	if _, _, err := gc.detect(ctx, clock.now()); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Hour)
	res, err := gc.collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.removed, ","); got != "free" {
		t.Errorf("removed %s, want only free", got)
	}
	if res.Reached() {
		t.Errorf("result %+v: the low threshold cannot be reached", res)
	}
	if gc.report(res, nil) {
		t.Error("report says the low threshold was reached")
	}
	evs := events(rec)
	if len(evs) != 2 || !strings.HasPrefix(evs[0], "Normal FreedDiskSpace Freed 10 bytes") ||
		!strings.HasPrefix(evs[1], "Warning ImageGCFailed Failed to garbage collect required amount of images") {
		t.Errorf("events %q, want FreedDiskSpace then ImageGCFailed", evs)
	}
}

func TestImageGCMinimumAge(t *testing.T) {
	ctx := context.Background()
	f := newFakeImages(1000, 800)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	gc, _ := newTestImageGC(f, clock)
	f.add("old", 100)
	if _, _, err := gc.detect(ctx, clock.now()); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Minute)
	gc.markUsed("flotilla.local/old")
	clock.advance(9 * time.Minute)
	// Pulled a minute ago and never used, so least recently used, but too young.
	f.add("fresh", 50)
	if _, _, err := gc.detect(ctx, clock.now()); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Minute)
	if _, err := gc.collect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.removed, ","); got != "old" {
		t.Errorf("removed %s, want old only (fresh is younger than the minimum age)", got)
	}
	// Once old enough it goes too (usage is still high: 850 of 1000).
	clock.advance(2 * time.Minute)
	if _, err := gc.collect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.removed, ","); got != "old,fresh" {
		t.Errorf("removed %s, want old,fresh", got)
	}
}

func TestImageGCMarkedWhileCollecting(t *testing.T) {
	ctx := context.Background()
	f := newFakeImages(1000, 800)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	gc, _ := newTestImageGC(f, clock)
	f.add("a", 100)
	f.add("b", 100)
	if _, _, err := gc.detect(ctx, clock.now()); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Hour)
	// A worker looks a up while the collector lists: a is kept, b goes although it was
	// used later (before the collection started).
	gc.markUsed("flotilla.local/b")
	f.onList = func() { gc.markUsed("flotilla.local/a") }
	if _, err := gc.collect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.left(), ","); got != "a" {
		t.Errorf("left %s, want a", got)
	}
}

func TestImageGCRemovalRefusedInUse(t *testing.T) {
	ctx := context.Background()
	f := newFakeImages(1000, 800)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	gc, _ := newTestImageGC(f, clock)
	f.add("a", 100)
	f.add("b", 100)
	if _, _, err := gc.detect(ctx, clock.now()); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Hour)
	// A container of a appears after the listing: the runtime refuses, b goes instead.
	inUse, pinned, err := gc.detect(ctx, clock.now())
	if err != nil {
		t.Fatal(err)
	}
	f.containers = []rt.ContainerStatus{{ID: "x", ImageID: "sha256:a"}}
	ids := gc.candidates(clock.now(), inUse, pinned)
	if len(ids) != 2 {
		t.Fatalf("candidates %v", ids)
	}
	for _, id := range ids {
		if _, _, _, err := gc.remove(ctx, id, gc.seq); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(f.left(), ","); got != "a" {
		t.Errorf("left %s, want a", got)
	}
}

func TestImageGCConfigValidate(t *testing.T) {
	for _, c := range []struct {
		low, high int
		ok        bool
	}{{80, 85, true}, {0, 100, true}, {0, 1, true}, {85, 85, false}, {90, 85, false}, {-1, 85, false}, {80, 101, false}} {
		err := ImageGCConfig{LowThresholdPercent: c.low, HighThresholdPercent: c.high}.Validate()
		if (err == nil) != c.ok {
			t.Errorf("low %d high %d: %v", c.low, c.high, err)
		}
	}
}

// createOnly is a Runtime that only creates containers.
type createOnly struct{ Runtime }

func (createOnly) CreateContainer(context.Context, rt.ContainerConfig) error { return nil }

func TestImageUseRecorderMarks(t *testing.T) {
	f := newFakeImages(1000, 0)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	gc, _ := newTestImageGC(f, clock)
	r := imageUseRecorder{Runtime: createOnly{}, gc: gc}
	if err := r.CreateContainer(context.Background(), rt.ContainerConfig{ID: "x", Image: "nginx"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := gc.used["docker.io/library/nginx:latest"]; !ok {
		t.Errorf("marks %v, want docker.io/library/nginx:latest", gc.used)
	}
	var _ Runtime = r
	var _ cgroupPather = r
}

func TestImageGCRun(t *testing.T) {
	f := newFakeImages(1000, 800)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	gc, rec := newTestImageGC(f, clock)
	gc.cfg.CheckInterval, gc.cfg.Period = 5*time.Millisecond, time.Hour
	f.add("a", 100)
	f.add("b", 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { gc.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("the first listing", func() bool { gc.mu.Lock(); defer gc.mu.Unlock(); return len(gc.records) == 2 })
	// Usage is 100%, but both images are younger than the minimum age: the checks keep
	// failing, without removing anything.
	waitFor("a failed collection", func() bool { return len(rec.Events) > 0 })
	if len(f.left()) != 2 {
		t.Fatalf("left %v", f.left())
	}
	clock.advance(3 * time.Minute)
	gc.Trigger()
	waitFor("both images removed", func() bool { return len(f.left()) == 0 })

	off, _ := newTestImageGC(f, clock)
	off.cfg.HighThresholdPercent = 100
	off.run(ctx) // returns at once
}
