package apiserver

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/flotilla-dev/flotilla/nodes/refcache"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume/localpv"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumeprotection"
)

// TestNodeAuthorizerServer: through the real API server, with the client certificates of
// hosts (system:node:<name> in system:nodes), a host reads by name the Secrets a pod bound
// to it uses, and nothing else: not an unreferenced Secret, not a list of Secrets, not
// another host's; every host reads the Ingresses' TLS Secrets.
func TestNodeAuthorizerServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd and the API server")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin, clientFor, _ := startCertServer(t)
	host1 := clientFor("system:node:host-1", user.NodesGroup)
	host2 := clientFor("system:node:host-2", user.NodesGroup)
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: err = %v, want 403", what, err)
		}
	}

	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, name := range []string{"used", "unused", "site-tls"} {
		if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string][]byte{"k": []byte(name)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "host-1",
		AutomountServiceAccountToken: new(false), Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
		Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "used"}}}}}}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secrets := host1.CoreV1().Secrets("default")
	// The authorizer's informer sees the pod a moment after it was created.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := secrets.Get(ctx, "used", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		_, gerr := secrets.Get(ctx, "used", metav1.GetOptions{})
		t.Fatalf("host-1 gets the Secret its pod uses: %v", gerr)
	}

	// List and watch by name.
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "used").String()}
	list, err := secrets.List(ctx, byName)
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "used" {
		t.Errorf("host-1 lists the Secret by name: %v %v", list, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	w, err := secrets.Watch(wctx, metav1.ListOptions{FieldSelector: byName.FieldSelector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("host-1 watches the Secret by name: %v", err)
	}
	if _, err := admin.CoreV1().Secrets("default").Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "used", Namespace: "default"},
		Data: map[string][]byte{"k": []byte("changed")}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if s, ok := ev.Object.(*corev1.Secret); ev.Type != watch.Modified || !ok || string(s.Data["k"]) != "changed" {
			t.Errorf("watch event %s %T, want the modified Secret", ev.Type, ev.Object)
		}
	case <-wctx.Done():
		t.Error("no watch event for the Secret's update")
	}
	w.Stop()

	// Refused: an unreferenced Secret, lists and watches of every Secret, another host.
	_, err = secrets.Get(ctx, "unused", metav1.GetOptions{})
	forbidden("host-1 gets an unreferenced Secret", err)
	_, err = host1.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	forbidden("host-1 lists every Secret", err)
	_, err = secrets.List(ctx, metav1.ListOptions{})
	forbidden("host-1 lists the namespace's Secrets", err)
	_, err = secrets.Watch(ctx, metav1.ListOptions{})
	forbidden("host-1 watches the namespace's Secrets", err)
	_, err = secrets.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "unused").String()})
	forbidden("host-1 lists an unreferenced Secret by name", err)
	_, err = host2.CoreV1().Secrets("default").Get(ctx, "used", metav1.GetOptions{})
	forbidden("host-2 gets host-1's pod's Secret", err)
	_, err = host1.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	forbidden("host-1 lists every ConfigMap", err)
	_, err = host1.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	forbidden("host-1 lists every PersistentVolume", err)
	if _, err := secrets.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "used", Namespace: "default"}}, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("host-1 updates the Secret: %v, want 403", err)
	}

	// The node's per-object cache reads what it may, and is told what it may not.
	objs := refcache.NewObjects(ctx, host1, refcache.Config{WaitTimeout: 10 * time.Second})
	if s, err := objs.Secrets.Get("default", "used"); err != nil || string(s.Data["k"]) != "changed" {
		t.Errorf("refcache: %v %v", s, err)
	}
	if _, err := objs.Secrets.Get("default", "unused"); !apierrors.IsForbidden(err) {
		t.Errorf("refcache of an unreferenced Secret: %v, want 403", err)
	}
	if _, err := objs.Secrets.Get("default", "absent"); !apierrors.IsForbidden(err) {
		t.Errorf("refcache of an unreferenced, absent Secret: %v, want 403", err)
	}

	// Every host reads the TLS Secret an Ingress names, in its namespace.
	_, err = host2.CoreV1().Secrets("default").Get(ctx, "site-tls", metav1.GetOptions{})
	forbidden("host-2 gets a Secret before an Ingress names it", err)
	pathType := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: "default"}, Spec: networkingv1.IngressSpec{
		TLS: []networkingv1.IngressTLS{{Hosts: []string{"site.example"}, SecretName: "site-tls"}},
		Rules: []networkingv1.IngressRule{{Host: "site.example", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &pathType, Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}}
	if _, err := admin.NetworkingV1().Ingresses("default").Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := host2.CoreV1().Secrets("default").Get(ctx, "site-tls", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Errorf("host-2 gets the Ingress's TLS Secret: %v", err)
	}

	// Once the pod is gone, so is host-1's access.
	if err := admin.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := secrets.Get(ctx, "used", metav1.GetOptions{})
		if err != nil && !strings.Contains(err.Error(), "forbidden") {
			return false, err
		}
		return apierrors.IsForbidden(err), nil
	}); err != nil {
		t.Errorf("host-1 still reads the Secret of its deleted pod: %v", err)
	}
}

