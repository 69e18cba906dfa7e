package gitsync

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// memFS is the in-memory tree Render hands to kustomize: a filesys.FileSystem over a copy of
// the repository, so kustomize cannot read anything but the repository. kyaml's own
// in-memory file system accepts only names made of letters, digits and "-_.:" (and none
// containing ".."), so a repository with a directory like "ha-1.21+" or "my app" could not
// be copied into it at all. Here a name is anything git accepts: any bytes but "/" and NUL,
// other than "." and "..". Otherwise it behaves as kyaml's: paths are absolute from "/" (a
// leading "/" is optional), ".." cannot climb above the root, Walk and ReadDir go in
// lexical order, and Glob leaves out hidden files unless the pattern names them.
//
// While a render runs, bounds (see renderBounds) limit the reads: past the render's deadline,
// or once more bytes were read than its budget allows, every read fails with the limit's
// error. A file too large to copy (see writeRefused) is in the tree with its size but
// without content: reading it fails with the LimitError that refused it.
type memFS struct {
	root   *memNode
	bounds *renderBounds
}

var _ filesys.FileSystem = (*memFS)(nil)

type memNode struct {
	parent *memNode
	// path is the node's absolute, cleaned path ("/" for the root).
	path string
	// children is nil for a file.
	children map[string]*memNode
	content  []byte
	// refused is set for a file that was too large to copy: content is empty, size is the
	// file's size, and reading it fails with refused.
	refused *LimitError
	size    int64
}

func newMemFS() *memFS {
	return &memFS{root: &memNode{path: filesys.Separator, children: map[string]*memNode{}}}
}

func (n *memNode) isDir() bool { return n.children != nil }

func (n *memNode) name() string {
	if n.parent == nil {
		return n.path
	}
	return filepath.Base(n.path)
}

// memNotExist says a path does not exist; errors.Is(err, os.ErrNotExist) holds.
type memNotExist string

func (e memNotExist) Error() string { return fmt.Sprintf("'%s' doesn't exist", string(e)) }
func (e memNotExist) Unwrap() error { return os.ErrNotExist }

// names cleans p as a path from the root and returns its names (none for the root); ok is
// false when p is empty or climbs above the root.
func memNames(p string) (names []string, ok bool) {
	if p == "" {
		return nil, false
	}
	c := filepath.Clean(strings.TrimLeft(p, filesys.Separator))
	switch {
	case c == ".":
		return nil, true
	case c == "..", strings.HasPrefix(c, "../"):
		return nil, false
	}
	return strings.Split(c, filesys.Separator), true
}

// find returns the node at p, nil when there is none; an error when a file is in the way.
func (m *memFS) find(p string) (*memNode, error) {
	names, ok := memNames(p)
	if !ok {
		return nil, nil
	}
	n := m.root
	for _, name := range names {
		if !n.isDir() {
			return nil, fmt.Errorf("'%s' is not a directory", n.path)
		}
		if n = n.children[name]; n == nil {
			return nil, nil
		}
	}
	return n, nil
}

// existing returns the node at p, an error when there is none.
func (m *memFS) existing(p string) (*memNode, error) {
	n, err := m.find(p)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, memNotExist(p)
	}
	return n, nil
}

// mkdirAll creates the directory p and its parents and returns it.
func (m *memFS) mkdirAll(p string) (*memNode, error) {
	names, ok := memNames(p)
	if !ok {
		if p == "" {
			return m.root, nil
		}
		return nil, fmt.Errorf("cannot add a directory above '%s'", m.root.path)
	}
	n := m.root
	for _, name := range names {
		c := n.children[name]
		if c == nil {
			c = &memNode{parent: n, path: filepath.Join(n.path, name), children: map[string]*memNode{}}
			n.children[name] = c
		} else if !c.isDir() {
			return nil, fmt.Errorf("cannot make dir '%s'; a file of that name already exists in '%s'", name, n.path)
		}
		n = c
	}
	return n, nil
}

// writeNode creates or overwrites the file p (and its parent directories).
func (m *memFS) writeNode(p string, data []byte) (*memNode, error) {
	names, ok := memNames(p)
	if !ok || len(names) == 0 {
		return nil, fmt.Errorf("cannot write a file at '%s'", p)
	}
	dir, err := m.mkdirAll(filepath.Join(names[:len(names)-1]...))
	if err != nil {
		return nil, err
	}
	name := names[len(names)-1]
	n := dir.children[name]
	if n == nil {
		n = &memNode{parent: dir, path: filepath.Join(dir.path, name)}
		dir.children[name] = n
	} else if n.isDir() {
		return nil, fmt.Errorf("cannot write '%s': it is a directory", n.path)
	}
	n.content = append([]byte(nil), data...)
	n.refused, n.size = nil, 0
	return n, nil
}

