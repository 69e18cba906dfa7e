package rootca_test

import (
	"context"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/rootca"
)

const caPEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

func namespace(name string, phase corev1.NamespacePhase) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NamespaceStatus{Phase: phase}}
}

// start runs the controller on a fake clientset holding objs until the test ends.
func start(t *testing.T, objs ...*corev1.Namespace) kubernetes.Interface {
	t.Helper()
	client := fake.NewClientset()
	for _, ns := range objs {
		if _, err := client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cctx := &controllers.Context{Client: client, Informers: informers.NewSharedInformerFactory(client, 0), RootCA: []byte(caPEM)}
	r, err := rootca.New(cctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cctx.Informers.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx, 2); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cctx.Informers.Shutdown()
	})
	return client
}

// published waits until namespace ns has the ConfigMap as the controller keeps it.
func published(t *testing.T, client kubernetes.Interface, ns string) *corev1.ConfigMap {
	t.Helper()
	var cm *corev1.ConfigMap
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().ConfigMaps(ns).Get(ctx, rootca.ConfigMapName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		cm = got
		return maps.Equal(got.Data, map[string]string{"ca.crt": caPEM}) &&
			got.Annotations["kubernetes.io/description"] == rootca.Description, nil
	})
	if err != nil {
		t.Fatalf("ConfigMap %s/kube-root-ca.crt: %v (last seen %+v)", ns, err, cm)
	}
	return cm
}

func TestPublishesRootCA(t *testing.T) {
	client := start(t, namespace("default", corev1.NamespaceActive), namespace("going", corev1.NamespaceTerminating))
	ctx := context.Background()
	published(t, client, "default")

	// A new namespace gets it.
	if _, err := client.CoreV1().Namespaces().Create(ctx, namespace("team-a", corev1.NamespaceActive), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	published(t, client, "team-a")

	// A deleted one comes back.
	if err := client.CoreV1().ConfigMaps("team-a").Delete(ctx, rootca.ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	published(t, client, "team-a")

	// A changed one is restored, keeping what else it was given.
	cm := published(t, client, "default").DeepCopy()
	cm.Data = map[string]string{"ca.crt": "forged", "extra": "x"}
	cm.Annotations = map[string]string{"team": "a"}
	if _, err := client.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := published(t, client, "default"); got.Annotations["team"] != "a" || len(got.Data) != 1 {
		t.Errorf("restored ConfigMap %+v", got)
	}

	// A terminating namespace gets nothing.
	if _, err := client.CoreV1().ConfigMaps("going").Get(ctx, rootca.ConfigMapName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap in a terminating namespace: %v", err)
	}
}

func TestNeedsRootCA(t *testing.T) {
	client := fake.NewClientset()
	if _, err := rootca.New(&controllers.Context{Client: client, Informers: informers.NewSharedInformerFactory(client, 0)}); err == nil {
		t.Error("New without a CA succeeded")
	}
}
