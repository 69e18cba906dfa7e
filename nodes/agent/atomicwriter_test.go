package agent

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// volumeEntries lists the names in dir.
func volumeEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

func mustWrite(t *testing.T, dir string, payload map[string]fileContent) {
	t.Helper()
	if err := writeAtomic(dir, payload); err != nil {
		t.Fatal(err)
	}
}

func mustReadlink(t *testing.T, p string) string {
	t.Helper()
	target, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	return target
}

// hostFile is a file outside every volume, standing for a file of the host that a container
// must never get the agent to write.
func hostFile(t *testing.T) (dir, file string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "host")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(dir, "passwd")
	if err := os.WriteFile(file, []byte("root:x:0:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

func assertHostUntouched(t *testing.T, dir, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil || string(b) != "root:x:0:0\n" {
		t.Errorf("host file after the write: %q, %v", b, err)
	}
	if st, err := os.Stat(file); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o644 {
		t.Errorf("host file mode after the write: %v", st.Mode())
	}
	if names := volumeEntries(t, dir); len(names) != 1 || names[0] != "passwd" {
		t.Errorf("host directory after the write holds %v, want only passwd", names)
	}
}

// TestAtomicWriterSwapsData: the payload lands in a timestamped directory that ..data points
// at, user-visible names are links through ..data, and an update swaps ..data, drops the old
// directory and the links of keys that went away.
func TestAtomicWriterSwapsData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	mustWrite(t, dir, map[string]fileContent{"a": {[]byte("1"), 0o644}, "sub/b": {[]byte("2"), 0o600}})
	first := mustReadlink(t, filepath.Join(dir, "..data"))
	if !tsDirName.MatchString(first) {
		t.Fatalf("..data -> %q, want a timestamped directory", first)
	}
	if got := mustReadlink(t, filepath.Join(dir, "a")); got != "..data/a" {
		t.Errorf("a -> %q, want ..data/a", got)
	}
	if got := mustReadlink(t, filepath.Join(dir, "sub")); got != "..data/sub" {
		t.Errorf("sub -> %q, want ..data/sub", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "b")); err != nil || string(b) != "2" {
		t.Errorf("sub/b = %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "sub", "b")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("sub/b mode: %v, %v", st, err)
	}
	if st, err := os.Stat(filepath.Join(dir, first)); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("timestamped directory mode: %v, %v", st, err)
	}

	mustWrite(t, dir, map[string]fileContent{"a": {[]byte("changed"), 0o640}})
	second := mustReadlink(t, filepath.Join(dir, "..data"))
	if second == first || !tsDirName.MatchString(second) {
		t.Fatalf("..data -> %q after an update, was %q", second, first)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a")); err != nil || string(b) != "changed" {
		t.Errorf("a after the update = %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "a")); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("a mode after the update: %v, %v", st, err)
	}
	want := []string{"..data", second, "a"}
	sort.Strings(want)
	if got := volumeEntries(t, dir); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("volume after the update holds %v, want %v", got, want)
	}
}

// TestAtomicWriterUnchangedWritesNothing: the same payload again leaves every file as it was,
// also when the files' group bits were changed since (fsGroup); changed contents are written.
func TestAtomicWriterUnchangedWritesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	payload := map[string]fileContent{"a": {[]byte("1"), 0o644}, "sub/b": {[]byte("2"), 0o600}}
	mustWrite(t, dir, payload)
	ts := mustReadlink(t, filepath.Join(dir, "..data"))
	ino := func(p string) uint64 {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	before := map[string]uint64{}
	for _, p := range []string{"..data", "a", "sub", ts + "/a", ts + "/sub/b"} {
		before[p] = ino(filepath.Join(dir, p))
	}
	if err := os.Chmod(filepath.Join(dir, ts, "sub", "b"), 0o640); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		mustWrite(t, dir, payload)
	}
	if got := mustReadlink(t, filepath.Join(dir, "..data")); got != ts {
		t.Fatalf("..data -> %q after writing the same payload, was %q", got, ts)
	}
	for p, n := range before {
		if ino(filepath.Join(dir, p)) != n {
			t.Errorf("%s was rewritten though the payload did not change", p)
		}
	}

	payload["sub/b"] = fileContent{[]byte("3"), 0o600}
	mustWrite(t, dir, payload)
	if got := mustReadlink(t, filepath.Join(dir, "..data")); got == ts {
		t.Error("changed contents were not written")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "b")); err != nil || string(b) != "3" {
		t.Errorf("sub/b = %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "sub", "b")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("sub/b mode: %v, %v", st, err)
	}
}

