package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume/localpv"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumeprotection"
)

func writeTree(t *testing.T, files map[string]string) {
	t.Helper()
	for p, data := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func noMounts() ([]string, error) { return nil, nil }

// TestRemoveLocalVolumeDir: the volume's own directory goes, with what is in it, without
// following the links inside; a path that is not <root>/<name>, a symlink, a file or a
// mounted directory is refused, and nothing outside is touched.
func TestRemoveLocalVolumeDir(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "volumes")
	outside := filepath.Join(base, "outside")
	writeTree(t, map[string]string{
		filepath.Join(outside, "keep"):                 "precious",
		filepath.Join(root, "pvc-1", "data"):           "x",
		filepath.Join(root, "pvc-1", "sub", "deep"):    "y",
		filepath.Join(root, "other", "pvc-1", "data"):  "z",
		filepath.Join(root, "pvc-file-dir", "ignored"): "",
	})
	// Links a container could have left inside its volume.
	if err := os.Symlink(outside, filepath.Join(root, "pvc-1", "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "keep"), filepath.Join(root, "pvc-1", "sub", "file-link")); err != nil {
		t.Fatal(err)
	}

	if err := removeLocalVolumeDir(root, filepath.Join(root, "pvc-1"), "pvc-1", noMounts); err != nil {
		t.Fatalf("remove pvc-1: %v", err)
	}
	if exists(filepath.Join(root, "pvc-1")) {
		t.Error("pvc-1 is still there")
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep")); err != nil || string(b) != "precious" || !exists(root) || !exists(filepath.Join(root, "other", "pvc-1", "data")) {
		t.Errorf("removal reached beyond the volume: keep=%q %v, root %v", b, err, exists(root))
	}
	// Gone already, or no class directory at all: nothing to do.
	if err := removeLocalVolumeDir(root, filepath.Join(root, "pvc-1"), "pvc-1", noMounts); err != nil {
		t.Errorf("remove a missing directory: %v", err)
	}
	missing := filepath.Join(base, "absent")
	if err := removeLocalVolumeDir(missing, filepath.Join(missing, "pvc-1"), "pvc-1", noMounts); err != nil {
		t.Errorf("remove under a missing root: %v", err)
	}

	// The class path may be a link (an administrator's choice).
	linkRoot := filepath.Join(base, "linked")
	if err := os.Symlink(root, linkRoot); err != nil {
		t.Fatal(err)
	}
	writeTree(t, map[string]string{filepath.Join(root, "pvc-2", "data"): "x"})
	if err := removeLocalVolumeDir(linkRoot, filepath.Join(linkRoot, "pvc-2"), "pvc-2", noMounts); err != nil || exists(filepath.Join(root, "pvc-2")) {
		t.Errorf("remove under a linked root: %v, left %v", err, exists(filepath.Join(root, "pvc-2")))
	}

	// Refused for good.
	if err := os.Symlink(outside, filepath.Join(root, "pvc-link")); err != nil {
		t.Fatal(err)
	}
	writeTree(t, map[string]string{filepath.Join(root, "pvc-file"): "f"})
	for _, c := range []struct{ name, root, dir, vol, want string }{
		{"the root", root, root, "pvc-1", "is not"},
		{"the root's parent", root, base, "volumes", "is not"},
		{"below another directory", root, filepath.Join(root, "other", "pvc-1"), "pvc-1", "is not"},
		{"another volume's name", root, filepath.Join(root, "other"), "pvc-1", "is not"},
		{"elsewhere", root, filepath.Join(outside), "outside", "is not"},
		{"dot-dot", root, filepath.Join(root, ".."), "..", "no directory name"},
		{"a name with a slash", root, filepath.Join(root, "other/pvc-1"), "other/pvc-1", "no directory name"},
		{"an unclean path", root, root + "/./pvc-x", "pvc-x", "is not"},
		{"a relative root", "volumes", "volumes/pvc-x", "pvc-x", "clean absolute"},
		{"a symbolic link", root, filepath.Join(root, "pvc-link"), "pvc-link", "symbolic link"},
		{"a file", root, filepath.Join(root, "pvc-file"), "pvc-file", "not a directory"},
	} {
		err := removeLocalVolumeDir(c.root, c.dir, c.vol, noMounts)
		var perm errPermanent
		if !errors.As(err, &perm) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want a permanent refusal containing %q", c.name, err, c.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep")); err != nil || string(b) != "precious" || !exists(filepath.Join(root, "other", "pvc-1", "data")) ||
		!exists(filepath.Join(root, "pvc-link")) || !exists(filepath.Join(root, "pvc-file")) {
		t.Errorf("a refused removal removed something: keep=%q %v", b, err)
	}

	// Something mounted in the volume: retried later, nothing removed now.
	writeTree(t, map[string]string{filepath.Join(root, "pvc-3", "mnt", "data"): "x"})
	mounted := func() ([]string, error) { return []string{"/", filepath.Join(root, "pvc-3", "mnt")}, nil }
	err := removeLocalVolumeDir(root, filepath.Join(root, "pvc-3"), "pvc-3", mounted)
	var perm errPermanent
	if err == nil || errors.As(err, &perm) || !strings.Contains(err.Error(), "mounted at") || !exists(filepath.Join(root, "pvc-3", "mnt", "data")) {
		t.Errorf("a mounted volume: err = %v, want a retriable refusal and nothing removed", err)
	}
	// A mount point named like the volume but beside it does not count.
	beside := func() ([]string, error) { return []string{filepath.Join(root, "pvc-3x")}, nil }
	if err := removeLocalVolumeDir(root, filepath.Join(root, "pvc-3"), "pvc-3", beside); err != nil || exists(filepath.Join(root, "pvc-3")) {
		t.Errorf("remove beside a mount: %v", err)
	}
}

