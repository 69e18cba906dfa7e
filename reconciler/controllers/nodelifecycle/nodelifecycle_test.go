package nodelifecycle_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/nodelifecycle"
	"github.com/flotilla-dev/flotilla/test/controllertest"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// hosts plays the node agents of test nodes: every 500 ms it renews each live node's Lease and
// posts Ready=True, as nodes/agent does every 10 s. Nodes in leaseOnly get only their Lease
// renewed (the agent's own node, which posts its status itself).
type hosts struct {
	client    kubernetes.Interface
	mu        sync.Mutex
	live      map[string]bool
	leaseOnly map[string]bool
}

func startHosts(t *testing.T, client kubernetes.Interface) *hosts {
	h := &hosts{client: client, live: map[string]bool{}, leaseOnly: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			h.mu.Lock()
			beat := map[string]bool{}
			for n, ok := range h.live {
				if ok {
					beat[n] = h.leaseOnly[n]
				}
			}
			h.mu.Unlock()
			for n, leaseOnly := range beat {
				_ = renewLease(ctx, client, n)
				if !leaseOnly {
					_ = postReady(ctx, client, n)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

func (h *hosts) set(node string, live bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live[node] = live
}

func renewLease(ctx context.Context, client kubernetes.Interface, node string) error {
	leases := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: &now}}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

func postReady(ctx context.Context, client kubernetes.Interface, name string) error {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "flotilla agent is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}
	conds := []corev1.NodeCondition{ready}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				conds[0].LastTransitionTime = c.LastTransitionTime
			}
			continue
		}
		if c.Type != corev1.NodeReady {
			c.Status, c.Reason, c.LastHeartbeatTime = corev1.ConditionFalse, "KubeletHasNoPressure", now
			conds = append(conds, c)
		}
	}
	node.Status.Conditions = conds
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

func createNode(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	if err := renewLease(ctx, client, name); err != nil {
		t.Fatalf("lease of %s: %v", name, err)
	}
	// The controllers write the new Node too (its taints, its pod CIDR): retry on conflicts.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return postReady(ctx, client, name) }); err != nil {
		t.Fatalf("status of %s: %v", name, err)
	}
}

// updateNode applies mutate to the node, retrying on conflicts with the hosts' status posts.
func updateNode(t *testing.T, client kubernetes.Interface, name string, mutate func(*corev1.Node)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := getNode(client, name)
		if err != nil {
			return err
		}
		mutate(n)
		_, err = client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update node %s: %v", name, err)
	}
}

func getNode(client kubernetes.Interface, name string) (*corev1.Node, error) {
	return client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
}

func taint(node *corev1.Node, key string, effect corev1.TaintEffect) *corev1.Taint {
	for i, t := range node.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return &node.Spec.Taints[i]
		}
	}
	return nil
}