// writeRefused records the file p (size bytes) without its content: reading it fails with
// err. A render that never reads the file is not affected by it.
func (m *memFS) writeRefused(p string, size int64, err *LimitError) error {
	n, werr := m.writeNode(p, nil)
	if werr != nil {
		return werr
	}
	n.refused, n.size = err, size
	return nil
}

// copyFile makes dst a copy of the file src, refused or not.
func (m *memFS) copyFile(src, dst string) error {
	s, err := m.existing(src)
	if err != nil {
		return err
	}
	if s.isDir() {
		return fmt.Errorf("cannot copy directory '%s'", s.path)
	}
	n, err := m.writeNode(dst, s.content)
	if err != nil {
		return err
	}
	n.refused, n.size = s.refused, s.size
	return nil
}

// contentSize is the number of bytes of the files' content (refused files not counted).
func (m *memFS) contentSize() int64 {
	var total int64
	_ = m.root.walk(func(_ string, info os.FileInfo, _ error) error {
		if i := info.(memInfo); !i.n.isDir() {
			total += int64(len(i.n.content))
		}
		return nil
	})
	return total
}

// read is the content of the file n, counted against the bounds.
func (m *memFS) read(n *memNode) ([]byte, error) {
	if n.refused != nil {
		return nil, m.bounds.fail(n.refused)
	}
	if err := m.bounds.charge(len(n.content)); err != nil {
		return nil, err
	}
	return append([]byte(nil), n.content...), nil
}

// Create makes an empty file, open for writing.
func (m *memFS) Create(p string) (filesys.File, error) {
	n, err := m.writeNode(p, nil)
	if err != nil {
		return nil, err
	}
	return &memFile{fs: m, node: n}, nil
}

// Mkdir creates a directory (and, as kyaml's in-memory file system does, its parents).
func (m *memFS) Mkdir(p string) error { return m.MkdirAll(p) }

// MkdirAll creates a directory and its parents.
func (m *memFS) MkdirAll(p string) error {
	_, err := m.mkdirAll(p)
	return err
}

// RemoveAll removes p and everything under it; a path that does not exist is no error.
func (m *memFS) RemoveAll(p string) error {
	n, err := m.find(p)
	if err != nil || n == nil {
		return err
	}
	if n.parent == nil {
		return fmt.Errorf("cannot remove a root node")
	}
	delete(n.parent.children, n.name())
	return nil
}

// Open opens p for reading and writing at offset 0.
func (m *memFS) Open(p string) (filesys.File, error) {
	if err := m.bounds.check(); err != nil {
		return nil, err
	}
	n, err := m.existing(p)
	if err != nil {
		return nil, err
	}
	if n.refused != nil {
		_, err := m.read(n)
		return nil, err
	}
	return &memFile{fs: m, node: n}, nil
}

// IsDir reports whether p is a directory.
func (m *memFS) IsDir(p string) bool {
	n, err := m.find(p)
	return err == nil && n != nil && n.isDir()
}

// ReadDir lists the names in directory p, sorted.
func (m *memFS) ReadDir(p string) ([]string, error) {
	if err := m.bounds.check(); err != nil {
		return nil, err
	}
	n, err := m.existing(p)
	if err != nil {
		return nil, err
	}
	if !n.isDir() {
		return nil, fmt.Errorf("%s is not a directory", p)
	}
	return n.sortedNames(), nil
}

