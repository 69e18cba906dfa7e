package refcache

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/flotilla-dev/flotilla/nodes/checkpoint"
)

func testLog() *logrus.Entry { return logrus.NewEntry(logrus.New()) }

func secret(ns, name, value string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "test"}}}, Data: map[string][]byte{"k": []byte(value)}}
}

func newSecrets(ctx context.Context, cs *fake.Clientset, cfg Config) *Cache[*corev1.Secret] {
	// Generous, for loaded test machines: a new watch answers in milliseconds.
	cfg.WaitTimeout = 10 * time.Second
	return New[*corev1.Secret](ctx, "secrets", func(ns string) Client[*corev1.SecretList] { return cs.CoreV1().Secrets(ns) }, cfg)
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGet: an object is read by name (the list and watch carry metadata.name), a missing
// one is NotFound, changes arrive through the watch and call OnChange.
func TestGet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(secret("app", "a", "1"), secret("app", "b", "2"), secret("other", "a", "3"))
	var mu sync.Mutex
	var changes []string
	c := newSecrets(ctx, cs, Config{Log: testLog(), OnChange: func(ns, name string) {
		mu.Lock()
		changes = append(changes, ns+"/"+name)
		mu.Unlock()
	}})
	s, err := c.Get("app", "a")
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data["k"]) != "1" || s.ManagedFields != nil {
		t.Errorf("got %+v", s)
	}
	if _, err := c.Get("app", "missing"); !apierrors.IsNotFound(err) {
		t.Errorf("missing: %v, want NotFound", err)
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			continue
		}
		var sel string
		switch a := a.(type) {
		case clienttesting.ListAction:
			sel = a.GetListRestrictions().Fields.String()
		case clienttesting.WatchAction:
			sel = a.GetWatchRestrictions().Fields.String()
		}
		if !strings.HasPrefix(sel, "metadata.name=") || a.GetNamespace() != "app" {
			t.Errorf("%s %s in %q with selector %q: want one object by name", a.GetVerb(), a.GetResource().Resource, a.GetNamespace(), sel)
		}
	}
	if _, err := cs.CoreV1().Secrets("app").Update(ctx, secret("app", "a", "changed"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "update seen", func() error {
		s, err := c.Get("app", "a")
		if err != nil {
			return err
		}
		if string(s.Data["k"]) != "changed" {
			return errors.New("old value")
		}
		return nil
	})
	// Another Secret of the namespace (the fake ignores field selectors) is not held.
	if _, err := cs.CoreV1().Secrets("app").Update(ctx, secret("app", "b", "changed"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Secrets("app").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "delete seen", func() error {
		if _, err := c.Get("app", "a"); !apierrors.IsNotFound(err) {
			return errors.New("still there")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, ch := range changes {
		if ch != "app/a" {
			t.Errorf("change of %s", ch)
		}
	}
	if len(changes) < 3 {
		t.Errorf("changes %v: want add, update, delete of app/a", changes)
	}
}

// TestForbidden: a refusal is an error the caller retries, not NotFound, and the watch
// picks the object up once the API allows it.
func TestForbidden(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(secret("app", "a", "1"))
	var refuse atomic.Bool
	refuse.Store(true)
	cs.PrependReactor("list", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if refuse.Load() {
			return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), "a", errors.New("no relationship"))
		}
		return false, nil, nil
	})
	c := newSecrets(ctx, cs, Config{Log: testLog()})
	_, err := c.Get("app", "a")
	if !apierrors.IsForbidden(err) {
		t.Fatalf("refused: %v, want Forbidden", err)
	}
	// Refused and unused for a while, the watch stops (its retries are denials).
	c.Sweep(time.Now().Add(time.Minute))
	if n := c.Len(); n != 0 {
		t.Errorf("%d watches after the sweep, want the refused one stopped", n)
	}
	if _, err := c.Get("app", "a"); !apierrors.IsForbidden(err) {
		t.Fatalf("refused again: %v, want Forbidden", err)
	}
	refuse.Store(false)
	eventually(t, "allowed", func() error {
		_, err := c.Get("app", "a")
		return err
	})
	// A watch that answers stays for IdleTimeout.
	c.Sweep(time.Now().Add(time.Minute))
	if n := c.Len(); n != 1 {
		t.Errorf("%d watches after the sweep, want 1", n)
	}
}

func connRefused() error {
	return &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/api/v1/secrets", Err: syscall.ECONNREFUSED}
}

// TestCheckpoint: what the cache holds is written to the checkpoint; a cache started while
// the API is down answers from it (and only what it holds); objects nobody asks for any more
// leave it.
func TestCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := checkpoint.Open(dir, testLog())
	if err != nil {
		t.Fatal(err)
	}
	d.Debounce = 10 * time.Millisecond
	cs := fake.NewClientset(secret("app", "a", "1"), secret("app", "b", "2"))
	c := newSecrets(ctx, cs, Config{Checkpoint: d, Log: testLog()})
	if _, err := c.Get("app", "a"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "secrets.json")
	eventually(t, "checkpoint written", func() error {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), `"name":"a"`) || strings.Contains(string(b), `"name":"b"`) || strings.Contains(string(b), "managedFields") {
			return errors.New(string(b))
		}
		return nil
	})
	cancel()
	if !d.Wait(5 * time.Second) {
		t.Fatal("the first host's checkpoint writers did not stop")
	}

	// The host restarts cut off.
	ctx, cancel = context.WithCancel(context.Background())
	d, err = checkpoint.Open(dir, testLog())
	if err != nil {
		t.Fatal(err)
	}
	// The writers end before t.TempDir's cleanup removes the directory they write in.
	t.Cleanup(func() {
		cancel()
		if !d.Wait(5 * time.Second) {
			t.Error("the checkpoint writers did not stop")
		}
	})
	d.Debounce = 10 * time.Millisecond
	down := fake.NewClientset()
	var isDown atomic.Bool
	isDown.Store(true)
	down.PrependReactor("list", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if isDown.Load() {
			return true, nil, connRefused()
		}
		return false, nil, nil
	})
	c = newSecrets(ctx, down, Config{Checkpoint: d, Log: testLog(), IdleTimeout: time.Hour})
	s, err := c.Get("app", "a")
	if err != nil || string(s.Data["k"]) != "1" {
		t.Fatalf("from the checkpoint: %v %v", s, err)
	}
	if _, err := c.Get("app", "b"); err == nil || apierrors.IsNotFound(err) {
		t.Errorf("not in the checkpoint: %v, want an error to retry", err)
	}
	// The API answers again: a is gone there.
	isDown.Store(false)
	eventually(t, "API again", func() error {
		if _, err := c.Get("app", "a"); !apierrors.IsNotFound(err) {
			return errors.New("still served")
		}
		return nil
	})
	// Idle watches stop, and their objects leave the checkpoint.
	if _, err := down.CoreV1().Secrets("app").Create(ctx, secret("app", "c", "3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get("app", "c"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "c checkpointed", func() error {
		b, _ := os.ReadFile(file)
		if !strings.Contains(string(b), `"name":"c"`) {
			return errors.New(string(b))
		}
		return nil
	})
	c.Sweep(time.Now().Add(2 * time.Hour))
	if n := c.Len(); n != 0 {
		t.Errorf("%d watches after the sweep", n)
	}
	eventually(t, "checkpoint emptied", func() error {
		b, _ := os.ReadFile(file)
		if strings.Contains(string(b), `"name":"`) {
			return errors.New(string(b))
		}
		return nil
	})
}

// TestClusterScoped: PersistentVolumes have no namespace.
func TestClusterScoped(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}})
	c := New[*corev1.PersistentVolume](ctx, "persistentvolumes", func(string) Client[*corev1.PersistentVolumeList] {
		return cs.CoreV1().PersistentVolumes()
	}, Config{Log: testLog(), WaitTimeout: 10 * time.Second})
	if pv, err := c.Get("", "pv1"); err != nil || pv.Name != "pv1" {
		t.Fatalf("%v %v", pv, err)
	}
	if _, err := c.Get("", "pv2"); !apierrors.IsNotFound(err) {
		t.Errorf("pv2: %v", err)
	}
}
