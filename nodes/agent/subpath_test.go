package agent

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// escapeVolume is a volume directory with symlinks that lead out of it in several ways and
// some that stay inside, next to an "outside" directory holding a file.
func escapeVolume(t *testing.T) (vol, outside string) {
	t.Helper()
	base := mountSafeTempDir(t)
	vol = filepath.Join(base, "pod", "volumes", "data")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(vol, "sub", "deeper"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "sub", "file"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"root":           "/",
		"up":             "../..",
		"parent":         "..",
		"abs":            outside,
		"sub/deeper/out": "../../../outside",
		"sub/around":     "deeper/../../..",
		"in":             "sub",
		"sub/back":       "../sub/file",
		"loop":           "loop",
	} {
		if err := os.Symlink(target, filepath.Join(vol, link)); err != nil {
			t.Fatal(err)
		}
	}
	return vol, outside
}

func sameFile(t *testing.T, fd int, p string) bool {
	t.Helper()
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(p, &b); err != nil {
		t.Fatal(err)
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// TestOpenSubPathContainsSymlinks: a subPath through a symlink that leads out of the volume
// (absolute, or climbing with '..') is refused, nothing is created outside, and symlinks
// that stay inside resolve; both with openat2 and with the per-component walk.
func TestOpenSubPathContainsSymlinks(t *testing.T) {
	resolvers := map[string]func(dir int, p string, flags int, mode uint32, follow bool) (int, error){
		"openat2": openBeneath, "walk": walkBeneath,
	}
	for rname, resolve := range resolvers {
		t.Run(rname, func(t *testing.T) {
			vol, outside := escapeVolume(t)
			root, err := unix.Open(vol, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(root)
			for _, p := range []string{"root", "root/tmp", "up", "parent", "abs", "abs/secret", "sub/deeper/out/secret",
				"sub/around", "sub/around/outside/secret", "loop"} {
				fd, err := resolve(root, p, unix.O_PATH, 0, true)
				if err == nil {
					unix.Close(fd)
					t.Errorf("%s: resolved, want refused", p)
				}
			}
			for p, want := range map[string]string{"in": "sub", "in/file": "sub/file", "sub/back": "sub/file", "sub/deeper/..": "sub", ".": "."} {
				fd, err := resolve(root, p, unix.O_PATH, 0, true)
				if err != nil {
					t.Errorf("%s: %v", p, err)
					continue
				}
				if !sameFile(t, fd, filepath.Join(vol, want)) {
					t.Errorf("%s did not resolve to %s", p, want)
				}
				unix.Close(fd)
			}
			// Without follow no symlink at all is crossed.
			if fd, err := resolve(root, "in/file", unix.O_RDONLY, 0, false); err == nil {
				unix.Close(fd)
				t.Error("in/file resolved without following symlinks")
			}
			if fd, err := resolve(root, "sub/file", unix.O_RDONLY, 0, false); err != nil {
				t.Errorf("sub/file: %v", err)
			} else {
				unix.Close(fd)
			}
			if names, _ := os.ReadDir(outside); len(names) != 1 {
				t.Errorf("outside holds %d entries, want only its file", len(names))
			}
		})
	}

	vol, outside := escapeVolume(t)
	for _, sub := range []string{"root", "up", "abs", "abs/created", "sub/deeper/out/created", "sub/around/created"} {
		fd, err := openSubPath(vol, sub)
		if err == nil {
			unix.Close(fd)
			t.Errorf("subPath %q was opened", sub)
		} else if !strings.Contains(err.Error(), "outside the volume") {
			t.Errorf("subPath %q: %v, want it called outside the volume", sub, err)
		}
	}
	for _, sub := range []string{"../data", "/etc"} {
		if fd, err := openSubPath(vol, sub); err == nil {
			unix.Close(fd)
			t.Errorf("subPath %q was opened", sub)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "created")); err == nil {
		t.Error("a missing subPath was created outside the volume")
	}
	// A missing subPath is created as a directory inside the volume, also through a
	// symlink that stays inside.
	for sub, want := range map[string]string{"new/dir": "new/dir", "in/made": "sub/made"} {
		fd, err := openSubPath(vol, sub)
		if err != nil {
			t.Errorf("subPath %q: %v", sub, err)
			continue
		}
		if st, err := os.Lstat(filepath.Join(vol, want)); err != nil || !st.IsDir() || !sameFile(t, fd, filepath.Join(vol, want)) {
			t.Errorf("subPath %q: %s was not created as the directory opened: %v", sub, want, err)
		}
		unix.Close(fd)
	}
}

func requireMounts(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
}

// mountSafeTempDir is a temporary directory that is removed at the end of the test only once
// nothing is mounted below it any more: a staging mount left by a failing test could show the
// host's root, which a recursive removal would then empty.
func mountSafeTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "flotilla-subpath-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; i < 10; i++ {
			left := mountsBelow(t, dir)
			if len(left) == 0 {
				if err := os.RemoveAll(dir); err != nil {
					t.Error(err)
				}
				return
			}
			for _, m := range left {
				_ = unix.Unmount(m, unix.MNT_DETACH)
			}
		}
		t.Errorf("mounts left below %s, not removed: %v", dir, mountsBelow(t, dir))
	})
	return dir
}

