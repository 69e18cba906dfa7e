package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
)

// The permission bits the kubelet adds for fsGroup: group read and write on writable
// volumes, group read on read-only ones, and group search with setgid on directories.
const (
	fsGroupRWMask   = 0o660
	fsGroupROMask   = 0o440
	fsGroupExecMask = 0o110
)

// applyVolumeOwnership gives a volume of the pod to the pod's fsGroup, as the kubelet's
// SetVolumeOwnership does: every file and directory gets the group and the group bits of
// fsGroupRWMask (fsGroupROMask for volumes containers get read-only), directories also group
// search and the setgid bit, so what containers create there belongs to the group too.
// Symbolic links get the group and are never followed.
//
// It is called after the volume is set up. The volumes the agent writes (configMap, secret,
// downwardAPI, projected) are walked every time and only what differs is changed; emptyDir
// and local persistent volumes, set up once by the kubelet, are walked only while their root
// lacks the group or the bits, and so are all of them with fsGroupChangePolicy
// OnRootMismatch. hostPath volumes and read-only claims are left alone, as the kubelet does.
func applyVolumeOwnership(pod *corev1.Pod, v *corev1.Volume, dir string, src volumeSources) error {
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.FSGroup == nil {
		return nil
	}
	gid := *psc.FSGroup
	readOnly, always := false, false
	switch {
	case v.EmptyDir != nil:
	case v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Projected != nil:
		readOnly, always = true, true
	case v.PersistentVolumeClaim != nil:
		if v.PersistentVolumeClaim.ReadOnly || !localVolume(pod, v.PersistentVolumeClaim.ClaimName, src) {
			return nil
		}
	case v.Ephemeral != nil:
		if !localVolume(pod, volumebinding.EphemeralClaimName(pod, v), src) {
			return nil
		}
	default:
		return nil
	}
	if psc.FSGroupChangePolicy != nil && *psc.FSGroupChangePolicy == corev1.FSGroupChangeOnRootMismatch {
		always = false
	}
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fsGroup %d: open %s: %w", gid, dir, err)
	}
	defer unix.Close(root)
	if !always {
		var st unix.Stat_t
		if err := unix.Fstat(root, &st); err != nil {
			return fmt.Errorf("fsGroup %d: %s: %w", gid, dir, err)
		}
		if !needsOwnership(&st, gid, readOnly) {
			return nil
		}
	}
	if err := ownEntry(root, gid, readOnly); err != nil {
		return fmt.Errorf("fsGroup %d: %s: %w", gid, dir, err)
	}
	if err := ownTree(root, gid, readOnly); err != nil {
		return fmt.Errorf("fsGroup %d: %s: %w", gid, dir, err)
	}
	return nil
}

// localVolume reports whether the claim is bound to a local persistent volume.
func localVolume(pod *corev1.Pod, claim string, src volumeSources) bool {
	if src.PVC == nil || src.PV == nil {
		return false
	}
	pvc, err := src.PVC(pod.Namespace, claim)
	if err != nil || pvc.Spec.VolumeName == "" {
		return false
	}
	pv, err := src.PV(pvc.Spec.VolumeName)
	return err == nil && pv.Spec.Local != nil
}

// fsGroupMode is the mode the kubelet gives a file or directory of mode m for fsGroup.
func fsGroupMode(m uint32, readOnly bool) uint32 {
	mask := uint32(fsGroupRWMask)
	if readOnly {
		mask = fsGroupROMask
	}
	if m&unix.S_IFMT == unix.S_IFDIR {
		mask |= unix.S_ISGID | fsGroupExecMask
	}
	return m&0o7777 | mask
}

// needsOwnership is the kubelet's check of a volume's root for OnRootMismatch.
func needsOwnership(st *unix.Stat_t, gid int64, readOnly bool) bool {
	return int64(st.Gid) != gid || st.Mode&0o7777 != fsGroupMode(st.Mode, readOnly)
}

// ownTree applies ownEntry to everything below the directory dir, through descriptors and
// without following symbolic links, so a container replacing a path while it runs cannot make
// it change anything outside the volume.
func ownTree(dir int, gid int64, readOnly bool) error {
	names, err := entryNames(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("%s: %w", n, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if int64(st.Gid) != gid {
				if err := unix.Fchownat(dir, n, -1, int(gid), unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("%s: %w", n, err)
				}
			}
			continue
		}
		fd, err := unix.Openat(dir, n, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("%s: %w", n, err)
		}
		err = ownEntry(fd, gid, readOnly)
		if err == nil {
			if err = unix.Fstat(fd, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				var sub int
				sub, err = unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err == nil {
					err = ownTree(sub, gid, readOnly)
					unix.Close(sub)
				}
			}
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s/%w", n, err)
		}
	}
	return nil
}

// ownEntry gives the file or directory open as fd (O_PATH or not) the group and mode
// fsGroup asks for, changing only what differs. Symbolic links are skipped.
func ownEntry(fd int, gid int64, readOnly bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil
	}
	if int64(st.Gid) != gid {
		if err := unix.Fchownat(fd, "", -1, int(gid), unix.AT_EMPTY_PATH); err != nil {
			return err
		}
	}
	// Changing the group of a file clears its setgid bit: read the mode again.
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if want := fsGroupMode(st.Mode, readOnly); st.Mode&0o7777 != want {
		// chmod through the descriptor's /proc link acts on the inode open as fd.
		if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), want); err != nil {
			return err
		}
	}
	return nil
}

// entryNames lists the directory open as fd.
func entryNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "volume directory")
	defer f.Close()
	return f.Readdirnames(-1)
}
