package network

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// TestRunRoutesSharesInformers gives the routes loop a factory on which another user already
// watches Nodes: the loop must use that watch (one Node watch in all), follow Node changes
// through it, and leave the factory usable when it returns.
func TestRunRoutesSharesInformers(t *testing.T) {
	peer := func(name, cidr, ip string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	client := fake.NewClientset(peer("me", "10.244.0.0/24", "192.0.2.1"), peer("p1", "10.244.1.0/24", "192.0.2.2"))
	var mu sync.Mutex
	watches := map[string]int{}
	client.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		watches[a.GetResource().Resource]++
		mu.Unlock()
		return false, nil, nil
	})
	nodeWatches := func() int {
		mu.Lock()
		defer mu.Unlock()
		return watches["nodes"]
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shared := informers.NewSharedInformerFactory(client, 0)
	// Another user of the host's factory (the Ingress proxy, say), there first.
	other := shared.Core().V1().Nodes().Informer()
	shared.Start(ctx.Done())

	got := make(chan []Peer, 10)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- runRoutes(runCtx, client, "me", RoutesConfig{Informers: shared}, func(p []Peer) error {
			got <- p
			return nil
		}, logrus.NewEntry(logrus.StandardLogger()))
	}()
	want := func(names ...string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case p := <-got:
				var have []string
				for _, x := range p {
					have = append(have, x.Name)
				}
				if slices.Equal(have, names) {
					return
				}
			case <-deadline:
				t.Fatalf("routes never synced with peers %v", names)
			}
		}
	}
	want("p1")
	if _, err := client.CoreV1().Nodes().Create(ctx, peer("p2", "10.244.2.0/24", "192.0.2.3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("p1", "p2")
	// p2 came through a watch of the loop's informer; once the other user sees it too, both
	// watches (or the one shared) are counted.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, ok, _ := other.GetStore().GetByKey("p2")
		return ok, nil
	}); err != nil {
		t.Fatal("the other user of the factory never saw Node p2")
	}
	if n := nodeWatches(); n != 1 {
		t.Errorf("Nodes watched %d times through one shared factory, want 1", n)
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runRoutes: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runRoutes did not return after its ctx ended")
	}
	// The other user's informer and the factory live on: runRoutes must not shut them down.
	if other.IsStopped() {
		t.Error("the shared Node informer stopped with runRoutes")
	}
	ns := shared.Core().V1().Namespaces().Informer()
	shared.Start(ctx.Done())
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), ns.HasSynced) {
		t.Error("the shared factory starts no new informer after runRoutes returned: was it shut down?")
	}
}
