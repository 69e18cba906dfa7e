package internal

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Only an existing namespace that is not being deleted is active.
func TestActiveNamespace(t *testing.T) {
	now := metav1.Now()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "active"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}},
		{ObjectMeta: metav1.ObjectMeta{Name: "terminating"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}},
		{ObjectMeta: metav1.ObjectMeta{Name: "deleted", DeletionTimestamp: &now}},
	} {
		if err := idx.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	lister := corelisters.NewNamespaceLister(idx)
	for name, want := range map[string]bool{"active": true, "terminating": false, "deleted": false, "missing": false} {
		if got, err := ActiveNamespace(lister, name); err != nil || got != want {
			t.Errorf("%s: ActiveNamespace = %v, %v; want %v", name, got, err, want)
		}
	}
}
