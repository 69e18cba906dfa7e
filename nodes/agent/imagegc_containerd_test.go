package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/tools/record"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestImageGCRealContainerd collects images in a real containerd: the usage of the image
// filesystem is made to look high by a fake capacity over the real sizes of the images, and
// the collector removes the least recently used unused images down to the low threshold, for
// good (their content is gone from containerd), keeping the one a container uses and the one
// side-loaded from an image directory.
func TestImageGCRealContainerd(t *testing.T) {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if _, err := exec.LookPath("containerd"); err != nil {
		missing = append(missing, "containerd")
	}
	if len(missing) > 0 {
		msg := "needs " + strings.Join(missing, ", ") + " (install Debian's containerd; run as root)"
		if framework.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	r, err := rt.Start(ctx, rt.Config{Dir: filepath.Join(dir, "containerd"), CgroupParent: "/flotilla-test-imagegc",
		Log: logrus.NewEntry(log)})
	if err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	defer func() {
		_ = r.RemoveContainer(context.Background(), "user-of-c")
		_ = r.Close()
	}()

	// Images of random bytes (no shared layers), of different sizes.
	pack := func(name string, size int) string {
		t.Helper()
		bin := filepath.Join(dir, name+".bin")
		b := make([]byte, size)
		_, _ = rand.Read(b)
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		ref := "flotilla.local/gc-" + name + ":1"
		tarPath := filepath.Join(dir, name+".tar")
		if err := rt.PackImage(rt.PackOptions{Binary: bin, Name: ref}, tarPath); err != nil {
			t.Fatal(err)
		}
		return tarPath
	}
	sizes := map[string]int{"a": 1 << 20, "b": 2 << 20, "c": 3 << 20, "d": 3 << 19}
	for _, n := range []string{"a", "b", "c", "d"} {
		if _, err := r.ImportImage(ctx, pack(n, sizes[n])); err != nil {
			t.Fatal(err)
		}
	}
	// e comes from an image directory, as DIR/images.
	imagesDir := filepath.Join(dir, "images")
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	eTar := pack("e", 1<<19)
	if err := os.Rename(eTar, filepath.Join(imagesDir, "e.tar")); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	_ = os.Chtimes(filepath.Join(imagesDir, "e.tar"), old, old)
	wctx, wcancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { r.WatchImageDir(wctx, imagesDir); close(watched) }()
	ids := map[string]string{} // short name -> image ID
	imageSizes := map[string]int64{}
	listed := func() []string {
		t.Helper()
		imgs, err := r.ListImages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, im := range imgs {
			for _, n := range im.Names {
				short := strings.TrimSuffix(strings.TrimPrefix(n, "flotilla.local/gc-"), ":1")
				names = append(names, short)
				ids[short], imageSizes[short] = im.ID, im.Size
			}
		}
		sort.Strings(names)
		return names
	}
	for deadline := time.Now().Add(30 * time.Second); strings.Join(listed(), ",") != "a,b,c,d,e"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("images %v, want a,b,c,d,e", listed())
		}
	}
	// The label comes right after the import.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		pinned, err := r.SideLoadedImages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if pinned[ids["e"]] == filepath.Join(imagesDir, "e.tar") {
			if len(pinned) != 1 {
				t.Fatalf("side-loaded %v, want e only", pinned)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("side-loaded %v, want e from %s", pinned, imagesDir)
		}
	}
	wcancel()
	<-watched

	// A container (created, never started) uses c.
	if err := r.CreateContainer(ctx, rt.ContainerConfig{ID: "user-of-c", Image: "flotilla.local/gc-c:1"}); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveImage(ctx, ids["c"]); !errors.Is(err, rt.ErrImageInUse) {
		t.Fatalf("RemoveImage of an image in use = %v, want ErrImageInUse", err)
	}
	fsPath, err := r.ImageFSPath(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(fsPath, filepath.Join(dir, "containerd")) {
		t.Errorf("ImageFSPath = %s, want a directory below %s", fsPath, filepath.Join(dir, "containerd"))
	}
	if _, err := StatfsUsage(fsPath); err != nil {
		t.Error(err)
	}

	// The manifests of d and a, to check their content goes too.
	cctx := namespaces.WithNamespace(ctx, "flotilla")
	manifests := map[string]images.Image{}
	for _, n := range []string{"a", "b", "d"} {
		im, err := r.Client().ImageService().Get(cctx, "flotilla.local/gc-"+n+":1")
		if err != nil {
			t.Fatal(err)
		}
		manifests[n] = im
	}

	// Usage from the real sizes over a capacity such that removing d (never used) is not
	// enough to get down to 80% and removing d and then a (used before b) is.
	var total int64
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		total += imageSizes[n]
	}
	// Other files take base bytes, so that usage starts near 91%.
	base := max(8*(imageSizes["d"]+imageSizes["a"]/2)-total, 0)
	capacity := (base + total - imageSizes["d"] - imageSizes["a"]/2) * 100 / 80
	usage := func(ctx context.Context) (FSUsage, error) {
		imgs, err := r.ListImages(ctx)
		if err != nil {
			return FSUsage{}, err
		}
		used := base
		for _, im := range imgs {
			used += im.Size
		}
		return FSUsage{Capacity: capacity, Available: capacity - used}, nil
	}
	if u, _ := usage(ctx); u.Percent() < 85 {
		t.Fatalf("usage %d%% with sizes %v and capacity %d: the test needs at least 85%%", u.Percent(), imageSizes, capacity)
	}
	clock := &fakeClock{t: time.Now()}
	rec := record.NewFakeRecorder(10)
	gc := newImageGC(ImageGCConfig{HighThresholdPercent: 85, LowThresholdPercent: 80, MinimumAge: 2 * time.Minute,
		Usage: usage, now: clock.now}, r, rec, "host-1", logrus.NewEntry(log))
	if _, _, err := gc.detect(ctx, clock.now()); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Minute)
	gc.markUsed("flotilla.local/gc-a:1")
	clock.advance(time.Minute)
	gc.markUsed("flotilla.local/gc-b:1")
	clock.advance(10 * time.Minute)
	res, err := gc.collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gc.report(res, nil)
	t.Logf("collection: removed %v, freed %d bytes, usage %d%% -> %d%%; events %q", res.Removed, res.Freed(),
		res.Before.Percent(), res.After.Percent(), events(rec))
	if got := strings.Join(res.Removed, ","); got != "flotilla.local/gc-d:1,flotilla.local/gc-a:1" {
		t.Errorf("removed %s, want d then a", got)
	}
	if got := strings.Join(listed(), ","); got != "b,c,e" {
		t.Errorf("images left %s, want b,c,e", got)
	}
	if !res.Reached() || res.After.Percent() > 80 {
		t.Errorf("usage after %d%%, want at most 80%%", res.After.Percent())
	}
	if want := imageSizes["a"] + imageSizes["d"]; res.Freed() != want {
		t.Errorf("freed %d, want %d", res.Freed(), want)
	}
	for n, m := range manifests {
		_, err := r.Client().ContentStore().Info(cctx, m.Target.Digest)
		if gone := errdefs.IsNotFound(err); gone != (n != "b") {
			t.Errorf("content of %s (manifest %s): %v", n, m.Target.Digest, err)
		}
	}
	if _, err := r.ImageStatus(ctx, "flotilla.local/gc-d:1"); !errors.Is(err, rt.ErrNotFound) {
		t.Errorf("ImageStatus of a removed image = %v, want ErrNotFound", err)
	}
}