// mountsBelow lists the mount points below dir, deepest first.
func mountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// TestBindSubPathStagesWhatWasChecked: the staging mount shows the subPath that was resolved,
// even after the container swaps it for a symlink out of the volume; an escaping subPath is
// refused; a subPath of a written volume keeps its content when the volume is updated, as in
// Kubernetes; the pod's cleanup unmounts the staging mounts before removing anything.
func TestBindSubPathStagesWhatWasChecked(t *testing.T) {
	requireMounts(t)
	vol, outside := escapeVolume(t)
	podDir := filepath.Dir(filepath.Dir(vol))
	t.Cleanup(func() { _ = cleanupSubPaths(podDir) })

	staging, err := bindSubPath(vol, "in", subPathStaging(podDir, "data", "app", 0))
	if err != nil {
		t.Fatal(err)
	}
	if staging != filepath.Join(podDir, "volume-subpaths", "data", "app", "0") {
		t.Errorf("staging path %s", staging)
	}
	// The container replaces the directory with a symlink to the host after the check.
	if err := os.Rename(filepath.Join(vol, "sub"), filepath.Join(vol, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(vol, "sub")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(staging, "file")); err != nil || string(b) != "inside" {
		t.Errorf("staging shows %q, %v; want the checked directory's file", b, err)
	}
	if _, err := os.Stat(filepath.Join(staging, "secret")); err == nil {
		t.Error("staging shows the host directory")
	}
	// The next attempt resolves again: now the path leads out and is refused.
	if _, err := bindSubPath(vol, "in", subPathStaging(podDir, "data", "app", 0)); err == nil || !strings.Contains(err.Error(), "outside the volume") {
		t.Errorf("subPath through a swapped symlink: %v", err)
	}
	if _, err := bindSubPath(vol, "root", subPathStaging(podDir, "data", "app", 1)); err == nil {
		t.Error("subPath root -> / was mounted")
	}

	// A key of a written volume, through its links.
	cfg := filepath.Join(podDir, "volumes", "cfg")
	mustWrite(t, cfg, map[string]fileContent{"key": {[]byte("v1"), 0o644}})
	keyStaging, err := bindSubPath(cfg, "key", subPathStaging(podDir, "cfg", "app", 2))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, cfg, map[string]fileContent{"key": {[]byte("v2"), 0o644}})
	if b, err := os.ReadFile(keyStaging); err != nil || string(b) != "v1" {
		t.Errorf("subPath of a key shows %q, %v; want v1 kept", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(cfg, "key")); err != nil || string(b) != "v2" {
		t.Errorf("the volume shows %q, %v; want v2", b, err)
	}

	if err := cleanupPodDir(podDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(podDir); !os.IsNotExist(err) {
		t.Errorf("pod directory after cleanup: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "host" {
		t.Errorf("host file after cleanup: %q, %v", b, err)
	}
}

// TestBuildContainerConfigVolumeMounts: written volumes are mounted read-only whatever the
// volumeMount says, other volumes as asked, and subPath and subPathExpr mounts come from
// their staging paths.
func TestBuildContainerConfigVolumeMounts(t *testing.T) {
	requireMounts(t)
	podDir := mountSafeTempDir(t)
	t.Cleanup(func() { _ = cleanupSubPaths(podDir) })
	vols := map[string]string{}
	for _, n := range []string{"secret", "cm", "down", "proj", "scratch"} {
		vols[n] = filepath.Join(podDir, "volumes", n)
		if err := os.MkdirAll(vols[n], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/", filepath.Join(vols["scratch"], "escape")); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "1234"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
			{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
			{Name: "down", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}},
			{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}}}
	c := &corev1.Container{Name: "app", Image: "app", VolumeMounts: []corev1.VolumeMount{
		{Name: "secret", MountPath: "/s"}, {Name: "cm", MountPath: "/c"}, {Name: "down", MountPath: "/d"},
		{Name: "proj", MountPath: "/p"}, {Name: "scratch", MountPath: "/rw"}, {Name: "scratch", MountPath: "/ro", ReadOnly: true},
		{Name: "scratch", MountPath: "/logs", SubPathExpr: "logs/$(POD)"},
	}}
	cfg, err := buildContainerConfig(pod, c, containerParams{Env: []string{"POD=web"}, Volumes: vols, PodDir: podDir})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cfg.Mounts {
		want := map[string]bool{"/s": true, "/c": true, "/d": true, "/p": true, "/ro": true, "/rw": false, "/logs": false}
		if ro, ok := want[m.Destination]; ok && m.ReadOnly != ro {
			t.Errorf("mount %s read-only = %v, want %v", m.Destination, m.ReadOnly, ro)
		}
		if m.Destination == "/logs" && m.Source != subPathStaging(podDir, "scratch", "app", 6) {
			t.Errorf("subPathExpr mount from %s", m.Source)
		}
	}
	var created, staged syscall.Stat_t
	if err := syscall.Stat(filepath.Join(vols["scratch"], "logs", "web"), &created); err != nil {
		t.Fatalf("subPathExpr directory not created in the volume: %v", err)
	}
	if err := syscall.Stat(subPathStaging(podDir, "scratch", "app", 6), &staged); err != nil || staged.Ino != created.Ino {
		t.Errorf("the staging path does not show the subPath directory: %v", err)
	}

	c.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/x", SubPath: "escape"}}
	if _, err := buildContainerConfig(pod, c, containerParams{Volumes: vols, PodDir: podDir}); err == nil || !strings.Contains(err.Error(), "outside the volume") {
		t.Errorf("subPath escape -> /: %v", err)
	}
}
