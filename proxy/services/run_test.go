package services

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/test/framework"
	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// TestRunAgainstAPIServer drives Run from a real API server: Service, EndpointSlice and Node
// objects created with client-go become working ClusterIP and NodePort rules in a test network
// namespace; endpoint changes, scale to zero and a deleted table are followed.
func TestRunAgainstAPIServer(t *testing.T) {
	tp := setupTopo(t)
	serve(t, tp.podA, podAIP+":8080", "a")
	serve(t, tp.podB, podBIP+":8080", "b")
	a := framework.StartAgent(t, framework.AgentOptions{})
	client := a.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	node, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: hostIP}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node status: %v", err)
	}
	svc := mkSvc("web", "10.96.0.50", 80, nodePort(30080))
	if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service: %v", err)
	}
	slice := mkSlice("web-1", "web", 8080, readyEP(podAIP, "n1"))
	slice.Labels[discoveryv1.LabelManagedBy] = "test.flotilla.dev"
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create endpointslice: %v", err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	logger := logrus.New()
	logger.SetLevel(logrus.DebugLevel)
	go func() {
		done <- Run(runCtx, client, Config{NodeName: "n1", Mode: "auto", ResyncPeriod: time.Second, NetNS: "/run/netns/" + tp.host, Log: logrus.NewEntry(logger)})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
		be := NewNftables(NftablesOptions{NetNSFd: tp.hostFd})
		if err := be.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	eventually := func(what, ns, addr string, ok func(line string, err error) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		var line string
		var err error
		for time.Now().Before(deadline) {
			line, err = dial(t, ns, addr, time.Second)
			if ok(line, err) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: last answer %q, %v", what, line, err)
	}
	answers := func(prefix string) func(string, error) bool {
		return func(l string, err error) bool { return err == nil && strings.HasPrefix(l, prefix) }
	}
	eventually("ClusterIP from the host", tp.host, "10.96.0.50:80", answers("a "))
	eventually("NodePort on the Node's InternalIP from outside", tp.client, hostIP+":30080", answers("a "))

	slice.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{podBIP}, NodeName: ptr.To("n1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually("endpoint moved to pod b", tp.host, "10.96.0.50:80", answers("b "))
	t.Logf("endpoint change reached the dataplane in %v", time.Since(start).Round(time.Millisecond))

	slice.Endpoints = nil
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("scaled to 0: ClusterIP refuses", tp.host, "10.96.0.50:80", func(_ string, err error) bool {
		return err != nil && strings.Contains(err.Error(), "refused")
	})

	slice.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{podAIP}, NodeName: ptr.To("n1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("scaled back up", tp.host, "10.96.0.50:80", answers("a "))

	inNS(t, tp.host, "nft", "delete", "table", "ip", "flotilla")
	start = time.Now()
	eventually("table deleted by hand is restored by the resync", tp.host, "10.96.0.50:80", answers("a "))
	t.Logf("deleted table restored in %v (resync period 1s)", time.Since(start).Round(time.Millisecond))

	// The Node's address changes: NodePorts follow.
	node, err = client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inNS(t, tp.host, "ip", "addr", "add", "10.213.0.3/24", "dev", "vhc")
	node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.213.0.3"}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("NodePort on the new address", tp.client, "10.213.0.3:30080", answers("a "))
	eventually("NodePort gone from the old address", tp.client, hostIP+":30080", func(_ string, err error) bool { return err != nil })
}

// changesBackend records what the loop gives it, through Apply or ApplyChanged.
type changesBackend struct {
	mu      sync.Mutex
	ds      DesiredState
	changed int // ApplyChanged calls
}

func (b *changesBackend) Apply(ds DesiredState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ds = ds
	b.ds.Services = slices.Clone(ds.Services) // ApplyChanged's ds is only valid during the call
	return nil
}
func (b *changesBackend) Resync(ds DesiredState) error { return b.Apply(ds) }
func (b *changesBackend) Cleanup() error               { return nil }
func (b *changesBackend) ApplyChanged(ds DesiredState, _ []string) error {
	b.mu.Lock()
	b.changed++
	b.mu.Unlock()
	return b.Apply(ds)
}

// endpoints is "key: ip:port ..." for every Service port, and how many ApplyChanged calls.
func (b *changesBackend) endpoints() (string, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, sp := range b.ds.Services {
		s := sp.Key + ":"
		for _, e := range sp.ClusterEndpoints {
			s += " " + e.String()
		}
		out = append(out, s)
	}
	return strings.Join(out, "; "), b.changed
}

// TestRunAppliesEventsIncrementally runs the sync loop on a fake API: after the first full
// sync, Service and EndpointSlice events reach the backend as partial updates (ApplyChanged)
// whose state equals what listing everything gives.
func TestRunAppliesEventsIncrementally(t *testing.T) {
	client := fake.NewClientset(mkNode("n1", "10.213.0.2"), mkSvc("web", "10.96.0.50", 80),
		mkSlice("web-1", "web", 8080, readyEP("10.244.0.5", "n1")))
	be := &changesBackend{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, client, Config{NodeName: "n1", ResyncPeriod: time.Hour}, be, logrus.NewEntry(logrus.StandardLogger()))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	wait := func(want string, incremental bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, n := be.endpoints()
			if got == want && (!incremental || n > 0) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("backend has %q (%d partial updates), want %q", got, n, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("default/web/80/TCP: 10.244.0.5:8080", false)
	ctx2 := context.Background()
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx2, mkSlice("web-1", "web", 8080, readyEP("10.244.0.6", "n1"), readyEP("10.244.0.7", "n2")), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("default/web/80/TCP: 10.244.0.6:8080 10.244.0.7:8080", true)
	if _, err := client.CoreV1().Services("default").Create(ctx2, mkSvc("api", "10.96.0.40", 443), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx2, mkSlice("api-1", "api", 6443, readyEP("10.244.0.8", "n1")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("default/api/443/TCP: 10.244.0.8:6443; default/web/80/TCP: 10.244.0.6:8080 10.244.0.7:8080", true)
	if err := client.CoreV1().Services("default").Delete(ctx2, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("default/api/443/TCP: 10.244.0.8:6443", true)
}
