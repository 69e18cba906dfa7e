package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// Image garbage collection, as the kubelet's image GC manager does it: when the usage of the
// filesystem holding containerd's images reaches the high threshold, the unused images are
// removed, least recently used first, until usage is down to the low threshold. An image is
// never removed while a container (running or not, until it is removed) was created from it,
// nor before it has been on the host for the minimum age, nor while it is side-loaded from a
// tarball still in DIR/images (imported again at every start, it would only come back; delete
// the tarball to let it go). When an image was last used is kept in memory: when a worker
// looks it up or creates a container from it, and at every collection for the images of the
// existing containers; after an agent restart, every image counts as first seen then.

// The kubelet's defaults.
const (
	DefaultImageGCHighThreshold = 85
	DefaultImageGCLowThreshold  = 80
	DefaultImageMinimumGCAge    = 2 * time.Minute
)

// The reasons of the Node events of image garbage collection.
const (
	reasonFreedDiskSpace = "FreedDiskSpace"
	reasonImageGCFailed  = "ImageGCFailed"
)

// ImageGCConfig configures image garbage collection.
type ImageGCConfig struct {
	// HighThresholdPercent is the usage of the image filesystem (percent of its capacity, as
	// 100 - available*100/capacity) at which images are collected; 100 turns collection off.
	// LowThresholdPercent is the usage collection brings it down to.
	HighThresholdPercent, LowThresholdPercent int
	// MinimumAge is how long an image is kept after it was first seen.
	MinimumAge time.Duration
	// Period is how often images are listed and, when usage is high, collected (5m);
	// CheckInterval how often usage is measured between periods (30s).
	Period, CheckInterval time.Duration
	// Usage measures the image filesystem; nil: statfs of the runtime's ImageFSPath.
	Usage func(ctx context.Context) (FSUsage, error)
	// now replaces the clock in tests.
	now func() time.Time
}

// Validate checks the thresholds: 0 <= low < high <= 100.
func (c ImageGCConfig) Validate() error {
	if c.LowThresholdPercent < 0 || c.HighThresholdPercent > 100 || c.LowThresholdPercent >= c.HighThresholdPercent {
		return fmt.Errorf("image garbage collection thresholds: low %d%% and high %d%% must satisfy 0 <= low < high <= 100 (high 100 turns collection off)",
			c.LowThresholdPercent, c.HighThresholdPercent)
	}
	if c.MinimumAge < 0 {
		return fmt.Errorf("image garbage collection minimum age %s is negative", c.MinimumAge)
	}
	return nil
}

// FSUsage is the capacity of a filesystem and what is left of it for unprivileged users, in bytes.
type FSUsage struct {
	Capacity, Available int64
	// Inodes and InodesFree count the filesystem's inodes (0 when it has no fixed number).
	Inodes, InodesFree int64
}

// Percent is the usage as the kubelet computes it: 100 - available*100/capacity.
func (u FSUsage) Percent() int {
	if u.Capacity <= 0 {
		return 0
	}
	return 100 - int(u.Available*100/u.Capacity)
}

// StatfsUsage measures the filesystem holding dir. Available counts the blocks reserved for
// root (statfs f_bfree, not f_bavail, which the kubelet reads): flotilla and containerd
// write as root, and a filesystem with a large root reserve would otherwise look full.
func StatfsUsage(dir string) (FSUsage, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return FSUsage{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return FSUsage{Capacity: int64(st.Blocks) * st.Bsize, Available: int64(st.Bfree) * st.Bsize,
		Inodes: int64(st.Files), InodesFree: int64(st.Ffree)}, nil
}

// ImageGCRuntime is what image garbage collection needs of the runtime (nodes/runtime has it).
type ImageGCRuntime interface {
	ImageLister
	ListContainers(ctx context.Context) ([]rt.ContainerStatus, error)
	// RemoveImage removes an image by ID and frees its space before it returns; it refuses
	// (rt.ErrImageInUse) an image a container uses.
	RemoveImage(ctx context.Context, ref string) error
	// SideLoadedImages are the IDs of the images to keep because their tarball is in DIR/images.
	SideLoadedImages(ctx context.Context) (map[string]string, error)
}

// imageFSPather is a runtime that knows where its images are (nodes/runtime does).
type imageFSPather interface {
	ImageFSPath(ctx context.Context) (string, error)
}

// imageRecord is what the collector knows of an image.
type imageRecord struct {
	names         []string
	size          int64
	firstDetected time.Time
	lastUsed      time.Time
}

// use is a mark of markUsed: when, and its sequence number.
type use struct {
	at  time.Time
	seq uint64
}

// imageGC is the collector of one host.
type imageGC struct {
	cfg      ImageGCConfig
	rt       ImageGCRuntime
	log      *logrus.Entry
	recorder record.EventRecorder
	node     *corev1.ObjectReference
	trigger  chan struct{}

	// mu guards what follows; a removal holds it, so markUsed waits until the image is gone
	// (the lookup or container create it precedes then finds no image, and pulls it again).
	mu      sync.Mutex
	records map[string]*imageRecord // by image ID
	used    map[string]use          // image names and IDs the workers used
	seq     uint64
}

func newImageGC(cfg ImageGCConfig, runtime ImageGCRuntime, recorder record.EventRecorder, nodeName string, log *logrus.Entry) *imageGC {
	if cfg.Period == 0 {
		cfg.Period = 5 * time.Minute
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = 30 * time.Second
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.Usage == nil {
		cfg.Usage = runtimeFSUsage(runtime)
	}
	return &imageGC{
		cfg: cfg, rt: runtime, log: log.WithField("component", "imagegc"), recorder: recorder,
		// The kubelet's reference to its Node in events.
		node:    &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)},
		trigger: make(chan struct{}, 1),
		records: map[string]*imageRecord{}, used: map[string]use{},
	}
}

