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
