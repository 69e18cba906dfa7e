package scheduler

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
)

// TestBindingLostIsNotRetried: when pods/binding answers 409 (another scheduler bound the
// pod first), the assumption is forgotten and the pod is neither retried nor reported. The
// real commit rule is tested against the API server in test/scheduler.
func TestBindingLostIsNotRetried(t *testing.T) {
	client := fake.NewClientset(node("n1", 1000, 1024, 110), pod("lost", 300, 0), pod("won", 300, 0))
	var (
		mu    sync.Mutex
		binds []string
	)
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding).Name
		mu.Lock()
		binds = append(binds, name)
		mu.Unlock()
		if name == "lost" {
			return true, nil, apierrors.NewConflict(corev1.Resource("pods"), name, nil)
		}
		return true, &corev1.Binding{}, nil
	})
	rec := record.NewFakeRecorder(10)
	cctx := &controllers.Context{Client: client, Informers: informers.NewSharedInformerFactory(client, 0),
		Recorder: func(string) record.EventRecorder { return rec }}
	s, err := New(cctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cctx.Informers.Start(ctx.Done())
	done := make(chan error)
	go func() { done <- s.Run(ctx, 1) }()
	deadline := time.Now().Add(10 * time.Second)
	for st := s.Stats(); st.Bound+st.Lost < 2; st = s.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // longer than the initial backoff: a retry would show
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Bound != 1 || st.Lost != 1 {
		t.Fatalf("stats %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(binds) != 2 {
		t.Fatalf("bindings %v: the lost pod was retried", binds)
	}
	snap := s.cache.RLock()
	used := snap.Get("n1").Requested.MilliCPU
	s.cache.RUnlock()
	if used != 300 {
		t.Fatalf("n1 counts %dm: the lost pod's assumption must be forgotten", used)
	}
	close(rec.Events)
	var events []string
	for e := range rec.Events {
		events = append(events, e)
	}
	if len(events) != 1 || !strings.HasPrefix(events[0], "Normal Scheduled Successfully assigned default/won to n1") {
		t.Fatalf("events %q", events)
	}
}