func ready(node *corev1.Node) *corev1.NodeCondition {
	for i, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func boundPod(t *testing.T, client kubernetes.Interface, ns, name, node string, tols ...corev1.Toleration) {
	t.Helper()
	_, err := client.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: tols,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

func terminating(client kubernetes.Interface, ns, name string) (bool, error) {
	pod, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return pod.DeletionTimestamp != nil, nil
}

func unreachableToleration(seconds *int64) corev1.Toleration {
	return corev1.Toleration{Key: nodelifecycle.TaintUnreachable, Operator: corev1.TolerationOpExists,
		Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}
}

// start is controllertest.Start with an agent running no controllers of its own.
func start(t *testing.T, cfg nodelifecycle.Config) kubernetes.Interface {
	t.Helper()
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})
	cctx, err := controllers.NewContext(a.RESTConfig())
	if err != nil {
		t.Fatalf("controller context: %v", err)
	}
	c, err := nodelifecycle.NewWithConfig(cctx, cfg)
	if err != nil {
		t.Fatalf("construct controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cctx.Informers.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx, 2); err != nil && ctx.Err() == nil {
			t.Errorf("controller stopped: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cctx.Informers.Shutdown()
	})
	return a.Client()
}

func TestNodeLifecycle(t *testing.T) {
	client := start(t, nodelifecycle.Config{GracePeriod: 3 * time.Second, MonitorPeriod: 500 * time.Millisecond})
	ctx := context.Background()
	h := startHosts(t, client)
	// The agent's own node renews its Lease every 10 s, too seldom for a 3 s grace: the test
	// renews it as well so that it stays healthy.
	existing, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	for _, n := range existing.Items {
		h.mu.Lock()
		h.leaseOnly[n.Name] = true
		h.live[n.Name] = true
		h.mu.Unlock()
	}
	createNode(t, client, "healthy-1")
	h.set("healthy-1", true)
	createNode(t, client, "dead-1")
	ns := "nodelifecycle"
	controllertest.Namespace(t, client, ns)
	// tolerationSeconds 0 is "evict at once", and stays so once DefaultTolerationSeconds
	// admission adds 300 s tolerations to pods without any.
	boundPod(t, client, ns, "at-once", "dead-1", unreachableToleration(ptr.To[int64](0)))
	boundPod(t, client, ns, "after-2s", "dead-1", unreachableToleration(ptr.To[int64](2)))
	boundPod(t, client, ns, "forever", "dead-1", unreachableToleration(nil))
	boundPod(t, client, ns, "on-healthy", "healthy-1")

	// dead-1 never heartbeats again: Ready=Unknown and both unreachable taints.
	var added time.Time
	controllertest.Eventually(t, 15*time.Second, "dead-1 Ready=Unknown with unreachable taints", func() (bool, error) {
		n, err := getNode(client, "dead-1")
		if err != nil {
			return false, err
		}
		c := ready(n)
		ne := taint(n, nodelifecycle.TaintUnreachable, corev1.TaintEffectNoExecute)
		if c == nil || c.Status != corev1.ConditionUnknown || ne == nil || taint(n, nodelifecycle.TaintUnreachable, corev1.TaintEffectNoSchedule) == nil {
			return false, nil
		}
		if c.Reason != nodelifecycle.ReasonStatusUnknown || c.Message != nodelifecycle.MessageStatusUnknown {
			t.Fatalf("Ready condition %+v, want reason %s", c, nodelifecycle.ReasonStatusUnknown)
		}
		if ne.TimeAdded == nil {
			t.Fatalf("NoExecute taint without timeAdded: %+v", ne)
		}
		added = ne.TimeAdded.Time
		return true, nil
	})
	controllertest.Eventually(t, 5*time.Second, "pod at-once evicted", func() (bool, error) {
		return terminating(client, ns, "at-once")
	})
	controllertest.Eventually(t, 10*time.Second, "pod after-2s evicted", func() (bool, error) {
		return terminating(client, ns, "after-2s")
	})
	if since := time.Since(added); since < 2*time.Second {
		t.Errorf("after-2s evicted %v after the taint was added, want >= 2s", since)
	}
	// The taint manager has acted on dead-1's taint twice (at once and on the 2 s timer): a
	// forever pod taken for either would be gone already; a second more is two monitor periods.
	controllertest.Consistently(t, time.Second, "forever and on-healthy kept", func() (bool, error) {
		for _, name := range []string{"forever", "on-healthy"} {
			if gone, err := terminating(client, ns, name); err != nil || gone {
				return false, fmt.Errorf("pod %s terminating=%v (err %v), want it kept", name, gone, err)
			}
		}
		return true, nil
	})
	controllertest.Eventually(t, 10*time.Second, "TaintManagerEviction event for at-once", func() (bool, error) {
		evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("reason", nodelifecycle.ReasonEviction),
			fields.OneTermEqualSelector("involvedObject.name", "at-once")).String()})
		return err == nil && len(evs.Items) > 0, err
	})
	if n, err := getNode(client, "healthy-1"); err != nil || len(n.Spec.Taints) != 0 {
		t.Errorf("healthy-1 taints %v (err %v), want none", n.Spec.Taints, err)
	}

	// dead-1's host comes back: the taints go.
	h.set("dead-1", true)
	controllertest.Eventually(t, 15*time.Second, "dead-1 healthy without taints", func() (bool, error) {
		n, err := getNode(client, "dead-1")
		if err != nil {
			return false, err
		}
		c := ready(n)
		return c != nil && c.Status == corev1.ConditionTrue && len(n.Spec.Taints) == 0, nil
	})

	// A hand-made NoExecute taint evicts the untolerating pod of healthy-1 and gets timeAdded.
	updateNode(t, client, "healthy-1", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/drain", Effect: corev1.TaintEffectNoExecute})
	})
	controllertest.Eventually(t, 10*time.Second, "pod on-healthy evicted", func() (bool, error) {
		return terminating(client, ns, "on-healthy")
	})
	controllertest.Eventually(t, 10*time.Second, "timeAdded stamped on example.com/drain", func() (bool, error) {
		n, err := getNode(client, "healthy-1")
		if err != nil {
			return false, err
		}
		tt := taint(n, "example.com/drain", corev1.TaintEffectNoExecute)
		return tt != nil && tt.TimeAdded != nil, nil
	})

	// Cordon and uncordon.
	setUnschedulable := func(v bool) {
		t.Helper()
		updateNode(t, client, "healthy-1", func(n *corev1.Node) { n.Spec.Unschedulable = v })
	}
	setUnschedulable(true)
	controllertest.Eventually(t, 10*time.Second, "unschedulable taint on cordoned node", func() (bool, error) {
		n, err := getNode(client, "healthy-1")
		return err == nil && taint(n, nodelifecycle.TaintUnschedulable, corev1.TaintEffectNoSchedule) != nil, err
	})
	setUnschedulable(false)
	controllertest.Eventually(t, 10*time.Second, "unschedulable taint removed", func() (bool, error) {
		n, err := getNode(client, "healthy-1")
		return err == nil && taint(n, nodelifecycle.TaintUnschedulable, corev1.TaintEffectNoSchedule) == nil, err
	})
}