// TestLocalVolumeCleanupServer: through the real API server, a host lists and watches the
// local volumes labelled with its name, by that label selector, and removes the cleanup
// finalizer of its own deleted volume, which then goes; it may not list the others, change
// anything else of a volume, nor touch another host's.
func TestLocalVolumeCleanupServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd and the API server")
	}
	ctx := context.Background()
	admin, clientFor, _ := startCertServer(t)
	host1 := clientFor("system:node:host-1", user.NodesGroup)
	forbidden := func(what string, err error, want string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want 403 containing %q", what, err, want)
		}
	}
	volume := func(name, node string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{localpv.LabelNode: node},
				Annotations: map[string]string{localpv.AnnProvisionedBy: localpv.Provisioner}, Finalizers: []string{localpv.Finalizer}},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: apiresource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: localpv.DefaultPath + "/" + name}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}},
			},
		}
	}
	pvs := admin.CoreV1().PersistentVolumes()
	for name, node := range map[string]string{"pvc-mine": "host-1", "pvc-theirs": "host-2"} {
		if _, err := pvs.Create(ctx, volume(name, node), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	own := metav1.ListOptions{LabelSelector: localpv.NodeSelector("host-1")}
	list, err := host1.CoreV1().PersistentVolumes().List(ctx, own)
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "pvc-mine" {
		t.Fatalf("host-1 lists its volumes: %v %v", list, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	own.ResourceVersion = list.ResourceVersion
	w, err := host1.CoreV1().PersistentVolumes().Watch(wctx, own)
	if err != nil {
		t.Fatalf("host-1 watches its volumes: %v", err)
	}
	defer w.Stop()
	_, err = host1.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: localpv.NodeSelector("host-2")})
	forbidden("host-1 lists host-2's volumes", err, "forbidden")
	_, err = host1.CoreV1().PersistentVolumes().Watch(ctx, metav1.ListOptions{})
	forbidden("host-1 watches every volume", err, "forbidden")
	// StorageClasses, for the path under which a class's volumes live.
	if _, err := admin.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local-test"},
		Provisioner: localpv.Provisioner}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := host1.StorageV1().StorageClasses().Get(ctx, "local-test", metav1.GetOptions{}); err != nil {
		t.Errorf("host-1 gets a StorageClass: %v", err)
	}

	removeFinalizer := func(name string, edit func(*corev1.PersistentVolume)) error {
		pv, err := pvs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pv.Finalizers = localpv.WithoutFinalizer(pv.Finalizers)
		if edit != nil {
			edit(pv)
		}
		_, err = host1.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
		return err
	}
	// Before the volume is deleted: NodeRestriction refuses (once the Node authorizer's
	// cache holds the volume and lets the request through to admission).
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := removeFinalizer("pvc-mine", nil)
		return err != nil && strings.Contains(err.Error(), "once the volume is deleted"), nil
	}); err != nil {
		t.Fatalf("host-1 removes the finalizer of a live volume: %v, want NodeRestriction's 403", removeFinalizer("pvc-mine", nil))
	}
	forbidden("host-1 updates host-2's volume", removeFinalizer("pvc-theirs", nil), "may only update the persistentvolumes labelled")
	if err := pvs.Delete(ctx, "pvc-mine", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The volume is not Bound: the volumeprotection controller (played here) lets it go, so
	// that the node's cleanup finalizer is the last one.
	deleted, err := pvs.Get(ctx, "pvc-mine", metav1.GetOptions{})
	if err != nil || !slices.Contains(deleted.Finalizers, volumeprotection.VolumeFinalizer) {
		t.Fatalf("a new volume carries %s: %v %+v", volumeprotection.VolumeFinalizer, err, deleted)
	}
	deleted.Finalizers = slices.DeleteFunc(deleted.Finalizers, func(f string) bool { return f == volumeprotection.VolumeFinalizer })
	if _, err := pvs.Update(ctx, deleted, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	forbidden("host-1 moves its deleted volume to host-2", removeFinalizer("pvc-mine", func(pv *corev1.PersistentVolume) {
		pv.Labels[localpv.LabelNode] = "host-2"
	}), "change nothing else")
	forbidden("host-1 annotates its deleted volume", removeFinalizer("pvc-mine", func(pv *corev1.PersistentVolume) {
		pv.Annotations["example.com/x"] = "y"
	}), "change nothing else")
	err = host1.CoreV1().PersistentVolumes().Delete(ctx, "pvc-theirs", metav1.DeleteOptions{})
	forbidden("host-1 deletes host-2's volume", err, "forbidden")
	if err := removeFinalizer("pvc-mine", nil); err != nil {
		t.Fatalf("host-1 removes the cleanup finalizer of its deleted volume: %v", err)
	}
	if _, err := pvs.Get(ctx, "pvc-mine", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the volume after its last finalizer went: %v, want NotFound", err)
	}
	// The watch saw it go.
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Deleted {
				return
			}
		case <-wctx.Done():
			t.Fatal("host-1's watch saw no deletion of its volume")
		}
	}
}
