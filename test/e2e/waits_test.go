package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/internal/devsite"
)

// holdsFor checks cond every 500 ms for window and fails as soon as it does not hold. It shows
// that something does not happen: call it after a positive signal that the component saw the
// change, with the reason the window is long enough next to the call.
func holdsFor(t testing.TB, window time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(window)
	for {
		if ok, state := cond(); !ok {
			t.Fatalf("%s: stopped holding: %s", what, state)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// agentStarts counts the times h's agent started its pod workers, as its log (appended to
// across restarts) tells.
func agentStarts(h *devsite.Host) int {
	return strings.Count(h.Logs(), "pod workers running")
}

// waitAgentBack waits until h's agent, restarted at since after started pod-worker starts,
// runs its pod workers again and its Node has a heartbeat of the new agent.
func waitAgentBack(t testing.TB, c kubernetes.Interface, h *devsite.Host, since time.Time, started int) {
	t.Helper()
	waitFor(t, 2*time.Minute, h.Name+": the restarted agent's pod workers running", func() (bool, string) {
		return agentStarts(h) > started, tailLines(h.Logs(), 5)
	})
	waitFor(t, 2*time.Minute, h.Name+": Node Ready with a heartbeat of the restarted agent", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n, err := c.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				// Heartbeat times have whole seconds.
				return cond.Status == corev1.ConditionTrue && !cond.LastHeartbeatTime.Before(&metav1.Time{Time: since.Truncate(time.Second)}),
					fmt.Sprintf("Ready=%s heartbeat %s", cond.Status, cond.LastHeartbeatTime.Format(time.RFC3339))
			}
		}
		return false, "no Ready condition"
	})
}
