package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"
)

// maxLogLine is the longest line written as one CRI entry; longer lines are split into partial
// ("P") entries, as the CRI does.
const maxLogLine = 16 * 1024

// RunLogger is containerd's binary:// log driver (the `flotilla logger` subcommand): the shim
// hands it the container's stdout on fd 3, stderr on fd 4 and a ready pipe on fd 5. It appends
// every line to path in CRI format ("<RFC3339Nano> stdout|stderr F|P <line>") until both
// streams end. It runs as a child of the shim, so it outlives agent restarts.
func RunLogger(path string) error {
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
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
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
	if n == 0 {
		return size, nil
	}
	end := size
	// The final newline ends the last line; it does not start one.
	if end > 0 {
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, end-1); err != nil {
			return 0, err
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
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] == '\n' {
				count++
				if count == n {
					return start + int64(i) + 1, nil
				}
			}
		}
		end = start
	}
	return 0, nil
}

// errLimit stops reading once LimitBytes were written.
var errLimit = errors.New("limit reached")

// ReadLogs prints a CRI-format log file with kubectl logs semantics: stdout lines to stdout,
// stderr lines to stderr. With Follow it waits for new lines until ctx ends.
func ReadLogs(ctx context.Context, path string, opts LogOptions, stdout, stderr io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read logs: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("read logs: %w", err)
	}
	off, err := tailOffset(f, fi.Size(), opts.Tail)
	if err != nil {
		return fmt.Errorf("read logs %s: %w", path, err)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("read logs %s: %w", path, err)
	}
	lw := &limitWriter{limit: opts.LimitBytes}
	br := bufio.NewReaderSize(f, 64*1024)
	var pending []byte
	for {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read logs %s: %w", path, err)
		}
		if errors.Is(err, io.EOF) {
			// An incomplete line is still being written: keep it for the next round.
			pending = append(pending, line...)
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
