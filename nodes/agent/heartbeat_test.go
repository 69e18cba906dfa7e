package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestHeartbeatRenewsLeaseWhenDueAndAfterFailure: with a long renew interval the Lease is
// renewed once at start, not at every heartbeat; after heartbeats fail (the API cannot be
// reached) it is renewed at the first one that succeeds.
func TestHeartbeatRenewsLeaseWhenDueAndAfterFailure(t *testing.T) {
	client := fake.NewClientset()
	var renewals atomic.Int32
	var mu sync.Mutex
	var renewedAt []time.Time
	var down atomic.Bool
	client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("connection refused")
		}
		if a.GetVerb() == "create" || a.GetVerb() == "update" {
			renewals.Add(1)
			mu.Lock()
			renewedAt = append(renewedAt, time.Now())
			mu.Unlock()
		}
		return false, nil, nil
	})
	var gets atomic.Int32
	client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		if down.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunNodeHeartbeat(ctx, client, NodeConfig{Name: "host-1", DataDir: t.TempDir(),
			HeartbeatInterval: 100 * time.Millisecond, LeaseRenewInterval: time.Hour, LeaseDuration: 3 * time.Hour})
	}()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("the first renewal", func() bool { return renewals.Load() == 1 })
	// Ten heartbeats later, still one renewal: the status was read at each.
	g := gets.Load()
	waitFor("ten heartbeats", func() bool { return gets.Load() >= g+10 })
	if n := renewals.Load(); n != 1 {
		t.Fatalf("%d Lease writes over ten heartbeats with a renew interval of an hour, want 1", n)
	}
	lease, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "host-1", metav1.GetOptions{})
	if err != nil || *lease.Spec.LeaseDurationSeconds != 3*3600 {
		t.Fatalf("Lease %+v %v: want leaseDurationSeconds 10800", lease, err)
	}
	// The API goes away for a few heartbeats, then comes back: renewed at once.
	down.Store(true)
	g = gets.Load()
	waitFor("failed heartbeats", func() bool { return gets.Load() >= g+3 })
	back := time.Now()
	down.Store(false)
	waitFor("a renewal after the API came back", func() bool { return renewals.Load() == 2 })
	mu.Lock()
	d := renewedAt[1].Sub(back)
	mu.Unlock()
	if d > 2*time.Second {
		t.Fatalf("renewed %s after the API came back, want within the 1 s retry", d)
	}
}
