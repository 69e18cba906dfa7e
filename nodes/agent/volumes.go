package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/flotilla-dev/flotilla/internal/podvolumes"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
)

// volumeSources is what volumes may refer to.
type volumeSources struct {
	ConfigMap func(namespace, name string) (*corev1.ConfigMap, error)
	Secret    func(namespace, name string) (*corev1.Secret, error)
	PVC       func(namespace, name string) (*corev1.PersistentVolumeClaim, error)
	PV        func(name string) (*corev1.PersistentVolume, error)
	// ServiceAccountToken returns a token of the pod's service account for a projected
	// serviceAccountToken source, refreshed when due.
	ServiceAccountToken func(pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection) ([]byte, error)
	// Starting: no container of the pod has run on this host yet. As the kubelet, a claim
	// being deleted is then refused (a pod already running keeps its volumes).
	Starting bool
}

// errVolumeNotReady marks volumes that cannot be set up yet (an unbound claim, a missing
// ConfigMap): the pod waits in ContainerCreating and the agent retries.
var errVolumeNotReady = errors.New("volume not ready")

// prepareVolumes makes every volume of the pod available on the host under podDir and returns
// the host path of each by name. It is run on every sync, so ConfigMap, Secret and downward
// API contents follow changes of their sources and projected service account tokens are
// replaced when they are refreshed. The agent writes those four kinds with writeAtomic and
// containers get them read-only (see writtenVolume).
func prepareVolumes(pod *corev1.Pod, podDir string, src volumeSources) (map[string]string, error) {
	paths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(podDir, "volumes", v.Name)
		var err error
		switch {
		case v.EmptyDir != nil:
			err = emptyDir(dir, pod, v.EmptyDir)
		case v.ConfigMap != nil:
			err = writeConfigMapVolume(dir, pod, v.ConfigMap, src)
		case v.Secret != nil:
			err = writeSecretVolume(dir, pod, v.Secret, src)
		case v.DownwardAPI != nil:
			var files map[string]fileContent
			files, err = downwardFiles(pod, v.DownwardAPI.Items, v.DownwardAPI.DefaultMode)
			if err == nil {
				err = writeAtomic(dir, files)
			}
		case v.Projected != nil:
			err = writeProjected(dir, pod, v.Projected, src)
		case v.HostPath != nil:
			dir, err = hostPathVolume(v.HostPath)
		case v.PersistentVolumeClaim != nil:
			dir, err = claimPath(pod, v.PersistentVolumeClaim.ClaimName, src)
		case v.Ephemeral != nil:
			dir, err = ephemeralClaimPath(pod, &v, src)
		default:
			err = fmt.Errorf("volume type %s is not supported by flotilla (use %s)", podvolumes.TypeOf(&v.VolumeSource), podvolumes.List(podvolumes.Types))
		}
		if err == nil {
			// fsGroup ownership once the volume is written (securitycontext_volumes.go).
			err = applyVolumeOwnership(pod, &v, dir, src)
		}
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		paths[v.Name] = dir
	}
	return paths, nil
}

// emptyDir makes the directory of an emptyDir volume. One on disk is a plain directory whose
// sizeLimit the agent enforces by measuring it (watchEmptyDirs); one of medium Memory is a
// tmpfs sized by memoryEmptyDirSize, which bounds it.
func emptyDir(dir string, pod *corev1.Pod, e *corev1.EmptyDirVolumeSource) error {
	if _, err := os.Lstat(dir); os.IsNotExist(err) {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return err
		}
		// World-writable as the kubelet makes it, whatever the agent's umask: a container
		// running as any user can write its emptyDir (fsGroup then adds its group).
		if err := os.Chmod(dir, 0o777); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if e.Medium != corev1.StorageMediumMemory || isMountPoint(dir) {
		return nil
	}
	opts := "mode=0777"
	if size := memoryEmptyDirSize(pod, e, memTotal()); size > 0 {
		opts += fmt.Sprintf(",size=%d", size)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		return fmt.Errorf("mount tmpfs for medium Memory: %w", err)
	}
	return nil
}

// isMountPoint reports whether dir is on a different device than its parent.
func isMountPoint(dir string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// cleanupPodDir unmounts the staging mounts of subPaths and memory-backed emptyDirs, then
// removes the pod's directory.
func cleanupPodDir(podDir string) error {
	if err := cleanupSubPaths(podDir); err != nil {
		return fmt.Errorf("clean up subPath mounts: %w", err)
	}
	entries, _ := os.ReadDir(filepath.Join(podDir, "volumes"))
	for _, e := range entries {
		p := filepath.Join(podDir, "volumes", e.Name())
		if isMountPoint(p) {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
				return fmt.Errorf("unmount %s: %w", p, err)
			}
		}
	}
	return os.RemoveAll(podDir)
}