func TestParseMountPoints(t *testing.T) {
	in := "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n" +
		"99 22 8:1 /data /var/lib/flotilla/volumes/pvc-1/with\\040space rw - ext4 /dev/sda1 rw\n" +
		"short line\n"
	got, err := parseMountPoints(strings.NewReader(in))
	want := []string{"/", "/var/lib/flotilla/volumes/pvc-1/with space"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("parseMountPoints = %q, %v; want %q", got, err, want)
	}
}

// testVolume is a deleted local volume of claim ns/data on node under root.
func testVolume(name, node, root string, reclaim corev1.PersistentVolumeReclaimPolicy) *corev1.PersistentVolume {
	now := metav1.Now()
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, DeletionTimestamp: &now, Finalizers: []string{localpv.Finalizer},
			Labels: map[string]string{localpv.LabelNode: node}, Annotations: map[string]string{localpv.AnnProvisionedBy: localpv.Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              "local-test",
			PersistentVolumeReclaimPolicy: reclaim,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: filepath.Join(root, name)}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: "ns", Name: "data-" + name},
		},
	}
}

func drainEvents(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestLocalVolumesSync: a deleted volume of this host loses its directory and then its
// finalizer; one in use waits (one Warning); Retain keeps the data; another host's volume,
// a live one and one whose path is not its own are left alone.
func TestLocalVolumesSync(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	elsewhere := t.TempDir()
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local-test"}, Provisioner: localpv.Provisioner,
		Parameters: map[string]string{localpv.ParamPath: root}}
	gone := testVolume("pvc-gone", "host-1", root, corev1.PersistentVolumeReclaimDelete)
	busy := testVolume("pvc-busy", "host-1", root, corev1.PersistentVolumeReclaimDelete)
	kept := testVolume("pvc-kept", "host-1", root, corev1.PersistentVolumeReclaimRetain)
	theirs := testVolume("pvc-theirs", "host-2", root, corev1.PersistentVolumeReclaimDelete)
	live := testVolume("pvc-live", "host-1", root, corev1.PersistentVolumeReclaimDelete)
	live.DeletionTimestamp = nil
	moved := testVolume("pvc-moved", "host-1", elsewhere, corev1.PersistentVolumeReclaimDelete)
	// Deleted while Bound: held by the in-use finalizer until its claim is gone.
	bound := testVolume("pvc-bound", "host-1", root, corev1.PersistentVolumeReclaimDelete)
	bound.Finalizers = append(bound.Finalizers, volumeprotection.VolumeFinalizer)
	vols := []*corev1.PersistentVolume{gone, busy, kept, theirs, live, moved, bound}
	objs := []runtime.Object{class}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, v := range vols {
		objs = append(objs, v)
		if err := idx.Add(v); err != nil {
			t.Fatal(err)
		}
		writeTree(t, map[string]string{filepath.Join(localpv.Dir(v), "data"): v.Name})
	}
	client := fake.NewClientset(objs...)
	rec := record.NewFakeRecorder(100)
	inUse := "pvc-busy"
	l := newLocalVolumes(client, "host-1", rec, logrus.NewEntry(logrus.New()), func(_ context.Context, pv *corev1.PersistentVolume) (string, error) {
		if pv.Name == inUse {
			return "ns/db-0", nil
		}
		return "", nil
	})
	l.volumes = corelisters.NewPersistentVolumeLister(idx)
	l.mounts = noMounts
	finalizers := func(name string) []string {
		t.Helper()
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pv.Finalizers
	}

	if err := l.sync(ctx, "pvc-gone"); err != nil {
		t.Fatalf("sync pvc-gone: %v", err)
	}
	if exists(localpv.Dir(gone)) || len(finalizers("pvc-gone")) != 0 || !exists(root) {
		t.Errorf("pvc-gone: directory left %v, finalizers %v, root kept %v", exists(localpv.Dir(gone)), finalizers("pvc-gone"), exists(root))
	}
	if ev := drainEvents(rec); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal VolumeDeleted Removed "+localpv.Dir(gone)) {
		t.Errorf("events %q", ev)
	}

	for range 2 {
		if err := l.sync(ctx, "pvc-busy"); err == nil || !strings.Contains(err.Error(), "ns/db-0") {
			t.Errorf("sync of a volume in use: %v, want an error to retry", err)
		}
	}
	if !exists(filepath.Join(localpv.Dir(busy), "data")) || len(finalizers("pvc-busy")) != 1 {
		t.Error("the data of a volume in use was touched")
	}
	if ev := drainEvents(rec); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning VolumeFailedDelete") || !strings.Contains(ev[0], "still used by pod ns/db-0") {
		t.Errorf("events of a volume in use, twice: %q, want one Warning", ev)
	}
	inUse = ""
	if err := l.sync(ctx, "pvc-busy"); err != nil || exists(localpv.Dir(busy)) || len(finalizers("pvc-busy")) != 0 {
		t.Errorf("once the pod is gone: %v, directory left %v", err, exists(localpv.Dir(busy)))
	}
	drainEvents(rec)

	if err := l.sync(ctx, "pvc-kept"); err != nil || !exists(filepath.Join(localpv.Dir(kept), "data")) || len(finalizers("pvc-kept")) != 0 {
		t.Errorf("Retain: %v, data kept %v, finalizers %v", err, exists(localpv.Dir(kept)), finalizers("pvc-kept"))
	}
	if ev := drainEvents(rec); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal VolumeRetained") {
		t.Errorf("events of Retain %q", ev)
	}

	if err := l.sync(ctx, "pvc-bound"); err != nil || !exists(filepath.Join(localpv.Dir(bound), "data")) || len(finalizers("pvc-bound")) != 2 {
		t.Errorf("a volume deleted while Bound: %v, data kept %v, finalizers %v; want both kept", err, exists(localpv.Dir(bound)), finalizers("pvc-bound"))
	}
	for _, v := range []*corev1.PersistentVolume{theirs, live} {
		if err := l.sync(ctx, v.Name); err != nil || !exists(filepath.Join(localpv.Dir(v), "data")) || len(finalizers(v.Name)) != 1 {
			t.Errorf("%s: %v, touched", v.Name, err)
		}
	}
	if err := l.sync(ctx, "pvc-moved"); err != nil || !exists(filepath.Join(localpv.Dir(moved), "data")) || len(finalizers("pvc-moved")) != 1 {
		t.Errorf("a volume outside its class path: %v, touched", err)
	}
	if ev := drainEvents(rec); len(ev) != 1 || !strings.Contains(ev[0], "is not removed") || !strings.Contains(ev[0], "by hand") {
		t.Errorf("events %q, want one Warning about the volume outside its class path", ev)
	}

	// The class is gone: the default path is the only one left to trust.
	if err := client.StorageV1().StorageClasses().Delete(ctx, "local-test", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	late := testVolume("pvc-late", "host-1", root, corev1.PersistentVolumeReclaimDelete)
	writeTree(t, map[string]string{filepath.Join(localpv.Dir(late), "data"): "x"})
	if err := idx.Add(late); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.sync(ctx, "pvc-late"); err != nil || !exists(localpv.Dir(late)) || len(finalizers("pvc-late")) != 1 {
		t.Errorf("class gone, path not under %s: %v, touched", localpv.DefaultPath, err)
	}
}