func (n *memNode) sortedNames() []string {
	out := make([]string, 0, len(n.children))
	for name := range n.children {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// CleanedAbs returns p's directory (p itself when it is one) and file name.
func (m *memFS) CleanedAbs(p string) (filesys.ConfirmedDir, string, error) {
	if err := m.bounds.check(); err != nil {
		return "", "", err
	}
	n, err := m.find(p)
	if err != nil {
		return "", "", fmt.Errorf("unable to clean: %w", err)
	}
	if n == nil {
		return "", "", memNotExist(p)
	}
	if n.isDir() {
		return filesys.ConfirmedDir(n.path), "", nil
	}
	return filesys.ConfirmedDir(n.parent.path), n.name(), nil
}

// Exists reports whether p is a file or directory.
func (m *memFS) Exists(p string) bool {
	n, err := m.find(p)
	return err == nil && n != nil
}

// Glob returns the files whose absolute path matches pattern (filepath.Match), sorted;
// hidden files only when the pattern names hidden files.
func (m *memFS) Glob(pattern string) ([]string, error) {
	if err := m.bounds.check(); err != nil {
		return nil, err
	}
	var all []string
	err := m.root.walk(func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		ok, err := filepath.Match(pattern, p)
		if ok {
			all = append(all, p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !filesys.IsHiddenFilePath(pattern) {
		all = filesys.RemoveHiddenFiles(all)
	}
	slices.Sort(all)
	return all, nil
}

// ReadFile returns a copy of the file's content.
func (m *memFS) ReadFile(p string) ([]byte, error) {
	if err := m.bounds.check(); err != nil {
		return nil, err
	}
	n, err := m.existing(p)
	if err != nil {
		return nil, err
	}
	if n.isDir() {
		return nil, fmt.Errorf("cannot read content from non-file '%s'", n.path)
	}
	return m.read(n)
}

// WriteFile creates or overwrites a file, creating its parent directories.
func (m *memFS) WriteFile(p string, data []byte) error {
	_, err := m.writeNode(p, data)
	return err
}

// Walk visits p and everything under it in lexical order, as filepath.Walk does.
func (m *memFS) Walk(p string, fn filepath.WalkFunc) error {
	if err := m.bounds.check(); err != nil {
		return err
	}
	n, err := m.existing(p)
	if err != nil {
		return err
	}
	return n.walk(fn)
}

func (n *memNode) walk(fn filepath.WalkFunc) error {
	err := fn(n.path, memInfo{n}, nil)
	if !n.isDir() || err != nil {
		if n.isDir() && errors.Is(err, filepath.SkipDir) {
			return nil
		}
		return err
	}
	for _, name := range n.sortedNames() {
		if err := n.children[name].walk(fn); err != nil {
			if errors.Is(err, filepath.SkipDir) {
				// A file asked to skip the rest of its directory.
				return nil
			}
			return err
		}
	}
	return nil
}

// memFile is an open file (or directory) of a memFS.
type memFile struct {
	fs     *memFS
	node   *memNode
	off    int
	closed bool
}

func (f *memFile) Read(b []byte) (int, error) {
	switch {
	case f.closed:
		return 0, fmt.Errorf("cannot read from closed file '%s'", f.node.path)
	case f.node.isDir():
		return 0, fmt.Errorf("cannot read content from non-file '%s'", f.node.path)
	case f.off >= len(f.node.content):
		return 0, io.EOF
	}
	if err := f.fs.bounds.check(); err != nil {
		return 0, err
	}
	n := min(len(b), len(f.node.content)-f.off)
	if err := f.fs.bounds.charge(n); err != nil {
		return 0, err
	}
	n = copy(b, f.node.content[f.off:])
	f.off += n
	return n, nil
}

// Write replaces the content from the offset on, as kyaml's in-memory files do.
func (f *memFile) Write(b []byte) (int, error) {
	switch {
	case f.closed:
		return 0, fmt.Errorf("cannot write to closed file '%s'", f.node.path)
	case f.node.isDir():
		return 0, fmt.Errorf("cannot write content to non-file '%s'", f.node.path)
	}
	f.node.content = append(f.node.content[:f.off], b...)
	f.node.refused, f.node.size = nil, 0
	f.off = len(f.node.content)
	return len(b), nil
}

func (f *memFile) Close() error {
	if f.closed {
		return fmt.Errorf("cannot close already closed file '%s'", f.node.path)
	}
	f.closed = true
	return nil
}

func (f *memFile) Stat() (os.FileInfo, error) { return memInfo{f.node}, nil }

// memInfo is the os.FileInfo of a memNode.
type memInfo struct{ n *memNode }

func (i memInfo) Name() string { return i.n.name() }
func (i memInfo) Size() int64 {
	if i.n.isDir() {
		return int64(len(i.n.children))
	}
	if i.n.refused != nil {
		return i.n.size
	}
	return int64(len(i.n.content))
}
func (i memInfo) Mode() os.FileMode {
	if i.n.isDir() {
		return os.ModeDir | 0o777
	}
	return 0o777
}
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.n.isDir() }
func (i memInfo) Sys() any           { return nil }
