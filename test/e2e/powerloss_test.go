package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestPowerLoss: every host of a 3-host site loses power at once (agent, containerd, shims
// and containers killed together; what a reboot clears, cleared) and comes back in random
// order; then again with one host that never returns. Each time the site serves again,
// every write acknowledged before the loss is there, and the Deployment's pods run again.
// The times to a writable API and to the Deployment available are printed. First, one host
// reboots while cut off (testRebootWhileCutOff).
func TestPowerLoss(t *testing.T) {
	// A short grace and eviction, so the pods of the host that stays off move within the test.
	s, c := startPodSite(t, 3, "--default-toleration-seconds=5", "--node-monitor-grace-period="+nodeGrace.String())
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "survivor"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "survivor"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{tool("web", "serve", "8080")},
					TerminationGracePeriodSeconds: ptr.To(int64(1))},
			},
		},
	}
	if _, err := c.AppsV1().Deployments("default").Create(context.Background(), deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "Deployment survivor available", func() (bool, string) {
		n, state := availableReplicas(c, "default", "survivor")
		return n == 3, state
	})

	t.Run("a host rebooted while cut off serves from its checkpoint", func(t *testing.T) { testRebootWhileCutOff(t, s, c) })

	for _, lost := range []int{0, 1} {
		name := "all hosts back"
		if lost > 0 {
			name = "one host never returns"
		}
		t.Run(name, func(t *testing.T) {
			w := startWriter(t, s.Hosts[0])
			waitFor(t, 30*time.Second, "writes acknowledged before the loss", func() (bool, string) {
				return w.acked() >= 10, fmt.Sprint(w.acked(), " acknowledged")
			})
			powerOffAll(t, s.Hosts)
			acked := w.stop()
			down := time.Now()
			order := rand.Perm(len(s.Hosts))
			back := order[:len(order)-lost]
			var names []string
			for _, i := range back {
				names = append(names, s.Hosts[i].Name)
			}
			t.Logf("power lost with %d writes acknowledged; booting %v in that order", len(acked), names)
			for _, i := range back {
				if err := s.Hosts[i].Restart(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond)
			}
			first := s.Hosts[back[0]]
			cl := clientOf(t, first)
			waitFor(t, 3*time.Minute, "a write acknowledged after the power loss", func() (bool, string) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "after-power-", Namespace: "default"}}
				_, err := cl.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
				return err == nil, fmt.Sprint(err)
			})
			writable := time.Since(down)
			missing := missingWrites(t, cl, acked)
			if len(missing) > 0 {
				t.Fatalf("%d of %d acknowledged writes lost, e.g. %v", len(missing), len(acked), first3(missing))
			}
			waitFor(t, 4*time.Minute, "Deployment survivor available again", func() (bool, string) {
				n, state := availableReplicas(cl, "default", "survivor")
				if n != 3 {
					return false, state
				}
				pods, err := cl.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=survivor"})
				if err != nil {
					return false, err.Error()
				}
				// Ready pods whose container runs since the power came back (a pod of a host
				// that rebooted keeps its object; its container is a new one).
				ready := 0
				for _, p := range pods.Items {
					cs := statusOf(&p, "web")
					if podReady(&p) && cs != nil && cs.State.Running != nil && cs.State.Running.StartedAt.After(down.Add(-time.Second)) {
						ready++
					}
				}
				return ready >= 3, fmt.Sprintf("%s, %d pods Ready with a container started since the power came back", state, ready)
			})
			framework.Figure(t, "power loss of all 3 hosts, %d back (%v): API writable after %s, Deployment available after %s; %d acknowledged writes all present",
				len(back), names, writable.Round(100*time.Millisecond), time.Since(down).Round(100*time.Millisecond), len(acked))
			if lost > 0 {
				return
			}
			for _, h := range s.Hosts {
				waitFor(t, 2*time.Minute, h.Name+" serves the API again", func() (bool, string) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_, err := h.Kubectl(ctx, "", "get", "ns", "default", "-o", "name")
					return err == nil, fmt.Sprint(err)
				})
			}
		})
	}
}

// powerOffAll cuts the power of every host at once.
func powerOffAll(t *testing.T, hosts []*devsite.Host) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(hosts))
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.PowerOff()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// missingWrites returns the names of acked ConfigMaps (see startWriter) the API lacks.
func missingWrites(t *testing.T, c kubernetes.Interface, acked []string) []string {
	t.Helper()
	var missing []string
	waitFor(t, time.Minute, "the acknowledged writes listed", func() (bool, string) {
		list, err := c.CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{LabelSelector: "stream=counter"})
		if err != nil {
			return false, err.Error()
		}
		have := map[string]bool{}
		for _, cm := range list.Items {
			have[cm.Name] = true
		}
		missing = nil
		for _, name := range acked {
			if !have[name] {
				missing = append(missing, name)
			}
		}
		return true, ""
	})
	return missing
}

func first3(s []string) string { return strings.Join(first(s, 3), ", ") }
