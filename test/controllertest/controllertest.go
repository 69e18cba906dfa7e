// Package controllertest runs controllers against a real flotilla agent for tests, and plays
// the node agent where a test needs pods to become ready.
package controllertest

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// Start starts an agent, constructs the controllers on one shared Context, starts the
// informers and runs the controllers until the test ends.
func Start(t *testing.T, constructors ...controllers.Constructor) (*framework.Agent, kubernetes.Interface) {
	t.Helper()
	// Controllers are tested with any pod template (hostNetwork DaemonSets included); Pod
	// Security admission has its own tests.
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers=", "--pod-security-default=privileged"}})
	cctx, err := controllers.NewContext(a.RESTConfig())
	if err != nil {
		t.Fatalf("controller context: %v", err)
	}
	var runners []controllers.Runner
	for _, c := range constructors {
		r, err := c(cctx)
		if err != nil {
			t.Fatalf("construct controller: %v", err)
		}
		runners = append(runners, r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cctx.Informers.Start(ctx.Done())
	cctx.MetadataInformers.Start(ctx.Done())
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx, 2); err != nil && ctx.Err() == nil {
				t.Errorf("controller stopped: %v", err)
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		cctx.Informers.Shutdown()
		cctx.MetadataInformers.Shutdown()
	})
	return a, a.Client()
}

// StartController is Start for one controller whose constructor returns its own type, and
// also returns the controller, for tests that look inside it.
func StartController[R controllers.Runner](t *testing.T, newController func(*controllers.Context) (R, error)) (*framework.Agent, kubernetes.Interface, R) {
	t.Helper()
	var c R
	a, client := Start(t, func(cctx *controllers.Context) (controllers.Runner, error) {
		var err error
		c, err = newController(cctx)
		return c, err
	})
	return a, client, c
}

// Namespace creates a namespace for one test.
func Namespace(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	_, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// MarkReady sets a pod Running with Ready and ContainersReady true since readySince, the
// way the node agent reports a started pod.
func MarkReady(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, readySince time.Time) error {
	pod = pod.DeepCopy()
	since := metav1.NewTime(readySince)
	pod.Status.Phase = corev1.PodRunning
	setCond := func(t corev1.PodConditionType) {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: since}
		for i := range pod.Status.Conditions {
			if pod.Status.Conditions[i].Type == t {
				pod.Status.Conditions[i] = c
				return
			}
		}
		pod.Status.Conditions = append(pod.Status.Conditions, c)
	}
	setCond(corev1.PodInitialized)
	setCond(corev1.ContainersReady)
	setCond(corev1.PodReady)
	pod.Status.ContainerStatuses = nil
	started := true
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}},
		})
	}
	_, err := client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// Kubelet marks every pod of namespace ns ready after delay, for pods accepted by filter
// (nil: all), until the test ends.
func Kubelet(t *testing.T, client kubernetes.Interface, ns string, delay time.Duration, filter func(*corev1.Pod) bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
					continue
				}
				if pod.DeletionTimestamp != nil || isPodReady(pod) || (filter != nil && !filter(pod)) {
					continue
				}
				go func() {
					select {
					case <-ctx.Done():
						return
					case <-time.After(delay):
					}
					for i := 0; i < 5 && ctx.Err() == nil; i++ {
						cur, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
						if err != nil || cur.UID != pod.UID || cur.DeletionTimestamp != nil || isPodReady(cur) {
							return
						}
						if MarkReady(ctx, client, cur, time.Now()) == nil {
							return
						}
					}
				}()
			}
			w.Stop()
		}
	}()
}

// Eventually polls cond every 100 ms until it is true or timeout passes.
func Eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out after %v waiting for %s (last error: %v)", timeout, what, last)
	}
}

// Consistently checks cond every 100 ms for window and fails at the first time it is false. It
// shows that something does not happen: call it after a positive signal that the controller saw
// the change, and say next to the call why window is long enough.
func Consistently(t *testing.T, window time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(window)
	for {
		ok, err := cond()
		if err != nil || !ok {
			t.Fatalf("%s stopped holding (err %v)", what, err)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ActivePods lists the pods of ns that are not being deleted.
func ActivePods(client kubernetes.Interface, ns string) ([]corev1.Pod, error) {
	list, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

func isPodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
