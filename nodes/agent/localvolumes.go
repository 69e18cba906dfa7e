package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume/localpv"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumeprotection"
)

// Event reasons of the cleanup of local volumes; VolumeFailedDelete is upstream's.
const (
	reasonVolumeDeleted      = "VolumeDeleted"
	reasonVolumeRetained     = "VolumeRetained"
	reasonVolumeFailedDelete = "VolumeFailedDelete"
)

// localVolumes removes the directories of this host's deleted local volumes. The
// flotilla.dev/local provisioner labels each volume with its node and holds it with a
// finalizer (package localpv); the agent lists and watches the volumes labelled with its own
// name (the one list of volumes the Node authorizer allows a host) and, once one is deleted:
//
//   - reclaim policy Delete: waits until the volume is no longer held by its in-use finalizer
//     (kubernetes.io/pv-protection: a volume deleted while Bound keeps its data for its claim
//     until the claim is gone) and no pod of this host may still use the data, removes the
//     directory, then the finalizer;
//   - any other reclaim policy (Retain, set on the class or on the volume to keep the data):
//     removes only the finalizer, and the directory stays.
//
// The directory removed is <root>/<volume name> exactly, root being the class's "path"
// parameter (DefaultPath when the class is gone), and it must be a directory, not a
// symbolic link, with no mount at or below it; RemoveAll does not follow the links inside.
// A failure is retried with back-off (at most every 30 s) and reported once per distinct
// message with a VolumeFailedDelete Warning event on the volume; a volume that can never be
// removed safely (wrong path, a symlink) keeps its finalizer, with the event saying so,
// until an administrator removes the directory and the finalizer.
type localVolumes struct {
	node     string
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	volumes  corelisters.PersistentVolumeLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *logrus.Entry
	// user names a pod of this host that may still use the volume's data, "" when none does.
	user func(ctx context.Context, pv *corev1.PersistentVolume) (string, error)
	// mounts lists the host's mount points.
	mounts func() ([]string, error)
	// reported is the last warning recorded for each volume (one worker: no lock).
	reported map[string]string
}

func newLocalVolumes(client kubernetes.Interface, node string, recorder record.EventRecorder, log *logrus.Entry,
	user func(context.Context, *corev1.PersistentVolume) (string, error)) *localVolumes {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = localpv.NodeSelector(node)
	}))
	inf := f.Core().V1().PersistentVolumes()
	l := &localVolumes{
		node: node, client: client, factory: f, volumes: inf.Lister(), synced: inf.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "localvolumes"}),
		recorder: recorder, log: log.WithField("component", "localvolumes"), user: user,
		mounts: mountPoints, reported: map[string]string{},
	}
	enqueue := func(obj any) {
		if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.DeletionTimestamp != nil && localpv.HasFinalizer(pv) {
			l.queue.Add(pv.Name)
		}
	}
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
		// The worker then forgets what it reported about the volume.
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pv, ok := obj.(*corev1.PersistentVolume); ok {
				l.queue.Add(pv.Name)
			}
		},
	})
	return l
}

// run cleans up until ctx ends.
func (l *localVolumes) run(ctx context.Context) {
	defer l.queue.ShutDown()
	defer l.factory.Shutdown()
	l.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), l.synced) {
		return
	}
	go func() {
		<-ctx.Done()
		l.queue.ShutDown()
	}()
	for {
		name, quit := l.queue.Get()
		if quit {
			return
		}
		err := l.sync(ctx, name)
		if err != nil && ctx.Err() == nil {
			l.log.WithError(err).WithField("volume", name).Debug("local volume cleanup, will retry")
			l.queue.AddRateLimited(name)
		} else {
			l.queue.Forget(name)
		}
		l.queue.Done(name)
	}
}

// errPermanent marks what retrying cannot change: the volume's path is not one the agent
// may remove.
type errPermanent struct{ error }

