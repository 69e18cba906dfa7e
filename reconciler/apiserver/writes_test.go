package apiserver

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Writes counts the writes the API server lets through authentication and authorization:
// the agent's memory policy follows it, and neither reads nor refused writes may make a burst.
func TestWritesCountsAuthorizedWrites(t *testing.T) {
	admin, clientFor, _ := startCertServer(t)
	ctx := context.Background()
	const n = 50
	cm := func(i int) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%d", i)}}
	}

	before := Writes()
	for i := range n {
		if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, cm(i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := Writes() - before; got < n {
		t.Fatalf("%d creates counted %d writes", n, got)
	}

	// Reads and refused writes: the site's own controllers may write meanwhile, but far
	// fewer than n.
	before = Writes()
	nobody := clientFor("nobody")
	for i := range n {
		if _, err := admin.CoreV1().ConfigMaps("default").Get(ctx, cm(i).Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := nobody.CoreV1().ConfigMaps("default").Create(ctx, cm(n+i), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("create by a user without a role: %v, want forbidden", err)
		}
	}
	if got := Writes() - before; got >= n {
		t.Fatalf("%d reads and %d refused creates counted %d writes", n, n, got)
	}
}