// runtimeFSUsage measures the filesystem of the runtime's ImageFSPath, looked up until found.
func runtimeFSUsage(runtime ImageGCRuntime) func(ctx context.Context) (FSUsage, error) {
	var mu sync.Mutex
	var path string
	return func(ctx context.Context) (FSUsage, error) {
		mu.Lock()
		defer mu.Unlock()
		if path == "" {
			p, ok := runtime.(imageFSPather)
			if !ok {
				return FSUsage{}, errors.New("the runtime does not tell where its images are")
			}
			var err error
			if path, err = p.ImageFSPath(ctx); err != nil {
				return FSUsage{}, err
			}
		}
		return StatfsUsage(path)
	}
}

// markUsed records that ref (a reference or an image ID) is used now.
func (g *imageGC) markUsed(ref string) {
	key := ref
	if !strings.HasPrefix(ref, "sha256:") {
		if n, err := rt.NormalizeRef(ref); err == nil {
			key = n
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	g.used[key] = use{at: g.cfg.now(), seq: g.seq}
}

// Trigger asks for a collection now (when usage is high), without waiting for it.
func (g *imageGC) Trigger() {
	select {
	case g.trigger <- struct{}{}:
	default:
	}
}

// run lists the images at once (they all count as first seen now, those of the existing
// containers as used now), then every Period collects, and in between whenever a check finds
// usage at the high threshold (after a collection that could not free enough, not before a
// minute or the minimum age has passed, whichever is longer), until ctx ends.
func (g *imageGC) run(ctx context.Context) {
	if g.cfg.HighThresholdPercent >= 100 {
		g.log.Info("image garbage collection is off (high threshold 100%)")
		return
	}
	if _, _, err := g.detect(ctx, g.cfg.now()); err != nil {
		g.log.WithError(err).Warn("list images and containers for garbage collection")
	}
	last := g.cfg.now()
	var retryAt time.Time
	t := time.NewTicker(g.cfg.CheckInterval)
	defer t.Stop()
	for {
		triggered := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.trigger:
			triggered = true
		}
		now := g.cfg.now()
		due := now.Sub(last) >= g.cfg.Period
		if !due {
			u, err := g.cfg.Usage(ctx)
			if err != nil || u.Percent() < g.cfg.HighThresholdPercent || (!triggered && now.Before(retryAt)) {
				continue
			}
		}
		res, err := g.collect(ctx)
		last = g.cfg.now()
		if g.report(res, err) {
			retryAt = time.Time{}
		} else {
			retryAt = last.Add(max(time.Minute, g.cfg.MinimumAge))
		}
	}
}

// gcResult is what a collection did.
type gcResult struct {
	// High says whether usage was at the high threshold; Before and After are the usage
	// measured before and after.
	High          bool
	Before, After FSUsage
	// Goal is the available space that brings usage down to the low threshold.
	Goal int64
	// Removed are the images removed (a name, else the ID), Sizes the sum of their sizes.
	Removed []string
	Sizes   int64
	// Errs are the removals that failed.
	Errs []error
}

// Freed is the space that came free.
func (r gcResult) Freed() int64 { return max(r.After.Available-r.Before.Available, 0) }

// Reached says whether usage is down to the low threshold (or never was high).
func (r gcResult) Reached() bool { return !r.High || r.After.Available >= r.Goal }

// detect lists the images and the containers and brings the records up to date: an image seen
// for the first time is first detected now, one a container uses is used now. It returns the
// images in use and those side-loaded.
func (g *imageGC) detect(ctx context.Context, now time.Time) (inUse map[string]bool, pinned map[string]string, err error) {
	g.mu.Lock()
	startSeq := g.seq
	g.mu.Unlock()
	imgs, err := g.rt.ListImages(ctx)
	if err != nil {
		return nil, nil, err
	}
	conts, err := g.rt.ListContainers(ctx)
	if err != nil {
		return nil, nil, err
	}
	pinned, err = g.rt.SideLoadedImages(ctx)
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]string{}
	for _, im := range imgs {
		for _, n := range im.Names {
			byName[n] = im.ID
		}
	}
	inUse = map[string]bool{}
	for _, c := range conts {
		id := c.ImageID
		if id == "" {
			n, _ := rt.NormalizeRef(c.Image)
			id = byName[n]
		}
		if id != "" {
			inUse[id] = true
		}
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	keys := map[string]bool{}
	records := make(map[string]*imageRecord, len(imgs))
	for _, im := range imgs {
		rec := g.records[im.ID]
		if rec == nil {
			rec = &imageRecord{firstDetected: now}
		}
		rec.names, rec.size = im.Names, im.Size
		if inUse[im.ID] {
			rec.lastUsed = now
		}
		for _, k := range append([]string{im.ID}, im.Names...) {
			keys[k] = true
			if u, ok := g.used[k]; ok && u.at.After(rec.lastUsed) {
				rec.lastUsed = u.at
			}
		}
		records[im.ID] = rec
	}
	g.records = records
	// Marks of names that are no image (any more) go, unless made while listing: the image
	// they name may be being pulled.
	for k, u := range g.used {
		if !keys[k] && u.seq <= startSeq {
			delete(g.used, k)
		}
	}
	return inUse, pinned, nil
}

// candidates are the images that may go, least recently used first (then first seen first).
func (g *imageGC) candidates(now time.Time, inUse map[string]bool, pinned map[string]string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []string
	for id, rec := range g.records {
		if inUse[id] || pinned[id] != "" || now.Sub(rec.firstDetected) < g.cfg.MinimumAge {
			continue
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		a, b := g.records[ids[i]], g.records[ids[j]]
		if !a.lastUsed.Equal(b.lastUsed) {
			return a.lastUsed.Before(b.lastUsed)
		}
		if !a.firstDetected.Equal(b.firstDetected) {
			return a.firstDetected.Before(b.firstDetected)
		}
		return ids[i] < ids[j]
	})
	return ids
}

// collect updates the records and, when usage is at the high threshold, removes the candidates
// one at a time, measuring usage after each, until it is down to the low threshold.
func (g *imageGC) collect(ctx context.Context) (gcResult, error) {
	var res gcResult
	now := g.cfg.now()
	g.mu.Lock()
	startSeq := g.seq
	g.mu.Unlock()
	inUse, pinned, err := g.detect(ctx, now)
	if err != nil {
		return res, fmt.Errorf("list images and containers: %w", err)
	}
	u, err := g.cfg.Usage(ctx)
	if err != nil {
		return res, fmt.Errorf("measure the image filesystem: %w", err)
	}
	res.Before, res.After = u, u
	res.High = u.Percent() >= g.cfg.HighThresholdPercent
	if !res.High {
		return res, nil
	}
	res.Goal = u.Capacity * int64(100-g.cfg.LowThresholdPercent) / 100
	for _, id := range g.candidates(now, inUse, pinned) {
		if res.After.Available >= res.Goal {
			break
		}
		name, size, removed, err := g.remove(ctx, id, startSeq)
		if err != nil {
			res.Errs = append(res.Errs, err)
			continue
		}
		if !removed {
			continue
		}
		res.Removed = append(res.Removed, name)
		res.Sizes += size
		if u, err := g.cfg.Usage(ctx); err == nil {
			res.After = u
		} else {
			res.After.Available += size
		}
	}
	return res, nil
}

// remove removes image id unless a worker marked it used since the collection started.
func (g *imageGC) remove(ctx context.Context, id string, startSeq uint64) (name string, size int64, removed bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rec := g.records[id]
	if rec == nil {
		return "", 0, false, nil
	}
	for _, k := range append([]string{id}, rec.names...) {
		if u, ok := g.used[k]; ok && u.seq > startSeq {
			return "", 0, false, nil
		}
	}
	name = id
	if len(rec.names) > 0 {
		name = rec.names[0]
	}
	err = g.rt.RemoveImage(ctx, id)
	switch {
	case err == nil:
	case errors.Is(err, rt.ErrNotFound):
		delete(g.records, id)
		return "", 0, false, nil
	case errors.Is(err, rt.ErrImageInUse):
		rec.lastUsed = g.cfg.now()
		return "", 0, false, nil
	default:
		return "", 0, false, fmt.Errorf("remove image %s: %w", name, err)
	}
	delete(g.records, id)
	g.log.WithFields(logrus.Fields{"image": name, "id": id, "size": rec.size, "lastUsed": rec.lastUsed}).Info("unused image removed")
	return name, rec.size, true, nil
}

// report logs a collection and emits its Node event; it returns whether usage is down to the
// low threshold.
func (g *imageGC) report(res gcResult, err error) bool {
	if err != nil {
		g.log.WithError(err).Warn("image garbage collection failed")
		g.recorder.Eventf(g.node, corev1.EventTypeWarning, reasonImageGCFailed, "Image garbage collection failed: %v", err)
		return false
	}
	bytes := func(n int64) string {
		for _, u := range []struct {
			unit string
			size int64
		}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
			if n >= u.size {
				return fmt.Sprintf("%.1f%s", float64(n)/float64(u.size), u.unit)
			}
		}
		return fmt.Sprintf("%dB", n)
	}
	fields := logrus.Fields{"usageBefore": res.Before.Percent(), "usageAfter": res.After.Percent(), "freedBytes": res.Freed(),
		"removed": res.Removed, "highThreshold": g.cfg.HighThresholdPercent, "lowThreshold": g.cfg.LowThresholdPercent}
	if len(res.Removed) > 0 {
		g.log.WithFields(fields).Info("image garbage collection freed disk space")
		g.recorder.Eventf(g.node, corev1.EventTypeNormal, reasonFreedDiskSpace,
			"Freed %d bytes (%s) of the image filesystem by removing %d unused images (%s): usage %d%% -> %d%%",
			res.Freed(), bytes(res.Freed()), len(res.Removed), strings.Join(res.Removed, ", "), res.Before.Percent(), res.After.Percent())
	}
	if res.Reached() {
		if len(res.Errs) > 0 {
			g.log.WithError(errors.Join(res.Errs...)).Warn("image garbage collection: some images could not be removed")
		}
		return true
	}
	msg := fmt.Sprintf("Failed to garbage collect required amount of images: image filesystem usage is %d%% (high threshold %d%%), %d bytes (%s) more must be freed to reach the low threshold %d%%, and no other image may go (in use by a container, side-loaded from DIR/images, or younger than %s)",
		res.After.Percent(), g.cfg.HighThresholdPercent, res.Goal-res.After.Available, bytes(res.Goal-res.After.Available), g.cfg.LowThresholdPercent, g.cfg.MinimumAge)
	if len(res.Errs) > 0 {
		msg += "; " + errors.Join(res.Errs...).Error()
	}
	g.log.WithFields(fields).Warn(msg)
	g.recorder.Event(g.node, corev1.EventTypeWarning, reasonImageGCFailed, msg)
	return false
}

// imageUseRecorder is the runtime as the pod workers see it when images are collected: an image
// counts as used when a worker looks it up (before it pulls or uses it) and when it creates a
// container from it.
type imageUseRecorder struct {
	Runtime
	gc *imageGC
}

func (r imageUseRecorder) ImageStatus(ctx context.Context, ref string) (*rt.Image, error) {
	r.gc.markUsed(ref)
	return r.Runtime.ImageStatus(ctx, ref)
}

func (r imageUseRecorder) CreateContainer(ctx context.Context, c rt.ContainerConfig) error {
	r.gc.markUsed(c.Image)
	return r.Runtime.CreateContainer(ctx, c)
}

// CgroupPath keeps the runtime's cgroupPather (stats).
func (r imageUseRecorder) CgroupPath(id string) string {
	if p, ok := r.Runtime.(cgroupPather); ok {
		return p.CgroupPath(id)
	}
	return ""
}

// TriggerImageGC asks for an image garbage collection now; it removes images only when the
// image filesystem's usage is at the high threshold. Nothing happens without PodConfig.ImageGC.
func (m *PodManager) TriggerImageGC() {
	if m.images != nil {
		m.images.Trigger()
	}
}
