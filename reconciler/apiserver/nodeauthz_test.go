package apiserver

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/flotilla-dev/flotilla/nodes/refcache"
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
