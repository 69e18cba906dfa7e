package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// Volumes whose files the agent writes (configMap, secret, downwardAPI, projected) are laid
// out as the kubelet's AtomicWriter does:
//
//	..2024_01_02_15_04_05.000000001/   the payload of one update
//	..data -> ..2024_01_02_15_04_05.000000001
//	key -> ..data/key                   one link per top-level name of the payload
//
// An update writes a new timestamped directory, points ..data_tmp at it and renames that over
// ..data, so a reader sees either the old payload or the new one, never a mix. The agent runs
// as root while the directory is mounted into containers, so every operation is made relative
// to a descriptor of the volume directory and never follows a symlink.
const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
	tsLayout       = "..2006_01_02_15_04_05.000000000"
)

// tsDirName matches the timestamped directories the writer creates.
var tsDirName = regexp.MustCompile(`^\.\.[0-9]{4}_[0-9]{2}_[0-9]{2}_[0-9]{2}_[0-9]{2}_[0-9]{2}\.[0-9]+$`)

// writtenVolume reports whether the pod's volume name is one whose files the agent writes
// (configMap, secret, downwardAPI, projected). Containers always get those read-only, as with
// the kubelet, whatever their volumeMount says: the agent rewrites them as root.
func writtenVolume(pod *corev1.Pod, name string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			return v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
		}
	}
	return false
}

// writeAtomic makes dir hold exactly payload (paths may have subdirectories). Nothing is
// written when dir already holds it; entries that are not part of the layout above, such as
// the files of an older layout or links of keys that went away, are removed.
func writeAtomic(dir string, payload map[string]fileContent) error {
	clean, err := validatePayload(payload)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	vol, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open volume directory %s: %w", dir, err)
	}
	defer unix.Close(vol)

	ts := currentTsDir(vol)
	if ts == "" || !payloadMatches(vol, ts, clean) {
		next, err := newTsDir(vol)
		if err != nil {
			return err
		}
		if err := writePayload(vol, next, clean); err != nil {
			_ = removeAt(vol, next)
			return fmt.Errorf("write the volume's files: %w", err)
		}
		if err := removeAt(vol, newDataDirName); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		if err := unix.Symlinkat(next, vol, newDataDirName); err != nil {
			return fmt.Errorf("link %s: %w", newDataDirName, err)
		}
		if err := unix.Renameat(vol, newDataDirName, vol, dataDirName); err != nil {
			return fmt.Errorf("rename %s to %s: %w", newDataDirName, dataDirName, err)
		}
		ts = next
	}

	keep := map[string]bool{dataDirName: true, ts: true}
	for p := range clean {
		top, _, _ := strings.Cut(p, "/")
		if keep[top] {
			continue
		}
		keep[top] = true
		want := dataDirName + "/" + top
		if got, err := readlinkAt(vol, top); err == nil && got == want {
			continue
		}
		// Missing, or not the link the writer made: replace it, never write through it.
		if err := removeAt(vol, top); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		if err := unix.Symlinkat(want, vol, top); err != nil {
			return fmt.Errorf("link %s: %w", top, err)
		}
	}
	names, err := readDirNames(vol, ".")
	if err != nil {
		return err
	}
	for _, n := range names {
		if !keep[n] {
			if err := removeAt(vol, n); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("remove %s: %w", n, err)
			}
		}
	}
	return nil
}

// validatePayload checks that every path stays below the volume and cannot be mistaken for
// the writer's own entries, as the kubelet does, and returns the payload by clean path.
func validatePayload(payload map[string]fileContent) (map[string]fileContent, error) {
	out := make(map[string]fileContent, len(payload))
	for p, f := range payload {
		if len(p) > 4096 {
			return nil, fmt.Errorf("path %q is longer than 4096 characters", p)
		}
		if p == "" || path.IsAbs(p) {
			return nil, fmt.Errorf("path %q must be a relative path", p)
		}
		c := path.Clean(p)
		if c == "." || strings.HasPrefix(c, "..") {
			return nil, fmt.Errorf("path %q leaves the volume or starts with '..'", p)
		}
		for _, part := range strings.Split(c, "/") {
			if part == ".." {
				return nil, fmt.Errorf("path %q must not contain '..'", p)
			}
			if len(part) > 255 {
				return nil, fmt.Errorf("path %q has a component longer than 255 characters", p)
			}
		}
		out[c] = f
	}
	for p := range out {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := out[d]; ok {
				return nil, fmt.Errorf("path %q is both a file and a directory", d)
			}
		}
	}
	return out, nil
}

// currentTsDir returns the timestamped directory ..data points at, or "" when there is none
// or the link is not one the writer made.
func currentTsDir(vol int) string {
	target, err := readlinkAt(vol, dataDirName)
	if err != nil || !tsDirName.MatchString(target) {
		return ""
	}
	return target
}

