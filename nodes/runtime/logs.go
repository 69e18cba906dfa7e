package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// maxLogLine is the longest line written as one CRI entry; longer lines are split into partial
// ("P") entries, as the CRI does.
const maxLogLine = 16 * 1024

// RunLogger is containerd's binary:// log driver (the `flotilla logger` subcommand): the shim
// hands it the container's stdout on fd 3, stderr on fd 4 and a ready pipe on fd 5. It appends
// every line to path in CRI format ("<RFC3339Nano> stdout|stderr F|P <line>") until both
// streams end, rotating the file at maxSize bytes and keeping maxFiles files (maxSize 0: no
// rotation; see rotatingFile). It runs as a child of the shim, so it outlives agent restarts.
func RunLogger(path string, maxSize int64, maxFiles int) error {
	stdout := os.NewFile(3, "container-stdout")
	stderr := os.NewFile(4, "container-stderr")
	ready := os.NewFile(5, "ready")
	if stdout == nil || stderr == nil || ready == nil {
		return errors.New("logger: fds 3, 4 and 5 are not open: this command is run by containerd's shim, not by hand")
	}
	if path == "" {
		ready.Close()
		return errors.New("logger: --path is required")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		ready.Close()
		return fmt.Errorf("logger: %w", err)
	}
	f, err := openRotatingFile(path, maxSize, maxFiles, time.Now)
	if err != nil {
		ready.Close()
		return fmt.Errorf("logger: %w", err)
	}
	defer f.Close()
	ready.Close()
	// One logger runs per container for its whole life: give back what the binary's package
	// initialisation allocated.
	debug.FreeOSMemory()
	w := &criWriter{w: f, now: time.Now}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.copyStream("stdout", stdout) }()
	go func() { defer wg.Done(); w.copyStream("stderr", stderr) }()
	wg.Wait()
	return nil
}

// criWriter writes CRI log lines; one Write per line, so readers never see torn entries.
type criWriter struct {
	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
}

func (c *criWriter) copyStream(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			c.write(stream, "F", bytes.TrimSuffix(line, []byte("\n")))
		case errors.Is(err, bufio.ErrBufferFull):
			c.write(stream, "P", line)
		default:
			if len(line) > 0 {
				c.write(stream, "F", line)
			}
			return
		}
	}
}

func (c *criWriter) write(stream, tag string, msg []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b bytes.Buffer
	b.Grow(len(msg) + 48)
	b.WriteString(c.now().UTC().Format(time.RFC3339Nano))
	b.WriteByte(' ')
	b.WriteString(stream)
	b.WriteByte(' ')
	b.WriteString(tag)
	b.WriteByte(' ')
	b.Write(msg)
	b.WriteByte('\n')
	_, _ = c.w.Write(b.Bytes())
}

// LogOptions select what ReadLogs prints, with kubectl logs semantics.
type LogOptions struct {
	// Follow keeps printing new lines until ctx ends.
	Follow bool
	// Tail is the number of last lines to print; <0 prints all.
	Tail int64
	// Since skips lines logged before it (zero: no limit).
	Since time.Time
	// Timestamps prefixes every line with its RFC3339Nano timestamp.
	Timestamps bool
	// LimitBytes stops after that many bytes (0: no limit).
	LimitBytes int64
}

// logEntry is one parsed CRI log line.
type logEntry struct {
	ts      time.Time
	rawTS   []byte
	stream  string
	partial bool
	msg     []byte
}

// parseCRILine parses "<ts> <stream> <F|P> <msg>" (without the trailing newline).
func parseCRILine(line []byte) (logEntry, error) {
	var e logEntry
	parts := bytes.SplitN(line, []byte(" "), 4)
	if len(parts) < 3 {
		return e, fmt.Errorf("malformed CRI log line %q", line)
	}
	ts, err := time.Parse(time.RFC3339Nano, string(parts[0]))
	if err != nil {
		return e, fmt.Errorf("malformed CRI log timestamp %q: %w", parts[0], err)
	}
	e.ts, e.rawTS, e.stream = ts, parts[0], string(parts[1])
	if e.stream != "stdout" && e.stream != "stderr" {
		return e, fmt.Errorf("malformed CRI log stream %q", parts[1])
	}
	switch string(parts[2]) {
	case "F":
	case "P":
		e.partial = true
	default:
		return e, fmt.Errorf("malformed CRI log tag %q", parts[2])
	}
	if len(parts) == 4 {
		e.msg = parts[3]
	}
	return e, nil
}

// tailOffset returns the offset of the first of the last n lines of f (size bytes long).
func tailOffset(f io.ReaderAt, size, n int64) (int64, error) {
	if n < 0 {
		return 0, nil
	}
	off, _, err := tailLines(f, size, n)
	return off, err
}

