package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock returns times one millisecond apart, starting at a fixed instant.
func fakeClock() func() time.Time {
	var mu sync.Mutex
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Millisecond)
		return t
	}
}

// logFiles returns the rotated files and then the current one, and their total size.
func logFiles(t *testing.T, path string) ([]string, int64) {
	t.Helper()
	files, err := rotatedLogs(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err == nil {
		files = append(files, path)
	}
	var total int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	return files, total
}

func TestRotatingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	const maxSize, maxFiles = 1000, 3
	// The clock stands still: rotated names must still be distinct and ordered.
	still := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, err := openRotatingFile(path, maxSize, maxFiles, func() time.Time { return still })
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for i := range 200 {
		line := fmt.Sprintf("line %04d %s\n", i, strings.Repeat("x", 80)) // 91 bytes
		all = append(all, line)
		if _, err := r.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		files, total := logFiles(t, path)
		if len(files) > maxFiles || total > maxSize*maxFiles {
			t.Fatalf("after line %d: %d files, %d bytes; want at most %d files, %d bytes", i, len(files), total, maxFiles, maxSize*maxFiles)
		}
	}
	files, _ := logFiles(t, path)
	if len(files) != maxFiles {
		t.Fatalf("%d files, want %d: %v", len(files), maxFiles, files)
	}
	// The files, in name order, are the last lines written, each file within maxSize.
	var got bytes.Buffer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > maxSize || len(b) == 0 {
			t.Errorf("%s holds %d bytes, want 1..%d", f, len(b), maxSize)
		}
		got.Write(b)
	}
	if want := strings.Join(all, ""); !strings.HasSuffix(want, got.String()) || got.Len() < 2*(maxSize-91) {
		t.Fatalf("files hold %d bytes that are not the last lines written", got.Len())
	}

	// A line longer than maxSize gets a file of its own.
	long := strings.Repeat("y", 2*maxSize) + "\n"
	if _, err := r.Write([]byte(long)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	files, _ = logFiles(t, path)
	if b, _ := os.ReadFile(files[len(files)-2]); string(b) != long {
		t.Errorf("the long line's file holds %d bytes, want the line alone", len(b))
	}
	if b, _ := os.ReadFile(path); string(b) != "after\n" {
		t.Errorf("current file %q, want the line after the long one", b)
	}
	r.Close()

	// A logger started again for the path appends and counts the files already there.
	r, err = openRotatingFile(path, maxSize, 2, func() time.Time { return still.Add(-time.Hour) })
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if files, _ := logFiles(t, path); len(files) != 2 {
		t.Fatalf("reopened with 2 files kept: %v", files)
	}
	if _, err := r.Write([]byte(strings.Repeat("z", maxSize) + "\n")); err != nil {
		t.Fatal(err)
	}
	files, _ = logFiles(t, path)
	if len(files) != 2 {
		t.Fatalf("after a rotation with 2 files kept: %v", files)
	}
	if b, _ := os.ReadFile(files[0]); string(b) != "after\n" {
		t.Errorf("rotated file %s holds %q, want the previous current file", files[0], b)
	}
	if err := RemoveLogs(path); err != nil {
		t.Fatal(err)
	}
	if files, _ := logFiles(t, path); len(files) != 0 {
		t.Errorf("RemoveLogs left %v", files)
	}
}

