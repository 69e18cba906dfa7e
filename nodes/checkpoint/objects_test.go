package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestObjects: objects kept one by one are written as an informer's checkpoint is, and
// read back by the next Objects of the same name.
func TestObjects(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, testLog())
	if err != nil {
		t.Fatal(err)
	}
	d.Debounce = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	// The writer ends before t.TempDir's cleanup removes the directory it writes in.
	t.Cleanup(func() {
		cancel()
		if !d.Wait(5 * time.Second) {
			t.Error("the checkpoint writer did not stop")
		}
	})
	newList := func() runtime.Object { return &corev1.SecretList{} }
	o := d.Objects(ctx, "secrets", newList)
	if len(o.Keys()) != 0 {
		t.Fatalf("new checkpoint holds %v", o.Keys())
	}
	s := func(ns, name, rv string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv, UID: "u-" + "name"}}
	}
	o.Set(s("b", "two", "1"))
	o.Set(s("a", "one", "1"))
	o.Set(s("a", "gone", "1"))
	o.Delete("a/gone")
	o.Delete("a/never")
	eventually(t, 5*time.Second, "written", func() error {
		b, err := os.ReadFile(filepath.Join(dir, "secrets.json"))
		if err != nil {
			return err
		}
		if i, j := strings.Index(string(b), `"name":"one"`), strings.Index(string(b), `"name":"two"`); i < 0 || j < i || strings.Contains(string(b), "gone") {
			return os.ErrNotExist
		}
		return nil
	})
	again := d.Objects(ctx, "secrets", newList)
	if got := strings.Join(again.Keys(), ","); got != "a/one,b/two" {
		t.Errorf("reopened: %s", got)
	}
	if obj, ok := again.Get("a/one"); !ok || obj.(*corev1.Secret).Name != "one" {
		t.Errorf("Get a/one: %v %v", obj, ok)
	}
	// An unreadable file starts empty.
	if err := os.WriteFile(filepath.Join(dir, "configmaps.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if keys := d.Objects(ctx, "configmaps", func() runtime.Object { return &corev1.ConfigMapList{} }).Keys(); len(keys) != 0 {
		t.Errorf("unreadable checkpoint: %v", keys)
	}
}