// tailLines returns the offset of the first of the last n (>= 0) lines of f (size bytes long)
// and how many lines start there: n, or fewer when f holds fewer (the offset is then 0).
func tailLines(f io.ReaderAt, size, n int64) (int64, int64, error) {
	if n <= 0 {
		return size, 0, nil
	}
	end := size
	// The final newline ends the last line; it does not start one.
	if end > 0 {
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, end-1); err != nil {
			return 0, 0, err
		}
		if b[0] == '\n' {
			end--
		}
	}
	const chunk = 32 * 1024
	buf := make([]byte, chunk)
	var count int64
	for end > 0 {
		start := max(end-chunk, 0)
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] == '\n' {
				count++
				if count == n {
					return start + int64(i) + 1, n, nil
				}
			}
		}
		end = start
	}
	if size > 0 {
		// The first line has no newline before it.
		count++
	}
	return 0, count, nil
}

// errLimit stops reading once LimitBytes were written.
var errLimit = errors.New("limit reached")

// ReadLogs prints a container's CRI-format log with kubectl logs semantics: stdout lines to
// stdout, stderr lines to stderr. It reads the rotated files of path (see rotatingFile) oldest
// first, then path itself. With Follow it waits for new lines until ctx ends, moving on to the
// new file when the logger rotates the one it reads.
func ReadLogs(ctx context.Context, path string, opts LogOptions, stdout, stderr io.Writer) error {
	path = filepath.Clean(path)
	c, err := openLogCursor(path, opts)
	if err != nil {
		return fmt.Errorf("read logs: %w", err)
	}
	defer func() { c.f.Close() }()
	lw := &limitWriter{limit: opts.LimitBytes}
	br := bufio.NewReaderSize(c.f, 64*1024)
	var pending []byte
	for {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read logs %s: %w", path, err)
		}
		if errors.Is(err, io.EOF) {
			// An incomplete line is still being written: keep it for the next round.
			pending = append(pending, line...)
			prev := c.f
			moved, err := c.advance()
			if err != nil {
				return fmt.Errorf("read logs %s: %w", path, err)
			}
			if moved {
				if c.f != prev {
					// A finished file ends with a whole line; a torn one is dropped.
					br.Reset(c.f)
					pending = nil
				}
				continue
			}
			if !opts.Follow {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if len(pending) > 0 {
			line = append(pending, line...)
			pending = nil
		}
		e, perr := parseCRILine(bytes.TrimSuffix(line, []byte("\n")))
		if perr != nil {
			continue
		}
		if !opts.Since.IsZero() && e.ts.Before(opts.Since) {
			continue
		}
		w := stdout
		if e.stream == "stderr" {
			w = stderr
		}
		var out []byte
		if opts.Timestamps {
			out = append(append(out, e.rawTS...), ' ')
		}
		out = append(out, e.msg...)
		if !e.partial {
			out = append(out, '\n')
		}
		if err := lw.write(w, out); err != nil {
			if errors.Is(err, errLimit) {
				return nil
			}
			return fmt.Errorf("write logs: %w", err)
		}
	}
}

// logCursor reads a container's log as one stream: its rotated files oldest first, then the
// current file, which it follows through rotations. The logger renames the current file only
// after its last write to it returned, and names rotated files in increasing order, so a
// rotation shows as a rotated file newer than the ones known when the current file was opened.
type logCursor struct {
	path string
	f    *os.File
	// rotated: f is a rotated (finished) file and name is its name, or, when f was removed
	// already, a name sorting just before f's successor. Otherwise f was opened as the current
	// file and mark is the newest rotated file then ("": none).
	rotated    bool
	name, mark string
}

func (c *logCursor) set(f *os.File, rotated bool, name, mark string) {
	c.f, c.rotated, c.name, c.mark = f, rotated, name, mark
}

// openLogCursor opens the log at path where opts want reading to start: at the tail's first
// line, which may be in a rotated file, or at the oldest rotated file that may hold lines since
// opts.Since.
func openLogCursor(path string, opts LogOptions) (*logCursor, error) {
	c := &logCursor{path: path}
	var rotated []string
	for try := 0; ; try++ {
		var err error
		if rotated, err = rotatedLogs(path); err != nil {
			return nil, err
		}
		mark := ""
		if len(rotated) > 0 {
			mark = rotated[len(rotated)-1]
		}
		err = c.openCurrent(mark)
		if err == nil {
			break
		}
		// Between the logger's rename and its new file, there is no current file.
		if !errors.Is(err, fs.ErrNotExist) || len(rotated) == 0 || try == 5 {
			return nil, err
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The rotated files before the one opened.
	earlier := rotated
	if c.rotated {
		earlier = slices.DeleteFunc(slices.Clone(rotated), func(n string) bool { return n >= c.name })
	}
	if opts.Tail < 0 {
		for _, name := range earlier {
			f, err := os.Open(name)
			if err != nil {
				continue
			}
			// A file last written before Since holds no line since then.
			if fi, err := f.Stat(); !opts.Since.IsZero() && err == nil && fi.ModTime().Before(opts.Since) {
				f.Close()
				continue
			}
			c.f.Close()
			c.set(f, true, name, "")
			break
		}
		return c, nil
	}
	fi, err := c.f.Stat()
	if err != nil {
		c.f.Close()
		return nil, err
	}
	off, n, err := tailLines(c.f, fi.Size(), opts.Tail)
	if err != nil {
		c.f.Close()
		return nil, err
	}
	for i := len(earlier) - 1; n < opts.Tail && i >= 0; i-- {
		f, err := os.Open(earlier[i])
		if err != nil {
			// Removed by the logger: start after it.
			break
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			break
		}
		o, m, err := tailLines(f, fi.Size(), opts.Tail-n)
		if err != nil {
			f.Close()
			break
		}
		c.f.Close()
		c.set(f, true, earlier[i], "")
		off, n = o, n+m
	}
	if _, err := c.f.Seek(off, io.SeekStart); err != nil {
		c.f.Close()
		return nil, err
	}
	return c, nil
}

// openCurrent opens the current file as the successor of the rotated file mark ("": none). If
// rotations happened since mark, it opens the oldest newer rotated file instead.
func (c *logCursor) openCurrent(mark string) error {
	for {
		f, err := os.Open(c.path)
		if err != nil {
			return err
		}
		after, err := rotatedAfter(c.path, mark)
		if err != nil {
			f.Close()
			return err
		}
		if len(after) == 0 {
			c.set(f, false, "", mark)
			return nil
		}
		if sameFile(f, after[0]) {
			c.set(f, true, after[0], "")
			return nil
		}
		f.Close()
		if c.openRotated(after) {
			return nil
		}
		// All of them were removed meanwhile: look again.
	}
}

// openRotated opens the first of names that still exists.
func (c *logCursor) openRotated(names []string) bool {
	for _, name := range names {
		if f, err := os.Open(name); err == nil {
			c.set(f, true, name, "")
			return true
		}
	}
	return false
}

// advance is called at the end of c.f. It returns true when there is more to read, in c.f (it
// was rotated: what was written before the rename) or in the next file, which c.f now is; false
// when c.f is the current file and has nothing more yet.
func (c *logCursor) advance() (bool, error) {
	if !c.rotated {
		if fi, err := os.Stat(c.path); err == nil {
			if ffi, err := c.f.Stat(); err == nil && os.SameFile(fi, ffi) {
				return false, nil
			}
		}
		after, err := rotatedAfter(c.path, c.mark)
		if err != nil || len(after) == 0 {
			// Removed without a rotation (or not readable): nothing more to read.
			return false, err
		}
		// Rotated: drain c.f (one more read to its end), then go on after it.
		c.rotated, c.name = true, c.mark
		if sameFile(c.f, after[0]) {
			c.name = after[0]
		}
		return true, nil
	}
	after, err := rotatedAfter(c.path, c.name)
	if err != nil {
		return false, err
	}
	old := c.f
	if c.openRotated(after) {
		old.Close()
		return true, nil
	}
	if err := c.openCurrent(c.name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// Between a rename and the new file: try again later.
			return false, nil
		}
		return false, err
	}
	old.Close()
	return true, nil
}

// rotatedAfter returns the rotated files of path newer than name ("": all), oldest first.
func rotatedAfter(path, name string) ([]string, error) {
	rotated, err := rotatedLogs(path)
	if err != nil {
		return nil, err
	}
	i, _ := slices.BinarySearch(rotated, name)
	if i < len(rotated) && rotated[i] == name {
		i++
	}
	return rotated[i:], nil
}

func sameFile(f *os.File, name string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	ni, err := os.Stat(name)
	return err == nil && os.SameFile(fi, ni)
}

type limitWriter struct {
	limit, written int64
}

func (l *limitWriter) write(w io.Writer, b []byte) error {
	if l.limit > 0 {
		left := l.limit - l.written
		if left <= 0 {
			return errLimit
		}
		if int64(len(b)) > left {
			b = b[:left]
		}
	}
	n, err := w.Write(b)
	l.written += int64(n)
	if err != nil {
		return err
	}
	if l.limit > 0 && l.written >= l.limit {
		return errLimit
	}
	return nil
}
