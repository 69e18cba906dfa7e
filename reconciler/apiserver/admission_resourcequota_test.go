package apiserver

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// TestResourceQuotaAdmissionSkipsOnlyQuotaFreeNamespaces: a pod in a namespace without a
// ResourceQuota is admitted without the quota plugin's queue, and one in a namespace whose
// quota is used up is still refused by it.
func TestResourceQuotaAdmissionSkipsOnlyQuotaFreeNamespaces(t *testing.T) {
	full := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "two-pods", Namespace: "limited"},
		Spec:   corev1.ResourceQuotaSpec{Hard: rl("pods", "2")},
		Status: corev1.ResourceQuotaStatus{Hard: rl("pods", "2"), Used: rl("pods", "2")}}
	client := fake.NewSimpleClientset(full)
	f := informers.NewSharedInformerFactory(client, 0)
	drained := make(chan struct{})
	p, err := resourceQuotaPlugin(f, client, drained)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	f.Start(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer of %v did not sync", typ)
		}
	}
	v, ok := p.(admission.ValidationInterface)
	if !ok {
		t.Fatalf("%T validates nothing", p)
	}
	create := func(ns string) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		a := admission.NewAttributesRecord(pod, nil, corev1.SchemeGroupVersion.WithKind("Pod"), ns, "web",
			corev1.SchemeGroupVersion.WithResource("pods"), "", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "alice"})
		return v.Validate(ctx, a, nil)
	}
	if err := create("free"); err != nil {
		t.Errorf("pod in a namespace without quota: %v", err)
	}
	if err := create("limited"); err == nil || !strings.Contains(err.Error(), "exceeded quota: two-pods") {
		t.Errorf("pod in a namespace whose quota is used up: %v, want exceeded quota: two-pods", err)
	}
}