type listOnlyRuntime struct {
	Runtime
	containers []rt.ContainerStatus
}

func (r listOnlyRuntime) ListContainers(context.Context) ([]rt.ContainerStatus, error) {
	return r.containers, nil
}

// TestLocalVolumeUser: the pods of this host that may still use a volume's claim.
func TestLocalVolumeUser(t *testing.T) {
	claimPod := func(name, claim string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: "host-1", Volumes: []corev1.Volume{
				{Name: "www", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}},
			}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	ctr := func(uid, ns, name string, state rt.State) rt.ContainerStatus {
		return rt.ContainerStatus{ID: uid + "-c", State: state, Labels: map[string]string{labelPodUID: uid, labelPodNamespace: ns, labelPodName: name}}
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range []*corev1.Pod{
		claimPod("web-0", "www-web-0", corev1.PodRunning),
		claimPod("job-done", "results", corev1.PodSucceeded),
		claimPod("job-stopping", "logs", corev1.PodFailed),
	} {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	m := &PodManager{pods: corelisters.NewPodLister(idx), log: logrus.NewEntry(logrus.New()), cfg: PodConfig{Runtime: listOnlyRuntime{containers: []rt.ContainerStatus{
		ctr("uid-job-done", "ns", "job-done", rt.StateExited),
		ctr("uid-job-stopping", "ns", "job-stopping", rt.StateRunning),
		ctr("uid-forced", "forced", "db-0", rt.StateRunning),
		ctr("uid-old", "old", "x", rt.StateExited),
	}}}}
	for _, c := range []struct{ ns, claim, want string }{
		{"ns", "www-web-0", "ns/web-0"},
		{"ns", "web-0-scratch", "ns/web-0"}, // generic ephemeral volume
		{"ns", "results", ""},               // finished, its containers exited
		{"ns", "logs", "ns/job-stopping"},   // failed, a container still runs
		{"ns", "unused", ""},
		{"other", "www-web-0", ""},
		{"forced", "data", "forced/db-0 (deleted, its containers not yet stopped)"},
		{"old", "data", ""},
	} {
		pv := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Namespace: c.ns, Name: c.claim}}}
		if got, err := m.localVolumeUser(context.Background(), pv); err != nil || got != c.want {
			t.Errorf("claim %s/%s: %q %v, want %q", c.ns, c.claim, got, err, c.want)
		}
	}
	if got, err := m.localVolumeUser(context.Background(), &corev1.PersistentVolume{}); got != "" || err != nil {
		t.Errorf("a volume never bound: %q %v", got, err)
	}
}