type fileContent struct {
	data []byte
	mode os.FileMode
}

func fileMode(item *int32, def *int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item)
	case def != nil:
		return os.FileMode(*def)
	}
	return 0o644
}

// keyFiles maps keys to files, honouring items (key -> path, mode) when given.
func keyFiles(data map[string][]byte, items []corev1.KeyToPath, defMode *int32, what string) (map[string]fileContent, error) {
	out := map[string]fileContent{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = fileContent{v, fileMode(nil, defMode)}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("%w: %s has no key %q", errVolumeNotReady, what, it.Key)
		}
		out[it.Path] = fileContent{v, fileMode(it.Mode, defMode)}
	}
	return out, nil
}

func configMapFiles(pod *corev1.Pod, name string, items []corev1.KeyToPath, optional *bool, defMode *int32, src volumeSources) (map[string]fileContent, error) {
	cm, err := src.ConfigMap(pod.Namespace, name)
	if err != nil {
		if optional != nil && *optional && apierrors.IsNotFound(err) {
			return map[string]fileContent{}, nil
		}
		return nil, fmt.Errorf("%w: configMap %q: %v", errVolumeNotReady, name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles(data, items, defMode, "configMap "+name)
}

func secretFiles(pod *corev1.Pod, name string, items []corev1.KeyToPath, optional *bool, defMode *int32, src volumeSources) (map[string]fileContent, error) {
	s, err := src.Secret(pod.Namespace, name)
	if err != nil {
		if optional != nil && *optional && apierrors.IsNotFound(err) {
			return map[string]fileContent{}, nil
		}
		return nil, fmt.Errorf("%w: secret %q: %v", errVolumeNotReady, name, err)
	}
	return keyFiles(s.Data, items, defMode, "secret "+name)
}

func writeConfigMapVolume(dir string, pod *corev1.Pod, v *corev1.ConfigMapVolumeSource, src volumeSources) error {
	files, err := configMapFiles(pod, v.Name, v.Items, v.Optional, v.DefaultMode, src)
	if err != nil {
		return err
	}
	return writeAtomic(dir, files)
}

func writeSecretVolume(dir string, pod *corev1.Pod, v *corev1.SecretVolumeSource, src volumeSources) error {
	mode := v.DefaultMode
	if mode == nil {
		m := int32(0o644)
		mode = &m
	}
	files, err := secretFiles(pod, v.SecretName, v.Items, v.Optional, mode, src)
	if err != nil {
		return err
	}
	return writeAtomic(dir, files)
}

func downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, defMode *int32) (map[string]fileContent, error) {
	out := map[string]fileContent{}
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.FieldRef != nil:
			v, err = podFieldValue(pod, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			c := &corev1.Container{}
			if len(pod.Spec.Containers) > 0 {
				c = &pod.Spec.Containers[0]
			}
			v, err = resourceFieldValue(pod, c, it.ResourceFieldRef)
		}
		if err != nil {
			return nil, fmt.Errorf("downwardAPI %s: %w", it.Path, err)
		}
		out[it.Path] = fileContent{[]byte(v), fileMode(it.Mode, defMode)}
	}
	return out, nil
}

func writeProjected(dir string, pod *corev1.Pod, p *corev1.ProjectedVolumeSource, src volumeSources) error {
	all := map[string]fileContent{}
	merge := func(files map[string]fileContent) {
		for k, v := range files {
			all[k] = v
		}
	}
	for _, s := range p.Sources {
		var files map[string]fileContent
		var err error
		switch {
		case s.ConfigMap != nil:
			files, err = configMapFiles(pod, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, p.DefaultMode, src)
		case s.Secret != nil:
			files, err = secretFiles(pod, s.Secret.Name, s.Secret.Items, s.Secret.Optional, p.DefaultMode, src)
		case s.DownwardAPI != nil:
			files, err = downwardFiles(pod, s.DownwardAPI.Items, p.DefaultMode)
		case s.ServiceAccountToken != nil:
			files, err = tokenFiles(dir, pod, s.ServiceAccountToken, p.DefaultMode, src)
		default:
			// Written nowhere rather than left out: the container expects the file.
			err = fmt.Errorf("projected source %s is not supported by flotilla (use %s)", podvolumes.TypeOf(&s), podvolumes.List(podvolumes.ProjectionTypes))
		}
		if err != nil {
			return err
		}
		merge(files)
	}
	return writeAtomic(dir, all)
}

