package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// emptyDirCheckInterval is how often the disk usage of the emptyDir volumes that have a
// sizeLimit is measured: the kubelet's eviction manager looks every 10 s.
const emptyDirCheckInterval = 10 * time.Second

// reasonEvicted is the pod status reason and the event reason of an eviction.
const reasonEvicted = "Evicted"

// systemCriticalPriority is the priority from which pods are critical and never evicted.
const systemCriticalPriority = 2000000000

// emptyDirMessage is the pod status message and event message of a pod evicted for an
// emptyDir over its sizeLimit, word for word as the kubelet writes it (with its trailing space).
func emptyDirMessage(volume string, limit resource.Quantity) string {
	return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", volume, limit.String())
}

// dirUsage returns the disk space used under dir, counted as du counts it: the blocks
// allocated to dir and to everything below it (so a sparse file counts what it holds, not
// its length), found with lstat so symbolic links are never followed, each hard-linked file
// once, and nothing on another file system mounted below dir. A missing dir uses nothing, and
// files removed during the walk are skipped.
func dirUsage(dir string) (int64, error) {
	var root syscall.Stat_t
	if err := syscall.Lstat(dir, &root); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	seen := map[uint64]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if st.Dev != root.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && st.Nlink > 1 {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		// st_blocks is in 512-byte units whatever the file system's block size.
		total += int64(st.Blocks) * 512
		return nil
	})
	return total, err
}

// diskEmptyDirLimit returns the sizeLimit of a disk-backed emptyDir volume, nil when v is
// not one or has no positive limit. A memory-backed emptyDir is a tmpfs of that size: writes
// beyond it fail, so it never needs an eviction.
func diskEmptyDirLimit(v *corev1.Volume) *resource.Quantity {
	e := v.EmptyDir
	if e == nil || e.Medium != corev1.StorageMediumDefault || e.SizeLimit == nil || e.SizeLimit.Sign() <= 0 {
		return nil
	}
	return e.SizeLimit
}

// emptyDirOverLimit measures the disk-backed emptyDir volumes of pod that have a sizeLimit
// (each in podDir/volumes/<name>) and returns the eviction message for the first whose usage
// exceeds its limit, "" when none does. A volume that cannot be measured is not judged; its
// error is returned after the others were.
func emptyDirOverLimit(pod *corev1.Pod, podDir string) (string, error) {
	var errs []error
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		limit := diskEmptyDirLimit(v)
		if limit == nil {
			continue
		}
		used, err := dirUsage(filepath.Join(podDir, "volumes", v.Name))
		if err != nil {
			errs = append(errs, fmt.Errorf("measure emptyDir %q: %w", v.Name, err))
			continue
		}
		if used > limit.Value() {
			return emptyDirMessage(v.Name, *limit), nil
		}
	}
	return "", errors.Join(errs...)
}

// mayEvict reports whether the host may evict pod: it runs or may still run and is not
// critical (a static or mirror pod, or one of system-critical priority, which the kubelet
// never evicts).
func mayEvict(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	if src, ok := pod.Annotations["kubernetes.io/config.source"]; ok && src != "api" {
		return false
	}
	return pod.Spec.Priority == nil || *pod.Spec.Priority < systemCriticalPriority
}

// evictable reports whether the emptyDir volumes of pod are watched: mayEvict, and it has an
// emptyDir on disk with a sizeLimit.
func evictable(pod *corev1.Pod) bool {
	if !mayEvict(pod) {
		return false
	}
	for i := range pod.Spec.Volumes {
		if diskEmptyDirLimit(&pod.Spec.Volumes[i]) != nil {
			return true
		}
	}
	return false
}

// watchEmptyDirs measures, every emptyDirCheckInterval until ctx ends, the emptyDir volumes
// with a sizeLimit of the pods running here, and has the worker of a pod with a volume over
// its limit evict it. It runs apart from the pod workers: a slow walk over a large volume
// only delays the next measurement.
func (m *PodManager) watchEmptyDirs(ctx context.Context) {
	t := time.NewTicker(emptyDirCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.checkEmptyDirs()
	}
}

// checkEmptyDirs is one round of watchEmptyDirs. As the kubelet's eviction manager, it
// records a Warning event Evicted on the pod when it decides, then leaves the stopping to the
// pod's worker.
func (m *PodManager) checkEmptyDirs() {
	pods, err := m.pods.List(labels.Everything())
	if err != nil {
		m.log.WithError(err).Warn("list pods to measure their emptyDir volumes")
		return
	}
	for _, pod := range pods {
		if !evictable(pod) {
			continue
		}
		m.mu.Lock()
		w := m.workers[pod.UID]
		m.mu.Unlock()
		if w == nil || w.eviction.Load() != nil {
			continue
		}
		msg, err := emptyDirOverLimit(pod, m.podDir(pod.UID))
		if err != nil {
			m.log.WithError(err).WithField("pod", pod.Namespace+"/"+pod.Name).Warn("measure emptyDir volumes")
		}
		if msg == "" || !w.eviction.CompareAndSwap(nil, &msg) {
			continue
		}
		m.recorder.Event(pod, corev1.EventTypeWarning, reasonEvicted, msg)
		m.log.WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name, "message": msg}).Info("evicting pod")
		w.kick()
	}
}

