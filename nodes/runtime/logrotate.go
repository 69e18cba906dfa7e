package runtime

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Container log rotation, as the kubelet's container log manager (--container-log-max-size,
// --container-log-max-files) but done by the logger itself, which owns the file: before a line
// would take the file past MaxSize, the file is renamed to <path>.<UTC timestamp> and a new one
// is started; the oldest rotated files are removed so that at most MaxFiles files exist (the
// current one included). Every file stays within MaxSize (a single line longer than that gets a
// file of its own), so a container's log takes at most MaxSize × MaxFiles on disk. Rotated files
// are not compressed.
//
// Readers (ReadLogs) read the rotated files in name order and then the current file; the
// timestamps have a fixed width and increase strictly (see rotatingFile.rotate), so name order
// is write order.

// rotatedTimeFormat is the suffix of a rotated log file: the kubelet's <log>.<timestamp>, with
// nanoseconds so that several rotations a second get distinct, ordered names.
const rotatedTimeFormat = "20060102-150405.000000000"

// rotatedLogs returns the rotated files of the log at path, oldest first.
func rotatedLogs(path string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	prefix := filepath.Base(path) + "."
	var out []string
	for _, e := range ents {
		if ts, ok := strings.CutPrefix(e.Name(), prefix); ok && e.Type().IsRegular() {
			if _, err := time.Parse(rotatedTimeFormat, ts); err == nil && len(ts) == len(rotatedTimeFormat) {
				out = append(out, filepath.Join(filepath.Dir(path), e.Name()))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// RemoveLogs removes a container's log file and its rotated files.
func RemoveLogs(path string) error {
	rotated, err := rotatedLogs(path)
	for _, p := range append(rotated, path) {
		if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
			err = rerr
		}
	}
	return err
}

// rotatingFile is the logger's output: an append-only file rotated by size. It is not safe for
// concurrent use (criWriter serialises writes).
type rotatingFile struct {
	path     string
	maxSize  int64 // 0: never rotate
	maxFiles int   // files kept, the current one included (at least 2 when rotating)
	now      func() time.Time

	f    *os.File
	size int64
	last time.Time // timestamp of the newest rotated file
}

// openRotatingFile opens (appends to) the log at path, counting the rotated files already there
// (a logger started again for the same path) against maxFiles.
func openRotatingFile(path string, maxSize int64, maxFiles int, now func() time.Time) (*rotatingFile, error) {
	path = filepath.Clean(path)
	if maxSize > 0 {
		maxFiles = max(maxFiles, 2)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	r := &rotatingFile{path: path, maxSize: maxSize, maxFiles: maxFiles, now: now, f: f, size: fi.Size()}
	if maxSize > 0 {
		rotated, _ := rotatedLogs(path)
		if len(rotated) > 0 {
			newest := rotated[len(rotated)-1]
			r.last, _ = time.Parse(rotatedTimeFormat, newest[len(path)+1:])
		}
		r.prune(rotated)
	}
	return r, nil
}

// Write appends p (one whole CRI line), rotating first when p would take the file past maxSize.
// A failed rotation is retried at the next line; meanwhile the file keeps growing.
func (r *rotatingFile) Write(p []byte) (int, error) {
	if r.maxSize > 0 && r.size > 0 && r.size+int64(len(p)) > r.maxSize {
		_ = r.rotate()
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

// rotate renames the current file to <path>.<timestamp>, starts a new one and removes the
// oldest rotated files beyond maxFiles-1. The rename comes after the last write to the old file
// returned, so a reader that sees the rename finds the old file complete.
func (r *rotatingFile) rotate() error {
	ts := r.now().UTC()
	if !ts.After(r.last) {
		// The clock stood still or went back: names must still sort in write order.
		ts = r.last.Add(time.Nanosecond)
	}
	// A failed open at the previous rotation left the file renamed already.
	if err := os.Rename(r.path, r.path+"."+ts.Format(rotatedTimeFormat)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	r.last = ts
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	r.f.Close()
	r.f, r.size = f, 0
	rotated, err := rotatedLogs(r.path)
	if err != nil {
		return err
	}
	r.prune(rotated)
	return nil
}

// prune removes the oldest of rotated until maxFiles-1 remain.
func (r *rotatingFile) prune(rotated []string) {
	for len(rotated) > r.maxFiles-1 {
		_ = os.Remove(rotated[0])
		rotated = rotated[1:]
	}
}

func (r *rotatingFile) Close() error { return r.f.Close() }
