package ipvsvm

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// Initramfs collects files for a gzip-compressed newc cpio archive, the format the kernel
// unpacks into its initial root file system.
type Initramfs struct {
	entries map[string]entry
}

type entry struct {
	mode   uint32 // type and permission bits as in stat(2)
	data   []byte // file contents or symlink target
	source string // host file to copy instead of data
}

const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
)

// NewInitramfs returns an empty archive.
func NewInitramfs() *Initramfs { return &Initramfs{entries: map[string]entry{}} }

func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

func (r *Initramfs) parents(p string) {
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		if _, ok := r.entries[d]; !ok {
			r.entries[d] = entry{mode: modeDir | 0o755}
		}
	}
}

// Dir adds a directory (and its parents).
func (r *Initramfs) Dir(p string) {
	p = clean(p)
	r.parents(p)
	r.entries[p] = entry{mode: modeDir | 0o755}
}

// File adds a file with the given contents and permissions.
func (r *Initramfs) File(p string, perm os.FileMode, data []byte) {
	p = clean(p)
	r.parents(p)
	r.entries[p] = entry{mode: modeFile | uint32(perm.Perm()), data: data}
}

// HostFile adds a copy of a host file (read when the archive is written), keeping its
// permissions; symlinks are followed.
func (r *Initramfs) HostFile(p, src string) error {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	p = clean(p)
	r.parents(p)
	r.entries[p] = entry{mode: modeFile | uint32(st.Mode().Perm()), source: src}
	return nil
}

// Symlink adds a symbolic link p -> target.
func (r *Initramfs) Symlink(p, target string) {
	p = clean(p)
	r.parents(p)
	r.entries[p] = entry{mode: modeSymlink | 0o777, data: []byte(target)}
}

// Has reports whether p is in the archive.
func (r *Initramfs) Has(p string) bool { _, ok := r.entries[clean(p)]; return ok }

// WriteTo writes the gzip-compressed archive, parents before children.
func (r *Initramfs) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	// BestSpeed: the guest decompresses it under emulation too, and level barely matters.
	gz, _ := gzip.NewWriterLevel(cw, gzip.BestSpeed)
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	sort.Strings(names) // "a" sorts before "a/b"
	ino := uint32(1)
	for _, n := range names {
		e := r.entries[n]
		data := e.data
		if e.source != "" {
			var err error
			if data, err = os.ReadFile(e.source); err != nil {
				return cw.n, fmt.Errorf("initramfs: %w", err)
			}
		}
		if err := writeEntry(gz, n, e.mode, ino, data); err != nil {
			return cw.n, err
		}
		ino++
	}
	if err := writeEntry(gz, "TRAILER!!!", 0, 0, nil); err != nil {
		return cw.n, err
	}
	if err := gz.Close(); err != nil {
		return cw.n, err
	}
	return cw.n, nil
}

func writeEntry(w io.Writer, name string, mode, ino uint32, data []byte) error {
	nlink := 1
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	buf := make([]byte, 0, len(hdr)+len(name)+8)
	buf = append(buf, hdr...)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	if _, err := w.Write(buf); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	if n := len(data) % 4; n != 0 {
		if _, err := w.Write(make([]byte, 4-n)); err != nil {
			return err
		}
	}
	return nil
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