// evict ends the pod for the eviction message msg, as the kubelet's eviction manager does.
// The running containers are stopped as for a deletion (preStop hooks, then the pod's grace
// period); once none runs, the pod's phase becomes Failed with reason Evicted and msg, and its
// emptyDir volumes are removed to give their space back. The containers stay for their logs.
// An evicted pod is never started again: its controller replaces it.
func (w *podWorker) evict(ctx context.Context, pod *corev1.Pod, msg string) error {
	grace := gracePeriod(pod)
	if g := w.evictGrace.Load(); g != nil {
		grace = *g
	}
	if done, err := w.terminate(ctx, pod, reasonEvicted, msg, grace); !done || err != nil {
		return err
	}
	return removeEmptyDirs(pod, w.m.podDir(pod.UID))
}

// terminate stops the running containers of pod as for a deletion (preStop hooks, then
// grace) and, once none runs, makes its phase Failed with reason and msg. done is false
// while that status is not written yet (a conflict: the next sync tries again).
func (w *podWorker) terminate(ctx context.Context, pod *corev1.Pod, reason, msg string, grace time.Duration) (done bool, err error) {
	snap, err := w.m.containers(ctx, true)
	if err != nil {
		return false, err
	}
	specs := map[string]*corev1.Container{}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			specs[list[i].Name] = &list[i]
		}
	}
	var wg sync.WaitGroup
	for _, c := range snap[string(pod.UID)] {
		if c.State != rt.StateRunning {
			continue
		}
		name := c.Labels[labelContainer]
		w.event(pod, corev1.EventTypeNormal, "Killing", "Stopping container "+name)
		wg.Add(1)
		go func(id string, spec *corev1.Container) {
			defer wg.Done()
			w.stopContainer(ctx, pod, spec, id, grace)
		}(c.ID, specs[name])
	}
	wg.Wait()
	w.stopProbes("")
	snap, err = w.m.containers(ctx, true)
	if err != nil {
		return false, err
	}
	for _, c := range snap[string(pod.UID)] {
		if c.State == rt.StateRunning {
			return false, fmt.Errorf("%s pod: container %s is still running", reason, c.Labels[labelContainer])
		}
	}
	w.failed = [2]string{reason, msg}
	clear(w.waiting)
	if err := w.writeStatus(ctx, pod, attempts(snap[string(pod.UID)]), false); err != nil {
		return false, err
	}
	// Not written (a conflict): the next sync tries again.
	return w.lastStatus != nil && w.lastStatus.Phase == corev1.PodFailed, nil
}

// removeEmptyDirs removes the emptyDir volumes of a pod whose containers have stopped,
// unmounting the memory-backed ones.
func removeEmptyDirs(pod *corev1.Pod, podDir string) error {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil {
			continue
		}
		dir := filepath.Join(podDir, "volumes", v.Name)
		if isMountPoint(dir) {
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				return fmt.Errorf("unmount emptyDir %q: %w", v.Name, err)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove emptyDir %q: %w", v.Name, err)
		}
	}
	return nil
}

// memoryEmptyDirSize is the size in bytes of the tmpfs of a memory-backed emptyDir, as the
// kubelet sizes it: the smallest of the host's memory, the pod's memory limit and the volume's
// sizeLimit, of those that are known and positive; 0 when none is (the kernel's default size).
//
// The size bounds the volume itself: a write beyond it fails with ENOSPC. Besides, tmpfs
// pages are charged to the memory cgroup of the process that writes them, so what a container
// keeps in the volume counts against its memory limit like the memory it allocates.
func memoryEmptyDirSize(pod *corev1.Pod, e *corev1.EmptyDirVolumeSource, hostMemory int64) int64 {
	size := hostMemory
	lower := func(v int64) {
		if v > 0 && (size <= 0 || v < size) {
			size = v
		}
	}
	lower(podMemoryLimit(pod))
	if e.SizeLimit != nil {
		lower(e.SizeLimit.Value())
	}
	return max(size, 0)
}

// podMemoryLimit is the memory limit of the pod as a whole, 0 when it has none: the pod-level
// limit if set, else the largest of the app containers (with the sidecars) together and of
// each init container (with the sidecars started before it), plus the pod's overhead. A
// container without a memory limit leaves the pod without one.
func podMemoryLimit(pod *corev1.Pod) int64 {
	var overhead int64
	if q, ok := pod.Spec.Overhead[corev1.ResourceMemory]; ok {
		overhead = q.Value()
	}
	if pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Limits[corev1.ResourceMemory]; ok && q.Sign() > 0 {
			return q.Value() + overhead
		}
	}
	limit := func(c *corev1.Container) (int64, bool) {
		q, ok := c.Resources.Limits[corev1.ResourceMemory]
		return q.Value(), ok && q.Sign() > 0
	}
	var apps, sidecars, inits int64
	for i := range pod.Spec.Containers {
		v, ok := limit(&pod.Spec.Containers[i])
		if !ok {
			return 0
		}
		apps += v
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		v, ok := limit(c)
		if !ok {
			return 0
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars += v
			inits = max(inits, sidecars)
		} else {
			inits = max(inits, sidecars+v)
		}
	}
	return max(apps+sidecars, inits) + overhead
}
