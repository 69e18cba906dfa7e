package nodelifecycle

import (
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// TestObserveGossipDeathAndFreshHeartbeats: gossip's word that a host is dead makes its node
// stale before the grace period, unless the host's heartbeat is newer than that word (a
// healed partition that gossip has not reconnected yet, seen by a controller just started).
func TestObserveGossipDeathAndFreshHeartbeats(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	deadSince := now.Add(-30 * time.Second)
	for _, tc := range []struct {
		name  string
		renew time.Time
		want  bool
	}{
		{"heartbeat older than gossip's death: stale at once", deadSince.Add(-2 * time.Second), true},
		{"heartbeat renewed after gossip's death: alive", now.Add(-time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leases := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			_ = leases.Add(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "host-2", Namespace: corev1.NamespaceNodeLease},
				Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: tc.renew}}})
			c := &Controller{
				cfg: DefaultConfig(), leaseLister: coordlisters.NewLeaseLister(leases), health: map[string]*health{},
				hostDeadSince: func(name string) (time.Time, bool) { return deadSince, name == "host-2" },
				log:           logrus.NewEntry(logrus.New()),
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "host-2"}}
			if got := c.observe(node, now); got != tc.want {
				t.Fatalf("observe = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestObserveGossipCarriesLiveness: while gossip sees a host alive its node stays healthy
// without Lease renewals, up to the Lease's own duration; without gossip's word the grace
// period applies to the Lease as before.
func TestObserveGossipCarriesLiveness(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	leases := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	dur := int32(15 * 60)
	_ = leases.Add(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "host-2", Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: start}, LeaseDurationSeconds: &dur}})
	alive := true
	c := &Controller{
		cfg: DefaultConfig(), leaseLister: coordlisters.NewLeaseLister(leases), health: map[string]*health{},
		hostAlive: func(name string) bool { return alive && name == "host-2" },
		log:       logrus.NewEntry(logrus.New()),
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "host-2"}}
	// Every monitor period for 14 minutes, no renewal: gossip says alive, the node is healthy.
	for at := start; at.Before(start.Add(14 * time.Minute)); at = at.Add(5 * time.Second) {
		if c.observe(node, at) {
			t.Fatalf("stale at %s with gossip seeing the host alive and a Lease of 15 minutes", at.Sub(start))
		}
	}
	// Gossip stops seeing the host: stale once the grace period has passed since it last did.
	lost := start.Add(14 * time.Minute)
	alive = false
	if c.observe(node, lost.Add(30*time.Second)) {
		t.Fatal("stale 30 s after gossip lost the host, within the 40 s grace")
	}
	if !c.observe(node, lost.Add(45*time.Second)) {
		t.Fatal("healthy 45 s after gossip lost the host and 14 minutes after the last renewal")
	}
	// Gossip sees it again: healthy again, until the Lease's 15 minutes without a renewal.
	alive = true
	if c.observe(node, start.Add(14*time.Minute+50*time.Second)) {
		t.Fatal("stale with gossip seeing the host alive again")
	}
	if !c.observe(node, start.Add(15*time.Minute+5*time.Second)) {
		t.Fatal("healthy 15 minutes after the last renewal: a host that gossips but never reaches the API is not healthy")
	}
	// A renewal makes it healthy.
	_ = leases.Update(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "host-2", Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: start.Add(15 * time.Minute)}, LeaseDurationSeconds: &dur}})
	if c.observe(node, start.Add(15*time.Minute+10*time.Second)) {
		t.Fatal("stale right after a renewal")
	}
}