// TestAtomicWriterIgnoresPlantedSymlinks: symlinks to a host file or directory planted at a
// user-visible name, at ..data, ..data_tmp, inside the timestamped directory or as a stray
// entry never get the writer to write, chmod or remove anything outside the volume; they are
// replaced or removed themselves.
func TestAtomicWriterIgnoresPlantedSymlinks(t *testing.T) {
	payload := func(v string) map[string]fileContent {
		return map[string]fileContent{"a": {[]byte(v), 0o600}, "sub/b": {[]byte(v), 0o600}}
	}
	plants := map[string]func(t *testing.T, dir, ts, hostDir, hostFile string){
		"user-visible file": func(t *testing.T, dir, ts, hostDir, hostFile string) {
			replaceWithSymlink(t, hostFile, filepath.Join(dir, "a"))
		},
		"user-visible directory": func(t *testing.T, dir, ts, hostDir, hostFile string) {
			replaceWithSymlink(t, hostDir, filepath.Join(dir, "sub"))
		},
		"..data": func(t *testing.T, dir, ts, hostDir, hostFile string) {
			replaceWithSymlink(t, hostDir, filepath.Join(dir, "..data"))
		},
		"..data_tmp": func(t *testing.T, dir, ts, hostDir, hostFile string) {
			replaceWithSymlink(t, hostDir, filepath.Join(dir, "..data_tmp"))
		},
		"file inside ..data": func(t *testing.T, dir, ts, hostDir, hostFile string) {
			replaceWithSymlink(t, hostFile, filepath.Join(dir, ts, "a"))
		},
		"directory inside ..data": func(t *testing.T, dir, ts, hostDir, hostFile string) {
			if err := os.RemoveAll(filepath.Join(dir, ts, "sub")); err != nil {
				t.Fatal(err)
			}
			replaceWithSymlink(t, hostDir, filepath.Join(dir, ts, "sub"))
		},
		"stray entries": func(t *testing.T, dir, ts, hostDir, hostFile string) {
			replaceWithSymlink(t, hostDir, filepath.Join(dir, "stray"))
			replaceWithSymlink(t, hostFile, filepath.Join(dir, "a.flotilla-tmp"))
			if err := os.Mkdir(filepath.Join(dir, "olddir"), 0o755); err != nil {
				t.Fatal(err)
			}
			replaceWithSymlink(t, hostFile, filepath.Join(dir, "olddir", "link"))
		},
	}
	for name, plant := range plants {
		for _, next := range []string{"same", "updated"} {
			t.Run(name+", "+next+" payload", func(t *testing.T) {
				hostDir, hostFile := hostFile(t)
				dir := filepath.Join(t.TempDir(), "vol")
				mustWrite(t, dir, payload("same"))
				ts, _ := os.Readlink(filepath.Join(dir, "..data"))
				plant(t, dir, ts, hostDir, hostFile)
				err := writeAtomic(dir, payload(next))
				assertHostUntouched(t, hostDir, hostFile)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range []string{"a", "sub/b"} {
					b, err := os.ReadFile(filepath.Join(dir, p))
					if err != nil || string(b) != next {
						t.Errorf("%s = %q, %v; want %q", p, b, err, next)
					}
				}
				ts = mustReadlink(t, filepath.Join(dir, "..data"))
				want := []string{"..data", ts, "a", "sub"}
				sort.Strings(want)
				if got := volumeEntries(t, dir); strings.Join(got, " ") != strings.Join(want, " ") {
					t.Errorf("volume holds %v, want %v", got, want)
				}
			})
		}
	}
}

func replaceWithSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestAtomicWriterRefusesPathsOutside: payload paths that would leave the volume or collide
// with the writer's own entries are refused and nothing is written.
func TestAtomicWriterRefusesPathsOutside(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "vol")
	for _, p := range []string{"../escape", "/etc/escape", "a/../../escape", "..data/x", "..x", ".", ""} {
		if err := writeAtomic(dir, map[string]fileContent{p: {[]byte("x"), 0o644}}); err == nil {
			t.Errorf("path %q was accepted", p)
		}
	}
	if names := volumeEntries(t, parent); len(names) > 1 || len(names) == 1 && names[0] != "vol" {
		t.Errorf("the volume's parent holds %v", names)
	}
	if err := writeAtomic(dir, map[string]fileContent{"a": {nil, 0o644}, "a/b": {nil, 0o644}}); err == nil {
		t.Error("a path that is both a file and a directory was accepted")
	}
}

// TestAtomicWriterReplacesOldLayout: a volume written file by file before (plain files and
// directories, a leftover temporary file) takes the new layout on the first write.
func TestAtomicWriterReplacesOldLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	for p, v := range map[string]string{"a": "old", "sub/b": "old", "gone": "old", "a.flotilla-tmp": "x"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, dir, map[string]fileContent{"a": {[]byte("new"), 0o644}, "sub/b": {[]byte("new"), 0o644}})
	if got := mustReadlink(t, filepath.Join(dir, "a")); got != "..data/a" {
		t.Errorf("a -> %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "b")); err != nil || string(b) != "new" {
		t.Errorf("sub/b = %q, %v", b, err)
	}
	if got := volumeEntries(t, dir); len(got) != 4 {
		t.Errorf("volume holds %v, want ..data, its directory, a and sub", got)
	}
	if b, err := readVolumeFile(dir, "sub/b"); err != nil || string(b) != "new" {
		t.Errorf("readVolumeFile(sub/b) = %q, %v", b, err)
	}
}
