package serviceaccount

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// The getter answers from the informer, and asks the API for what the informer has not seen.
func TestGetter(t *testing.T) {
	client := fake.NewClientset(testSA("default", "fresh", "live-uid"), testPod("default", "fresh-1", "live-pod-uid", "fresh", ""))
	factory := informers.NewSharedInformerFactory(client, 0)
	g := NewGetter(factory, client)

	// NewGetter registered the informers with the factory; not started, they are empty.
	saInf := factory.Core().V1().ServiceAccounts().Informer()
	podInf := factory.Core().V1().Pods().Informer()
	if err := saInf.GetIndexer().Add(testSA("default", "cached", "cached-uid")); err != nil {
		t.Fatal(err)
	}
	if err := podInf.GetIndexer().Add(testPod("default", "fresh-1", "cached-pod-uid", "fresh", "")); err != nil {
		t.Fatal(err)
	}

	if sa, err := g.ServiceAccount("default", "cached"); err != nil || sa.UID != "cached-uid" {
		t.Errorf("cached service account: %v, %v", sa, err)
	}
	if sa, err := g.ServiceAccount("default", "fresh"); err != nil || sa.UID != "live-uid" {
		t.Errorf("fresh service account (live GET): %v, %v", sa, err)
	}
	if pod, err := g.Pod("default", "fresh-1"); err != nil || pod.UID != "cached-pod-uid" {
		t.Errorf("pod: %v, %v; want the informer's copy first", pod, err)
	}
	if _, err := g.ServiceAccount("default", "missing"); !apierrors.IsNotFound(err) {
		t.Errorf("missing service account: %v, want NotFound", err)
	}
	if _, err := g.Pod("other", "fresh-1"); !apierrors.IsNotFound(err) {
		t.Errorf("missing pod: %v, want NotFound", err)
	}
}
