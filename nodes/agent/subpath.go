package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A volumeMount with subPath mounts a path inside the volume, which a container may have
// turned into a symlink to anywhere on the host. As the kubelet does, the agent resolves the
// path below the volume directory (symlinks are followed only while they stay inside it),
// holds the result open with O_PATH, and bind-mounts that descriptor through /proc/self/fd
// onto a staging path under the pod's directory. containerd is then given the staging path,
// which no container can reach, so what the container sees is what was checked, whatever it
// does to the volume meanwhile.

// subPathsDir holds the staging mounts of a pod's subPath volumeMounts.
const subPathsDir = "volume-subpaths"

// subPathStaging is the staging path of the index-th volumeMount of a container.
func subPathStaging(podDir, volume, container string, index int) string {
	return filepath.Join(podDir, subPathsDir, volume, container, strconv.Itoa(index))
}

// validateSubPath refuses what the API refuses in subPath, and in subPathExpr once expanded:
// absolute paths and '..' components.
func validateSubPath(sub string) error {
	if filepath.IsAbs(sub) {
		return fmt.Errorf("subPath %q must be a relative path", sub)
	}
	for _, part := range strings.Split(sub, "/") {
		if part == ".." {
			return fmt.Errorf("subPath %q must not contain '..'", sub)
		}
	}
	return nil
}

// openSubPath opens sub below the volume directory volDir with O_PATH and returns the
// descriptor. A missing path is created as a directory, each component with mkdirat in its
// parent. A path that leaves the volume through a symlink is refused.
func openSubPath(volDir, sub string) (int, error) {
	if err := validateSubPath(sub); err != nil {
		return -1, err
	}
	root, err := unix.Open(volDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("subPath %q: open the volume: %w", sub, err)
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, sub, unix.O_PATH, 0, true)
	if errors.Is(err, unix.ENOENT) {
		fd, err = mkdirAllResolving(root, sub, 0o755, true)
	}
	switch {
	case errors.Is(err, unix.EXDEV):
		return -1, fmt.Errorf("subPath %q is outside the volume: a symlink in it leads out", sub)
	case errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("subPath %q: too many levels of symlinks", sub)
	case err != nil:
		return -1, fmt.Errorf("subPath %q: %w", sub, err)
	}
	return fd, nil
}

// bindSubPath bind-mounts sub of the volume directory volDir onto staging, replacing what an
// earlier attempt mounted there, and returns staging: the source to give the runtime.
func bindSubPath(volDir, sub, staging string) (string, error) {
	fd, err := openSubPath(volDir, sub)
	if err != nil {
		return "", err
	}
	// The descriptor stays open until the mount is made: the mount is of what it refers to.
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if err := unmountStaging(staging); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(staging), 0o750); err != nil {
		return "", err
	}
	if old, err := os.Lstat(staging); err == nil && old.IsDir() != isDir {
		if err := os.Remove(staging); err != nil {
			return "", err
		}
	}
	if isDir {
		if err := os.Mkdir(staging, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
	} else {
		f, err := os.OpenFile(staging, os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW, 0o640)
		if err != nil {
			return "", err
		}
		f.Close()
	}
	src := fmt.Sprintf("/proc/self/fd/%d", fd)
	if err := unix.Mount(src, staging, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("subPath %q: bind-mount onto %s: %w", sub, staging, err)
	}
	return staging, nil
}

// unmountStaging removes every mount stacked on a staging path.
func unmountStaging(p string) error {
	for {
		err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			// Not (or no longer) a mount point.
			return nil
		default:
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
}

// cleanupSubPaths unmounts and removes the pod's staging mounts. It removes entries one by
// one, never recursively, so a staging path that is still mounted stops the cleanup instead
// of having what it shows deleted.
func cleanupSubPaths(podDir string) error {
	base := filepath.Join(podDir, subPathsDir)
	vols, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, v := range vols {
		vdir := filepath.Join(base, v.Name())
		containers, err := os.ReadDir(vdir)
		if err != nil {
			return err
		}
		for _, c := range containers {
			cdir := filepath.Join(vdir, c.Name())
			mounts, err := os.ReadDir(cdir)
			if err != nil {
				return err
			}
			for _, m := range mounts {
				p := filepath.Join(cdir, m.Name())
				if err := unmountStaging(p); err != nil {
					return err
				}
				if err := os.Remove(p); err != nil {
					return err
				}
			}
			if err := os.Remove(cdir); err != nil {
				return err
			}
		}
		if err := os.Remove(vdir); err != nil {
			return err
		}
	}
	return os.Remove(base)
}