// sync cleans up volume name if it is deleted and this host's.
func (l *localVolumes) sync(ctx context.Context, name string) error {
	pv, err := l.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		delete(l.reported, name)
		return nil
	}
	if err != nil {
		return err
	}
	if pv.DeletionTimestamp == nil || !localpv.HasFinalizer(pv) || pv.Labels[localpv.LabelNode] != l.node {
		return nil
	}
	dir := localpv.Dir(pv)
	log := l.log.WithFields(logrus.Fields{"volume": pv.Name, "path": dir})
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		if err := l.removeFinalizer(ctx, pv); err != nil {
			return err
		}
		l.recorder.Eventf(pv, corev1.EventTypeNormal, reasonVolumeRetained,
			"Reclaim policy %s: the data stays in %s on node %s", pv.Spec.PersistentVolumeReclaimPolicy, dir, l.node)
		log.Info("deleted volume retained: its directory stays")
		return nil
	}
	if slices.Contains(pv.Finalizers, volumeprotection.VolumeFinalizer) {
		// Deleted while Bound: the update that removes the in-use finalizer queues it again.
		log.Debug("deleted volume still Bound: its directory stays until its claim is gone")
		return nil
	}
	user, err := l.user(ctx, pv)
	if err != nil {
		return err
	}
	if user != "" {
		l.warn(pv, fmt.Sprintf("%s is still used by pod %s on node %s: it is removed once the pod has stopped", dir, user, l.node))
		return fmt.Errorf("in use by pod %s", user)
	}
	root, err := l.root(ctx, pv)
	if err == nil {
		err = removeLocalVolumeDir(root, dir, pv.Name, l.mounts)
	}
	var perm errPermanent
	if errors.As(err, &perm) {
		l.warn(pv, fmt.Sprintf("%s is not removed from node %s: %v; remove it and then the finalizer %s by hand", dir, l.node, err, localpv.Finalizer))
		log.WithError(err).Warn("local volume directory not removed")
		return nil // kept until an administrator steps in (or the agent restarts)
	}
	if err != nil {
		l.warn(pv, fmt.Sprintf("removing %s from node %s failed, will retry: %v", dir, l.node, err))
		return err
	}
	if err := l.removeFinalizer(ctx, pv); err != nil {
		return err
	}
	l.recorder.Eventf(pv, corev1.EventTypeNormal, reasonVolumeDeleted, "Removed %s from node %s", dir, l.node)
	log.Info("deleted volume's directory removed")
	return nil
}

// warn records a VolumeFailedDelete Warning unless it is the one recorded last for pv.
func (l *localVolumes) warn(pv *corev1.PersistentVolume, msg string) {
	if l.reported[pv.Name] == msg {
		return
	}
	l.reported[pv.Name] = msg
	l.recorder.Event(pv, corev1.EventTypeWarning, reasonVolumeFailedDelete, msg)
}

// root is the directory the class of pv keeps its volumes in: its "path" parameter, or
// DefaultPath when the class no longer exists.
func (l *localVolumes) root(ctx context.Context, pv *corev1.PersistentVolume) (string, error) {
	if pv.Spec.StorageClassName == "" {
		return localpv.DefaultPath, nil
	}
	class, err := l.client.StorageV1().StorageClasses().Get(ctx, pv.Spec.StorageClassName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return localpv.DefaultPath, nil
	}
	if err != nil {
		return "", fmt.Errorf("get StorageClass %s: %w", pv.Spec.StorageClassName, err)
	}
	root, err := localpv.Root(class.Parameters)
	if err != nil {
		return "", errPermanent{fmt.Errorf("StorageClass %s: %w", class.Name, err)}
	}
	return root, nil
}

// removeFinalizer lets the deletion of pv complete.
func (l *localVolumes) removeFinalizer(ctx context.Context, pv *corev1.PersistentVolume) error {
	cp := pv.DeepCopy()
	cp.Finalizers = localpv.WithoutFinalizer(cp.Finalizers)
	_, err := l.client.CoreV1().PersistentVolumes().Update(ctx, cp, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer %s of volume %s: %w", localpv.Finalizer, pv.Name, err)
	}
	delete(l.reported, pv.Name)
	return nil
}