// payloadMatches reports whether the directory ts holds exactly payload: the same files with
// the same contents, and nothing else. Modes are not compared, as by the kubelet: those of a
// pod's volumes cannot change, and fsGroup adds group bits to the files after they are written.
func payloadMatches(vol int, ts string, payload map[string]fileContent) bool {
	root, err := openBeneath(vol, ts, unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
	if err != nil {
		return false
	}
	defer unix.Close(root)
	dirs := map[string]bool{}
	for p := range payload {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	seen := 0
	var walk func(fd int, rel string) bool
	walk = func(fd int, rel string) bool {
		names, err := readDirNames(fd, ".")
		if err != nil {
			return false
		}
		for _, n := range names {
			p := path.Join(rel, n)
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return false
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				if !dirs[p] {
					return false
				}
				sub, err := openBeneath(fd, n, unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
				if err != nil {
					return false
				}
				ok := walk(sub, p)
				unix.Close(sub)
				if !ok {
					return false
				}
			case unix.S_IFREG:
				f, ok := payload[p]
				if !ok || st.Size != int64(len(f.data)) {
					return false
				}
				b, err := readFileAt(fd, n, len(f.data)+1)
				if err != nil || !bytes.Equal(b, f.data) {
					return false
				}
				seen++
			default:
				return false
			}
		}
		return true
	}
	return walk(root, "") && seen == len(payload)
}

// newTsDir creates a new timestamped directory in vol, readable by every user of the volume.
func newTsDir(vol int) (string, error) {
	now := time.Now().UTC()
	for i := 0; i < 100; i++ {
		name := now.Add(time.Duration(i)).Format(tsLayout)
		err := unix.Mkdirat(vol, name, 0o755)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("create %s: %w", name, err)
		}
		// The mode must not depend on the agent's umask.
		fd, err := openBeneath(vol, name, unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
		if err != nil {
			return "", err
		}
		err = unix.Fchmod(fd, 0o755)
		unix.Close(fd)
		if err != nil {
			return "", err
		}
		return name, nil
	}
	return "", fmt.Errorf("create a timestamped directory: every name is taken")
}

// writePayload writes payload into the fresh directory ts of vol.
func writePayload(vol int, ts string, payload map[string]fileContent) error {
	root, err := openBeneath(vol, ts, unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	names := make([]string, 0, len(payload))
	for p := range payload {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		f := payload[p]
		dir, base := path.Split(p)
		parent, err := mkdirAllBeneath(root, strings.TrimSuffix(dir, "/"), 0o755)
		if err != nil {
			return err
		}
		err = writeFileAt(parent, base, f.data, f.mode.Perm())
		unix.Close(parent)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// readVolumeFile reads the file p of the payload a written volume holds now.
func readVolumeFile(dir, p string) ([]byte, error) {
	vol, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(vol)
	ts := currentTsDir(vol)
	if ts == "" {
		return nil, fmt.Errorf("%s holds no written payload", dir)
	}
	return readFileAt(vol, ts+"/"+p, -1)
}

// writeFileAt creates the file name in dir (which must not exist) with data and mode.
func writeFileAt(dir int, name string, data []byte, mode os.FileMode) error {
	fd, err := openBeneath(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, uint32(mode), false)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	// The mode must not depend on the agent's umask.
	if err := unix.Fchmod(fd, uint32(mode)); err != nil {
		return err
	}
	return f.Close()
}

// readFileAt reads the file p below dir, without following symlinks; at most limit bytes when
// limit is not negative.
func readFileAt(dir int, p string, limit int) ([]byte, error) {
	fd, err := openBeneath(dir, p, unix.O_RDONLY, 0, false)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	if limit < 0 {
		return io.ReadAll(f)
	}
	return io.ReadAll(io.LimitReader(f, int64(limit)))
}

// readlinkAt returns the target of the symlink name in dir.
func readlinkAt(dir int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// readDirNames lists the directory p below dir, without following symlinks.
func readDirNames(dir int, p string) ([]string, error) {
	fd, err := openBeneath(dir, p, unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	return f.Readdirnames(-1)
}

// removeAt removes the entry name of dir: a file or symlink itself (never what a symlink
// points at), or a directory with everything in it.
func removeAt(dir int, name string) error {
	err := unix.Unlinkat(dir, name, 0)
	if err == nil || !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	sub, err := openBeneath(dir, name, unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
	if err != nil {
		return err
	}
	names, err := readDirNames(sub, ".")
	if err == nil {
		for _, n := range names {
			if err = removeAt(sub, n); err != nil && !errors.Is(err, unix.ENOENT) {
				break
			}
			err = nil
		}
	}
	unix.Close(sub)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
}

// mkdirAllBeneath creates the directory p below dir and its missing parents, creating each
// with mkdirat in the directory it belongs to, and returns a descriptor of it. A component
// that is a symlink fails the call unless follow is set, and then only symlinks that stay
// below dir are followed.
func mkdirAllBeneath(dir int, p string, mode uint32) (int, error) {
	return mkdirAllResolving(dir, p, mode, false)
}

func mkdirAllResolving(dir int, p string, mode uint32, follow bool) (int, error) {
	parts := strings.Split(p, "/")
	prefix := "."
	for i, part := range parts {
		if part == "" || part == "." {
			continue
		}
		next := path.Join(prefix, part)
		fd, err := openBeneath(dir, next, unix.O_PATH|unix.O_DIRECTORY, 0, follow)
		if errors.Is(err, unix.ENOENT) {
			parent, perr := openBeneath(dir, prefix, unix.O_PATH|unix.O_DIRECTORY, 0, follow)
			if perr != nil {
				return -1, perr
			}
			// mkdirat never follows a symlink in the name it creates.
			err = unix.Mkdirat(parent, part, mode)
			unix.Close(parent)
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, err
			}
			fd, err = openBeneath(dir, next, unix.O_PATH|unix.O_DIRECTORY, 0, follow)
		}
		if err != nil {
			return -1, err
		}
		if i < len(parts)-1 {
			unix.Close(fd)
		} else {
			return fd, nil
		}
		prefix = next
	}
	return openBeneath(dir, prefix, unix.O_PATH|unix.O_DIRECTORY, 0, follow)
}

// openBeneath opens p relative to the directory dir without ever leaving it: with follow
// false no component may be a symlink (RESOLVE_NO_SYMLINKS); with follow true symlinks are
// followed as long as they resolve below dir, and an absolute symlink or a '..' that climbs
// above dir fails with EXDEV (RESOLVE_BENEATH). Kernels without openat2 get the same
// semantics from a walk of one openat per component.
func openBeneath(dir int, p string, flags int, mode uint32, follow bool) (int, error) {
	resolve := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS)
	if !follow {
		resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	if flags&unix.O_CREAT == 0 {
		mode = 0
	}
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dir, p, how)
		switch {
		case errors.Is(err, unix.ENOSYS):
			return walkBeneath(dir, p, flags, mode, follow)
		case (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR)) && i < 64:
			// A rename or mount raced with the lookup: look up again.
			continue
		}
		return fd, err
	}
}

// walkBeneath is openBeneath with one openat per component: each component is opened with
// O_NOFOLLOW relative to the descriptor of its parent, symlinks are read and resolved here,
// and '..' pops the descriptors walked so far, so nothing above dir can be reached.
func walkBeneath(dir int, p string, flags int, mode uint32, follow bool) (int, error) {
	var stack []int
	defer func() {
		for _, fd := range stack {
			unix.Close(fd)
		}
	}()
	cur := func() int {
		if len(stack) == 0 {
			return dir
		}
		return stack[len(stack)-1]
	}
	parts := strings.Split(p, "/")
	links := 0
	for len(parts) > 0 {
		part := parts[0]
		parts = parts[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return -1, unix.EXDEV
			}
			unix.Close(stack[len(stack)-1])
			stack = stack[:len(stack)-1]
			continue
		}
		last := true
		for _, rest := range parts {
			if rest != "" && rest != "." {
				last = false
			}
		}
		var st unix.Stat_t
		err := unix.Fstatat(cur(), part, &st, unix.AT_SYMLINK_NOFOLLOW)
		if last && errors.Is(err, unix.ENOENT) && flags&unix.O_CREAT != 0 {
			// Created below; O_NOFOLLOW refuses a symlink planted meanwhile.
		} else if err != nil {
			return -1, err
		} else if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if !follow {
				return -1, unix.ELOOP
			}
			if links++; links > 40 {
				return -1, unix.ELOOP
			}
			target, err := readlinkAt(cur(), part)
			if err != nil {
				return -1, err
			}
			if strings.HasPrefix(target, "/") {
				return -1, unix.EXDEV
			}
			parts = append(strings.Split(target, "/"), parts...)
			continue
		}
		if last {
			fd, err := unix.Openat(cur(), part, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
			if err != nil {
				return -1, err
			}
			var got unix.Stat_t
			if err := unix.Fstat(fd, &got); err != nil || got.Mode&unix.S_IFMT == unix.S_IFLNK {
				// With O_PATH, O_NOFOLLOW opens a symlink swapped in after the check.
				unix.Close(fd)
				return -1, unix.ELOOP
			}
			return fd, nil
		}
		fd, err := unix.Openat(cur(), part, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		stack = append(stack, fd)
	}
	return unix.Openat(cur(), ".", flags|unix.O_CLOEXEC, mode)
}
