package nodeipam_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/nodeipam"
	"github.com/flotilla-dev/flotilla/test/controllertest"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// runIPAM runs the controller through controllers.RunControllers (as the leader does) until
// the returned stop is called; stop waits for it to end, like a lost leadership.
func runIPAM(t *testing.T, a *framework.Agent, o nodeipam.Options) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- controllers.RunControllers(ctx, a.RESTConfig(), []controllers.Named{{Name: "nodeipam", Workers: 2,
			New: func(c *controllers.Context) (controllers.Runner, error) { return nodeipam.NewWithOptions(c, o) }}})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("RunControllers: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func createNode(t *testing.T, client kubernetes.Interface, name, podCIDR string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if podCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
}

// waitAllAssigned waits until every Node has a podCIDR and checks that no two overlap, that
// podCIDRs matches podCIDR and that each lies in cluster (except those in preset).
func waitAllAssigned(t *testing.T, client kubernetes.Interface, cluster string, preset map[string]string) map[string]string {
	t.Helper()
	var got map[string]string
	controllertest.Eventually(t, 30*time.Second, "every node has a pod CIDR", func() (bool, error) {
		list, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = map[string]string{}
		for _, n := range list.Items {
			if n.Spec.PodCIDR == "" {
				return false, fmt.Errorf("node %s has no podCIDR yet", n.Name)
			}
			got[n.Name] = n.Spec.PodCIDR
			if len(n.Spec.PodCIDRs) != 1 || n.Spec.PodCIDRs[0] != n.Spec.PodCIDR {
				t.Fatalf("node %s: podCIDRs %v do not match podCIDR %s", n.Name, n.Spec.PodCIDRs, n.Spec.PodCIDR)
			}
		}
		return true, nil
	})
	cl := netip.MustParsePrefix(cluster)
	var names []string
	for name, c := range got {
		p := netip.MustParsePrefix(c)
		if _, isPreset := preset[name]; !isPreset && (p.Bits() != 24 || !cl.Contains(p.Addr())) {
			t.Errorf("node %s got %s, not a /24 of %s", name, c, cluster)
		}
		for _, other := range names {
			if p.Overlaps(netip.MustParsePrefix(got[other])) {
				t.Errorf("nodes %s and %s share pod CIDRs %s and %s", name, other, c, got[other])
			}
		}
		names = append(names, name)
	}
	return got
}

// TestAssignsUniqueCIDRsAcrossLeaderChanges runs the controller against a real API server:
// Nodes that already hold pod CIDRs (one set by hand to a /23) are respected, every new Node
// gets a distinct /24, and a second controller instance (a new leader) started after the
// first stopped never reuses a subnet.
func TestAssignsUniqueCIDRsAcrossLeaderChanges(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	client := a.Client()
	preset := map[string]string{"old-1": "10.244.0.0/24", "odd-1": "10.244.2.0/23"}
	for name, c := range preset {
		createNode(t, client, name, c)
	}
	stop := runIPAM(t, a, nodeipam.Options{})
	for i := 0; i < 5; i++ {
		createNode(t, client, fmt.Sprintf("edge-%d", i), "")
	}
	got := waitAllAssigned(t, client, "10.244.0.0/16", preset)
	for name, c := range preset {
		if got[name] != c {
			t.Errorf("preset node %s changed from %s to %s", name, c, got[name])
		}
	}
	// The new nodes (and the agent's own, registered on start) got the lowest free subnets:
	// 1, then 4 and up (2 and 3 are held by the /23).
	want := map[string]bool{}
	for _, i := range []int{1, 4, 5, 6, 7, 8, 9, 10}[:len(got)-len(preset)] {
		want[fmt.Sprintf("10.244.%d.0/24", i)] = true
	}
	for name, c := range got {
		if _, isPreset := preset[name]; !isPreset && !want[c] {
			t.Errorf("node %s got %s, want one of the lowest free /24s %v", name, c, want)
		}
	}

	// Leader change: the first instance stops, nodes arrive while no one leads, a new one
	// starts with an empty memory.
	stop()
	for i := 5; i < 8; i++ {
		createNode(t, client, fmt.Sprintf("edge-%d", i), "")
	}
	runIPAM(t, a, nodeipam.Options{})
	for i := 8; i < 10; i++ {
		createNode(t, client, fmt.Sprintf("edge-%d", i), "")
	}
	got = waitAllAssigned(t, client, "10.244.0.0/16", preset)
	if len(got) < 12 {
		t.Fatalf("want at least 12 nodes, got %v", got)
	}

	// A pod CIDR once assigned is immutable (API validation), so the controller never has to
	// undo anything: check that the API refuses a change.
	n, err := client.CoreV1().Nodes().Get(context.Background(), "edge-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.244.200.0/24", []string{"10.244.200.0/24"}
	if _, err := client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err == nil {
		t.Errorf("API accepted a change of an assigned podCIDR")
	}
}

// TestExhaustedClusterCIDR: with room for two /24s the third Node waits with a
// CIDRNotAvailable event and gets the subnet of a Node that is deleted.
func TestExhaustedClusterCIDR(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	client := a.Client()
	ctx := context.Background()
	// The agent registers its own Node, which would take one of the subnets too: wait for it
	// (it may come just after the API answers) and delete it.
	var list *corev1.NodeList
	controllertest.Eventually(t, 30*time.Second, "the agent's own Node", func() (bool, error) {
		var err error
		list, err = client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) > 0, err
	})
	for _, n := range list.Items {
		if err := client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	runIPAM(t, a, nodeipam.Options{ClusterCIDR: "10.250.0.0/23", NodeMaskSize: 24})
	for _, name := range []string{"a", "b", "c"} {
		createNode(t, client, name, "")
	}
	var holders []string
	var waiting string
	controllertest.Eventually(t, 30*time.Second, "two nodes assigned, one CIDRNotAvailable", func() (bool, error) {
		holders, waiting = nil, ""
		for _, name := range []string{"a", "b", "c"} {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if n.Spec.PodCIDR != "" {
				holders = append(holders, name)
			} else {
				waiting = name
			}
		}
		if len(holders) != 2 || waiting == "" {
			return false, fmt.Errorf("holders %v", holders)
		}
		evs, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", nodeipam.ReasonCIDRNotAvailable).String()})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == waiting {
				return true, nil
			}
		}
		return false, fmt.Errorf("no %s event for %s", nodeipam.ReasonCIDRNotAvailable, waiting)
	})
	freed, err := client.CoreV1().Nodes().Get(ctx, holders[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Nodes().Delete(ctx, holders[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The waiting node's retries back off (up to tens of seconds on a loaded machine); the
	// deletion enqueues it at once, but allow for a slow watch.
	controllertest.Eventually(t, 60*time.Second, "waiting node gets the freed subnet", func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, waiting, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return n.Spec.PodCIDR == freed.Spec.PodCIDR, nil
	})
}