// removeLocalVolumeDir removes dir, the directory of local volume name, which must be
// exactly root/name (never root itself, its parent or anything elsewhere). root may be a
// symbolic link (an administrator's choice); dir itself must be a directory, not a link, and
// nothing may be mounted at or below it (it would be removed through the mount). Go's
// RemoveAll removes the links inside without following them, descending with openat and
// O_NOFOLLOW. A dir already gone is no error. Errors that retrying cannot change are
// errPermanent.
func removeLocalVolumeDir(root, dir, name string, mounts func() ([]string, error)) error {
	if !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return errPermanent{fmt.Errorf("the class path %q is not a clean absolute path", root)}
	}
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return errPermanent{fmt.Errorf("volume name %q is no directory name", name)}
	}
	if want := filepath.Join(root, name); dir != want {
		return errPermanent{fmt.Errorf("the volume's path is not %s, the volume's own directory under the class path %s", want, root)}
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no class directory: the volume was never created on this host
	}
	if err != nil {
		return fmt.Errorf("resolve %s: %w", root, err)
	}
	target := filepath.Join(realRoot, name)
	st, err := os.Lstat(target)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case st.Mode()&os.ModeSymlink != 0:
		return errPermanent{fmt.Errorf("%s is a symbolic link", dir)}
	case !st.IsDir():
		return errPermanent{fmt.Errorf("%s is not a directory", dir)}
	}
	points, err := mounts()
	if err != nil {
		return fmt.Errorf("list mounts: %w", err)
	}
	for _, p := range points {
		for _, d := range []string{dir, target} {
			if p == d || strings.HasPrefix(p, d+"/") {
				return fmt.Errorf("%s is mounted at %s", dir, p)
			}
		}
	}
	return os.RemoveAll(target)
}

// mountPoints lists the mount points of the agent's mount namespace.
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountPoints(f)
}

// parseMountPoints reads the mount points (the fifth field, octal escapes decoded) of a
// mountinfo file.
func parseMountPoints(r io.Reader) ([]string, error) {
	var out []string
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		out = append(out, unescapeMountPath(fields[4]))
	}
	return out, s.Err()
}

// unescapeMountPath decodes the \NNN octal escapes of mountinfo (space, tab, newline, \).
func unescapeMountPath(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+4 <= len(p) {
			if n, err := strconv.ParseUint(p[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// localVolumeUser names a pod of this host that may still use pv's data, "" when none
// does: a pod that uses the claim pv was bound to (spec.claimRef, which a released volume
// keeps) and has not finished or still has a container not exited; or a container not exited
// of a pod of the claim's namespace whose object is gone (force-deleted), whose volumes are
// no longer known.
func (m *PodManager) localVolumeUser(ctx context.Context, pv *corev1.PersistentVolume) (string, error) {
	ref := pv.Spec.ClaimRef
	if ref == nil {
		return "", nil
	}
	snap, err := m.containers(ctx, true)
	if err != nil {
		return "", fmt.Errorf("list containers: %w", err)
	}
	pods, err := m.pods.List(labels.Everything())
	if err != nil {
		return "", err
	}
	known := map[string]bool{}
	for _, p := range pods {
		known[string(p.UID)] = true
		if p.Namespace != ref.Namespace || !slices.Contains(volumebinding.ClaimNames(p), ref.Name) {
			continue
		}
		if finished := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed; !finished || notExited(snap[string(p.UID)]) {
			return p.Namespace + "/" + p.Name, nil
		}
	}
	for uid, cs := range snap {
		if known[uid] || !notExited(cs) || cs[0].Labels[labelPodNamespace] != ref.Namespace {
			continue
		}
		return cs[0].Labels[labelPodNamespace] + "/" + cs[0].Labels[labelPodName] + " (deleted, its containers not yet stopped)", nil
	}
	return "", nil
}

// notExited reports whether one of cs may still run.
func notExited(cs []rt.ContainerStatus) bool {
	for _, c := range cs {
		if c.State != rt.StateExited {
			return true
		}
	}
	return false
}
