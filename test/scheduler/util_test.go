package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	sched "github.com/flotilla-dev/flotilla/reconciler/scheduler"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// testControllers are the agent's controllers the tests run: every controller they rely on,
// but not the agent's own scheduler, so the scheduler under test (started in-process, as
// RunControllers does in the agent) is the only one, or races only with its twin.
const testControllers = "--controllers=volumebinding,volumeprotection,nodelifecycle,serviceaccount,garbagecollector,namespace"

// startAgent starts a real agent and cordons the agent's own Node (it registers itself as a
// host with the machine's capacity): only the fake nodes a test creates take pods, and the
// messages count the cordoned host as one more node ("1 node(s) were unschedulable").
// extra replaces the controller selection when given.
func startAgent(t testing.TB, extra ...string) (*framework.Agent, *kubernetes.Clientset) {
	t.Helper()
	if len(extra) == 0 {
		extra = []string{testControllers}
	}
	a := framework.StartAgent(t, framework.AgentOptions{Extra: extra})
	c := a.Client()
	cordon(t, c, a.Name)
	return a, c
}

// cordon marks an agent's own Node unschedulable: the tests' pods go to simulated nodes.
func cordon(t testing.TB, c kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 30*time.Second, name+" cordoned", func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if n.Spec.Unschedulable {
			return true, ""
		}
		n.Spec.Unschedulable = true
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// startScheduler runs a scheduler on the API exactly as the agent does (RunControllers),
// without the Lease, until the test ends. It returns the scheduler for its counters.
func startScheduler(t testing.TB, cfg *rest.Config, opts sched.Options) *sched.Scheduler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu sync.Mutex
		s  *sched.Scheduler
	)
	built := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := controllers.RunControllers(ctx, cfg, []controllers.Named{{Name: "scheduler", Workers: 1,
			New: func(c *controllers.Context) (controllers.Runner, error) {
				r, err := sched.New(c, opts)
				mu.Lock()
				s = r
				mu.Unlock()
				close(built)
				return r, err
			}}})
		if err != nil {
			t.Errorf("scheduler: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-built:
	case <-time.After(30 * time.Second):
		t.Fatal("scheduler not constructed")
	}
	mu.Lock()
	defer mu.Unlock()
	return s
}

// fakeNode is a Node object without an agent: Ready, with allocatable set.
func fakeNode(name string, milliCPU, memMiB, pods int64, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	l := map[string]string{corev1.LabelHostname: name}
	for k, v := range labels {
		l[k] = v
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(memMiB<<20, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"),
	}
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity: res, Allocatable: res,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: now, LastTransitionTime: now}},
		},
	}
}

// createNodes creates the nodes and keeps their Leases renewed until the test ends, so the
// node lifecycle controller sees live hosts however long the test takes.
func createNodes(t testing.TB, c kubernetes.Interface, nodes ...*corev1.Node) {
	t.Helper()
	ctx := context.Background()
	for _, n := range nodes {
		var created *corev1.Node
		err := retryCreate(func() (err error) {
			created, err = c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			return err
		})
		if apierrors.IsAlreadyExists(err) {
			created, err = c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		}
		if err != nil {
			t.Fatalf("create node %s: %v", n.Name, err)
		}
		if len(created.Status.Allocatable) == 0 {
			created.Status = n.Status
			if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("node %s status: %v", n.Name, err)
			}
		}
	}
	hctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for _, n := range nodes {
				renewLease(hctx, c, n.Name)
			}
			select {
			case <-hctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func renewLease(ctx context.Context, c kubernetes.Interface, name string) {
	leases := c.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		dur := int32(40)
		_, _ = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: &dur, RenewTime: &now}}, metav1.CreateOptions{})
		return
	}
	if err != nil {
		return
	}
	l.Spec.RenewTime = &now
	_, _ = leases.Update(ctx, l, metav1.UpdateOptions{})
}

// testPod is a pod of one container requesting cpu (millicores) and memory (MiB).
func testPod(name string, milliCPU, memMiB int64, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(memMiB<<20, resource.BinarySI),
			}}}}},
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s; last state: %s", timeout, what, last)
}

// holdsFor checks cond every 100 ms for window and fails as soon as it does not hold. Call it
// after a positive signal that the scheduler saw the change, with the reason the window suffices.
func holdsFor(t testing.TB, window time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(window)
	for {
		if ok, state := cond(); !ok {
			t.Fatalf("%s stopped holding: %s", what, state)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func scheduledCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodScheduled {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func listPods(t testing.TB, c kubernetes.Interface, ns string) []corev1.Pod {
	t.Helper()
	l, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	return l.Items
}

func podNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// retryCreate retries a create that failed on an overloaded server (etcd request timeouts
// happen on the shared test machine). A create that committed before its answer was lost
// comes back AlreadyExists, which the caller sees.
func retryCreate(create func() error) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = create()
		if err == nil || !(apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
			apierrors.IsTooManyRequests(err)) {
			return err
		}
		time.Sleep(time.Duration(attempt+1) * 500 * time.Millisecond)
	}
	return err
}

// createPod creates a pod, retrying on an overloaded server.
func createPod(t testing.TB, c kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	err := retryCreate(func() error {
		_, err := c.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{})
		return err
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
}