// writeRotatedLog writes n stdout lines "line <i>" through the logger's writer into path.
func writeRotatedLog(t *testing.T, path string, n int, maxSize int64, maxFiles int) {
	t.Helper()
	clock := fakeClock()
	r, err := openRotatingFile(path, maxSize, maxFiles, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w := &criWriter{w: r, now: clock}
	for i := range n {
		w.write("stdout", "F", fmt.Appendf(nil, "line %d", i))
	}
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestReadLogsRotated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	// Lines are 40-41 bytes: 5 of them fill a file of 256 bytes.
	writeRotatedLog(t, path, 100, 256, 100)
	files, _ := logFiles(t, path)
	if len(files) < 10 {
		t.Fatalf("only %d files", len(files))
	}
	cur, _ := os.ReadFile(path)
	inCurrent := bytes.Count(cur, []byte("\n"))
	// The rotated files were last written before since (their lines' fake times say otherwise):
	// by modification time, only the current file is read.
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := since.Add(-time.Hour)
	for _, f := range files[:len(files)-1] {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts LogOptions
		want string
	}{
		{"all", LogOptions{Tail: -1}, lines(0, 100)},
		{"tail in the current file", LogOptions{Tail: int64(inCurrent)}, lines(100-inCurrent, 100)},
		{"tail over the boundary", LogOptions{Tail: int64(inCurrent) + 2}, lines(98-inCurrent, 100)},
		{"tail over many files", LogOptions{Tail: 42}, lines(58, 100)},
		{"tail beyond", LogOptions{Tail: 1000}, lines(0, 100)},
		{"tail 0", LogOptions{Tail: 0}, ""},
		{"limit bytes across files", LogOptions{Tail: -1, LimitBytes: int64(len(lines(0, 30)))}, lines(0, 30)},
		{"since skips old files", LogOptions{Tail: -1, Since: since}, lines(100-inCurrent, 100)},
	} {
		var out, errb bytes.Buffer
		if err := ReadLogs(ctx, path, tc.opts, &out, &errb); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if out.String() != tc.want || errb.Len() != 0 {
			t.Errorf("%s: got %q (stderr %q), want %q", tc.name, out.String(), errb.String(), tc.want)
		}
	}

	// Count-limited: the oldest lines are gone, the rest read in order.
	path = filepath.Join(t.TempDir(), "1.log")
	writeRotatedLog(t, path, 100, 256, 3)
	files, total := logFiles(t, path)
	if len(files) != 3 || total > 3*256 {
		t.Fatalf("%d files of %d bytes, want 3 of at most %d", len(files), total, 3*256)
	}
	var out bytes.Buffer
	if err := ReadLogs(ctx, path, LogOptions{Tail: -1}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n < 10 || out.String() != lines(100-n, 100) {
		t.Errorf("count-limited log reads %q", out.String())
	}
}

// TestReadLogsFollowRotation follows a log while a writer rotates it: every line comes out
// exactly once, in order.
func TestReadLogsFollowRotation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		maxSize  int64
		maxFiles int
		// lag bounds how far the writer may run ahead of the reader (0: free running).
		lag int
	}{
		// Many rotations while the reader sleeps between polls.
		{"free running", 20000, 4096, 1000, 0},
		// Only one rotated file kept: the reader keeps up, holding the rotated file it reads.
		{"two files", 600, 2048, 2, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "0.log")
			r, err := openRotatingFile(path, tc.maxSize, tc.maxFiles, time.Now)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			w := &criWriter{w: r, now: time.Now}
			w.write("stdout", "F", []byte("line 0"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &syncBuffer{mu: make(chan struct{}, 1)}
			done := make(chan error, 1)
			go func() { done <- ReadLogs(ctx, path, LogOptions{Follow: true, Tail: -1}, out, out) }()
			want := lines(0, tc.n)
			for i := 1; i < tc.n; i++ {
				if tc.lag > 0 {
					for deadline := time.Now().Add(10 * time.Second); strings.Count(out.String(), "\n") < i-tc.lag; {
						if time.Now().After(deadline) {
							t.Fatalf("reader stuck at %d lines while writing line %d", strings.Count(out.String(), "\n"), i)
						}
						time.Sleep(time.Millisecond)
					}
				}
				w.write("stdout", "F", fmt.Appendf(nil, "line %d", i))
			}
			rotated, _ := rotatedLogs(path)
			if tc.maxFiles > 2 && len(rotated) < 10 {
				t.Fatalf("only %d rotations", len(rotated))
			}
			for deadline := time.Now().Add(20 * time.Second); len(out.String()) < len(want) && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(250 * time.Millisecond) // nothing more may come
			if got := out.String(); got != want {
				gl := strings.Split(got, "\n")
				t.Fatalf("followed %d lines, want %d; first lines %q ... last %q", len(gl)-1, tc.n, gl[:min(3, len(gl))], gl[max(0, len(gl)-3):])
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("follow did not stop when ctx ended")
			}
		})
	}
}