// tokenFiles gives the file of a serviceAccountToken source. When no token can be had but the
// volume already holds one (the pod ran before, or the agent restarted), that one stays and
// the request is tried again at the next sync; a pod that has none yet cannot start.
func tokenFiles(dir string, pod *corev1.Pod, s *corev1.ServiceAccountTokenProjection, defMode *int32, src volumeSources) (map[string]fileContent, error) {
	if src.ServiceAccountToken == nil {
		return nil, fmt.Errorf("serviceAccountToken %q: tokens cannot be requested on this host", s.Path)
	}
	token, err := src.ServiceAccountToken(pod, s)
	if err != nil {
		clean := filepath.Clean("/" + s.Path)[1:]
		old, rerr := readVolumeFile(dir, clean)
		if clean == "" || strings.HasPrefix(clean, "..") || rerr != nil || len(old) == 0 {
			return nil, fmt.Errorf("serviceAccountToken %q: %w", s.Path, err)
		}
		token = old
	}
	return map[string]fileContent{s.Path: {token, fileMode(nil, defMode)}}, nil
}

func hostPathVolume(h *corev1.HostPathVolumeSource) (string, error) {
	t := corev1.HostPathUnset
	if h.Type != nil {
		t = *h.Type
	}
	st, err := os.Stat(h.Path)
	switch t {
	case corev1.HostPathUnset:
		return h.Path, nil
	case corev1.HostPathDirectoryOrCreate:
		if err != nil {
			return h.Path, os.MkdirAll(h.Path, 0o755)
		}
	case corev1.HostPathFileOrCreate:
		if err != nil {
			if err := os.MkdirAll(filepath.Dir(h.Path), 0o755); err != nil {
				return "", err
			}
			f, err := os.OpenFile(h.Path, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return "", err
			}
			return h.Path, f.Close()
		}
	case corev1.HostPathDirectory:
		if err != nil || !st.IsDir() {
			return "", fmt.Errorf("hostPath %s is not a directory on this host", h.Path)
		}
	case corev1.HostPathFile:
		if err != nil || !st.Mode().IsRegular() {
			return "", fmt.Errorf("hostPath %s is not a file on this host", h.Path)
		}
	case corev1.HostPathSocket:
		if err != nil || st.Mode()&os.ModeSocket == 0 {
			return "", fmt.Errorf("hostPath %s is not a socket on this host", h.Path)
		}
	case corev1.HostPathCharDev:
		if err != nil || st.Mode()&os.ModeCharDevice == 0 {
			return "", fmt.Errorf("hostPath %s is not a character device on this host", h.Path)
		}
	case corev1.HostPathBlockDev:
		if err != nil || st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
			return "", fmt.Errorf("hostPath %s is not a block device on this host", h.Path)
		}
	}
	return h.Path, nil
}

// ephemeralClaimPath is claimPath for a generic ephemeral volume: the claim <pod>-<volume>
// that the ephemeral volume controller creates for the pod, and only if the pod controls it
// (a claim of that name left by an earlier pod, or made by hand, holds another's data).
func ephemeralClaimPath(pod *corev1.Pod, v *corev1.Volume, src volumeSources) (string, error) {
	name := volumebinding.EphemeralClaimName(pod, v)
	pvc, err := src.PVC(pod.Namespace, name)
	if err != nil {
		return "", fmt.Errorf("%w: persistentVolumeClaim %q of the ephemeral volume: %v", errVolumeNotReady, name, err)
	}
	if err := volumebinding.EphemeralClaimIsForPod(pod, pvc); err != nil {
		return "", fmt.Errorf("%w: %v", errVolumeNotReady, err)
	}
	return claimPath(pod, name, src)
}

func claimPath(pod *corev1.Pod, claim string, src volumeSources) (string, error) {
	pvc, err := src.PVC(pod.Namespace, claim)
	if err != nil {
		return "", fmt.Errorf("%w: persistentVolumeClaim %q: %v", errVolumeNotReady, claim, err)
	}
	if src.Starting && pvc.DeletionTimestamp != nil {
		return "", fmt.Errorf("%w: persistentVolumeClaim %q is being deleted, so no pod can start with it: recreate the claim once it is gone, or name another", errVolumeNotReady, claim)
	}
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return "", fmt.Errorf("%w: persistentVolumeClaim %q is not bound yet", errVolumeNotReady, claim)
	}
	pv, err := src.PV(pvc.Spec.VolumeName)
	if err != nil {
		return "", fmt.Errorf("%w: persistentVolume %q: %v", errVolumeNotReady, pvc.Spec.VolumeName, err)
	}
	switch {
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path, os.MkdirAll(pv.Spec.Local.Path, 0o777)
	case pv.Spec.HostPath != nil:
		return hostPathVolume(pv.Spec.HostPath)
	}
	return "", fmt.Errorf("persistentVolume %q: only local and hostPath volumes can be mounted by flotilla", pv.Name)
}
