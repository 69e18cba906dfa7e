package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// evictedMessage is the kubelet's message for a pod evicted for an emptyDir over its sizeLimit.
func evictedMessage(volume, limit string) string {
	return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", volume, limit)
}

// fillPod is a pod whose container writes mib MiB into an emptyDir "scratch" of the given
// medium and sizeLimit, then sleeps.
func fillPod(name string, restart corev1.RestartPolicy, medium corev1.StorageMedium, limit string, mib int) *corev1.Pod {
	ctr := tool("fill", "fill", "/scratch/blob", fmt.Sprint(mib))
	ctr.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	p := newPod(name, "", restart, ctr)
	p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: medium, SizeLimit: ptr.To(resource.MustParse(limit))}}}}
	return p
}

// evictedEvents returns the Warning events Evicted of a pod.
func evictedEvents(c kubernetes.Interface, name string) ([]corev1.Event, error) {
	evs, err := c.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + name + ",reason=Evicted"})
	if err != nil {
		return nil, err
	}
	return evs.Items, nil
}

// TestEmptyDirSizeLimit is the acceptance of emptyDir sizeLimit on a real host: a pod whose
// disk-backed emptyDir grows beyond its limit is evicted as the kubelet evicts it (phase
// Failed, reason Evicted, a Warning event, containers stopped and never started again) and
// its ReplicaSet replaces it; a pod within its limit keeps running; a memory-backed emptyDir
// is a tmpfs of its sizeLimit, where writes beyond it fail.
func TestEmptyDirSizeLimit(t *testing.T) {
	s, c := startPodSite(t, 1)
	h := s.Hosts[0]
	ctx := context.Background()
	// Both start now: the one within its limit is measured while the other is evicted.
	create(t, c, fillPod("over", corev1.RestartPolicyAlways, corev1.StorageMediumDefault, "10Mi", 20))
	create(t, c, fillPod("under", corev1.RestartPolicyAlways, corev1.StorageMediumDefault, "10Mi", 5))
	wantMsg := evictedMessage("scratch", "10Mi")

	t.Run("over its limit: evicted", func(t *testing.T) {
		p := waitPod(t, c, "over", 2*time.Minute, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if p.Status.Reason != "Evicted" || p.Status.Message != wantMsg {
			t.Fatalf("evicted pod status reason %q message %q, want Evicted %q", p.Status.Reason, p.Status.Message, wantMsg)
		}
		cs := statusOf(p, "fill")
		if cs == nil || cs.State.Terminated == nil || cs.RestartCount != 0 || cs.Ready {
			t.Fatalf("the evicted pod's container should have stopped once: %s", describe(p))
		}
		if logs := kubectlOut(t, h, "logs", "over"); !strings.Contains(logs, "wrote 20 MiB") {
			t.Fatalf("the container did not write its 20 MiB: %q", logs)
		}
		waitFor(t, 30*time.Second, "a Warning event Evicted", func() (bool, string) {
			evs, err := evictedEvents(c, "over")
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs {
				if e.Type == corev1.EventTypeWarning && e.Message == wantMsg && e.InvolvedObject.UID == p.UID {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", evs)
		})
		// restartPolicy Always does not bring it back. A container's first restart happens at
		// once (no back-off before it) and the pod's worker looks every 2 s, so a restart would
		// show within 6 s.
		id := cs.ContainerID
		holdsFor(t, 6*time.Second, "the evicted pod stays stopped", func() (bool, string) {
			p, err := getPod(c, "over")
			if err != nil {
				return false, err.Error()
			}
			cs := statusOf(p, "fill")
			return p.Status.Phase == corev1.PodFailed && cs != nil && cs.ContainerID == id && cs.State.Terminated != nil && cs.RestartCount == 0,
				"an evicted pod must stay stopped: " + describe(p)
		})
	})

	t.Run("within its limit: keeps running", func(t *testing.T) {
		waitPod(t, c, "under", time.Minute, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		waitFor(t, 30*time.Second, "under wrote its 5 MiB", func() (bool, string) {
			out, err := h.Kubectl(ctx, "", "logs", "under")
			return err == nil && strings.Contains(out, "wrote 5 MiB"), out
		})
		// Two measurements later it still runs, never restarted: the agent measures every
		// 10 s and says nothing when a volume is within its limit, so 22 s span two of them.
		holdsFor(t, 22*time.Second, "a pod within its emptyDir limit keeps running", func() (bool, string) {
			p, err := getPod(c, "under")
			if err != nil {
				return false, err.Error()
			}
			if cs := statusOf(p, "fill"); p.Status.Phase != corev1.PodRunning || p.Status.Reason != "" || cs == nil || cs.State.Running == nil || cs.RestartCount != 0 {
				return false, describe(p)
			}
			if evs, err := evictedEvents(c, "under"); err != nil || len(evs) > 0 {
				return false, fmt.Sprintf("events Evicted of a pod within its limit: %+v %v", evs, err)
			}
			return true, ""
		})
	})

	t.Run("memory-backed: a tmpfs of its sizeLimit, writes beyond fail", func(t *testing.T) {
		create(t, c, fillPod("in-memory", corev1.RestartPolicyNever, corev1.StorageMediumMemory, "10Mi", 20))
		p := waitPod(t, c, "in-memory", time.Minute, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		cs := statusOf(p, "fill")
		if p.Status.Reason == "Evicted" || cs == nil || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 1 {
			t.Fatalf("want the container to fail on its own (exit 1), not an eviction: reason %q, %s", p.Status.Reason, describe(p))
		}
		logs := kubectlOut(t, h, "logs", "in-memory")
		if !strings.Contains(logs, "no space left on device") || !strings.Contains(logs, "wrote 10 MiB of 20") {
			t.Fatalf("writes beyond 10 MiB should fail with ENOSPC: %q", logs)
		}
	})

	t.Run("a ReplicaSet replaces its evicted pod", func(t *testing.T) {
		tmpl := fillPod("", corev1.RestartPolicyAlways, corev1.StorageMediumDefault, "10Mi", 20)
		labels := map[string]string{"test": "filler"}
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: "default"},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec}}}
		if _, err := c.AppsV1().ReplicaSets("default").Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = c.AppsV1().ReplicaSets("default").Delete(ctx, "filler", metav1.DeleteOptions{})
		}()
		waitFor(t, 3*time.Minute, "an evicted pod of the ReplicaSet and its replacement", func() (bool, string) {
			pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "test=filler"})
			if err != nil {
				return false, err.Error()
			}
			evicted, state := 0, ""
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted" && p.Status.Message == wantMsg {
					evicted++
				}
				state += fmt.Sprintf(" %s: %s %s;", p.Name, p.Status.Phase, p.Status.Reason)
			}
			return evicted >= 1 && len(pods.Items) > evicted, state
		})
	})
}
