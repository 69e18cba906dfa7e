package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

func readyAt(p *corev1.Pod) (time.Time, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

func podNames(c kubernetes.Interface, ns, selector string) (map[string]corev1.Pod, error) {
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	out := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		out[p.Name] = p
	}
	return out, nil
}

// volumeEvents lists the reasons and messages of the events about PersistentVolume name.
func volumeEvents(c kubernetes.Interface, name string) string {
	evs, err := c.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return strings.Join(out, "; ")
}

func keys(m map[string]corev1.Pod) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

// TestWorkloadsOnHosts runs the spec's StatefulSet and DaemonSet examples and a Job and a
// CronJob on real hosts: ordered creation and deletion, stable names, one daemon pod per host
// (and one more when a host joins), parallel completions and scheduled Jobs.
func TestWorkloadsOnHosts(t *testing.T) {
	s := newSite(t, 4)
	sideLoad(t, s)
	// Three hosts now, the fourth joins later.
	startHosts(t, s.Hosts[:3])
	c := clientOf(t, s.Hosts[0])
	waitFor(t, 2*time.Minute, "3 Ready nodes", func() (bool, string) {
		n, state := readyNodes(s.Hosts[0])
		return n == 3, state
	})

	t.Run("web.yaml: ordered start, ordered scale down, same name and claim back", func(t *testing.T) {
		// The local volumes are directories on this machine: remove them afterwards, once no
		// pod uses them any more (a running pod's host re-creates its volume directory).
		t.Cleanup(func() {
			_ = c.AppsV1().StatefulSets("default").Delete(context.Background(), "web", metav1.DeleteOptions{})
			deadline := time.Now().Add(time.Minute)
			for time.Now().Before(deadline) {
				if pods, err := podNames(c, "default", "app=nginx"); err == nil && len(pods) == 0 {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			pvs, err := c.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return
			}
			for _, pv := range pvs.Items {
				if pv.Spec.Local != nil && strings.HasPrefix(pv.Name, "pvc-") {
					_ = os.RemoveAll(pv.Spec.Local.Path)
					// The parents go too when nothing else is in them.
					_ = os.Remove(filepath.Dir(pv.Spec.Local.Path))
					_ = os.Remove(filepath.Dir(filepath.Dir(pv.Spec.Local.Path)))
				}
			}
		})
		applyExample(t, s.Hosts[0], "examples/web-statefulset")
		var pods map[string]corev1.Pod
		waitFor(t, 3*time.Minute, "web-0..2 Ready", func() (bool, string) {
			var err error
			if pods, err = podNames(c, "default", "app=nginx"); err != nil {
				return false, err.Error()
			}
			ready := 0
			for _, p := range pods {
				if _, ok := readyAt(&p); ok {
					ready++
				}
			}
			return ready == 3, fmt.Sprintf("%d ready of %v", ready, keys(pods))
		})
		for i := 1; i < 3; i++ {
			prev, cur := pods[fmt.Sprintf("web-%d", i-1)], pods[fmt.Sprintf("web-%d", i)]
			prevReady, _ := readyAt(&prev)
			// Timestamps have a one-second resolution.
			if cur.CreationTimestamp.Time.Before(prevReady.Truncate(time.Second)) {
				t.Errorf("%s created at %s, before %s was Ready at %s", cur.Name, cur.CreationTimestamp, prev.Name, prevReady)
			}
			if cur.Spec.Hostname != cur.Name || cur.Spec.Subdomain != "nginx" {
				t.Errorf("%s: hostname %q subdomain %q", cur.Name, cur.Spec.Hostname, cur.Spec.Subdomain)
			}
		}

		if out, err := s.Hosts[0].Kubectl(context.Background(), "", "scale", "statefulset", "web", "--replicas=1"); err != nil {
			t.Fatalf("scale: %v %s", err, out)
		}
		var order []string
		waitFor(t, 2*time.Minute, "only web-0 left", func() (bool, string) {
			now, err := podNames(c, "default", "app=nginx")
			if err != nil {
				return false, err.Error()
			}
			for _, n := range []string{"web-2", "web-1"} {
				if _, ok := now[n]; !ok && !contains(order, n) {
					order = append(order, n)
				}
				// web-1 must still be untouched while web-2 exists.
				if p, ok := now["web-1"]; ok && p.DeletionTimestamp != nil {
					if _, stillTwo := now["web-2"]; stillTwo {
						t.Errorf("web-1 is being deleted while web-2 still exists")
					}
				}
			}
			return len(now) == 1, fmt.Sprint(keys(now))
		})
		if strings.Join(order, ",") != "web-2,web-1" {
			t.Errorf("scale 3 -> 1 removed %v, want web-2 then web-1", order)
		}

		if out, err := s.Hosts[0].Kubectl(context.Background(), "", "scale", "statefulset", "web", "--replicas=2"); err != nil {
			t.Fatalf("scale: %v %s", err, out)
		}
		var old corev1.Pod
		waitFor(t, 2*time.Minute, "web-1 Ready again", func() (bool, string) {
			now, err := podNames(c, "default", "app=nginx")
			if err != nil {
				return false, err.Error()
			}
			old = now["web-1"]
			_, ok := readyAt(&old)
			return ok, fmt.Sprint(keys(now))
		})
		claim, err := c.CoreV1().PersistentVolumeClaims("default").Get(context.Background(), "www-web-1", metav1.GetOptions{})
		if err != nil || claim.Status.Phase != corev1.ClaimBound {
			t.Fatalf("claim www-web-1 of web-1: %v %+v", err, claim)
		}
		if err := c.CoreV1().Pods("default").Delete(context.Background(), "web-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, "a new web-1", func() (bool, string) {
			p, err := getPod(c, "web-1")
			if err != nil {
				return false, err.Error()
			}
			_, ok := readyAt(p)
			return p.UID != old.UID && ok, describe(p)
		})
		again, err := c.CoreV1().PersistentVolumeClaims("default").Get(context.Background(), "www-web-1", metav1.GetOptions{})
		if err != nil || again.UID != claim.UID {
			t.Errorf("the new web-1 must keep claim www-web-1 (%s): %v %+v", claim.UID, err, again)
		}

		// Reclaim policy Delete removes the data from the host's disk once the claim goes. A
		// claim deleted under a running pod (web-1's) stays Terminating, held by the in-use
		// finalizer, with its volume and data, until the pod is gone; one no pod uses
		// (web-2's, scaled away) goes at once. Both are deleted together: once web-2's volume
		// is reclaimed, the controllers have seen web-1's claim too.
		volumeOf := func(claim string) *corev1.PersistentVolume {
			t.Helper()
			pvc, err := c.CoreV1().PersistentVolumeClaims("default").Get(context.Background(), claim, metav1.GetOptions{})
			if err != nil || pvc.Spec.VolumeName == "" {
				t.Fatalf("claim %s: %v %+v", claim, err, pvc)
			}
			pv, err := c.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
			if err != nil || pv.Spec.Local == nil {
				t.Fatalf("volume of claim %s: %v %+v", claim, err, pv)
			}
			if _, err := os.Stat(pv.Spec.Local.Path); err != nil {
				t.Fatalf("the directory of volume %s (claim %s): %v", pv.Name, claim, err)
			}
			// The site's hosts keep their volumes in the site's directory (--local-volume-path).
			if dir, err := s.VolumeDir(); err != nil || !strings.HasPrefix(pv.Spec.Local.Path, dir+"/") {
				t.Errorf("volume %s lives in %s, want it under the site's %s (%v)", pv.Name, pv.Spec.Local.Path, dir, err)
			}
			return pv
		}
		reclaimed := func(pv *corev1.PersistentVolume) {
			t.Helper()
			waitFor(t, 2*time.Minute, "volume "+pv.Name+" and its directory gone", func() (bool, string) {
				_, dirErr := os.Stat(pv.Spec.Local.Path)
				cur, err := c.CoreV1().PersistentVolumes().Get(context.Background(), pv.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) && os.IsNotExist(dirErr) {
					return true, ""
				}
				return false, fmt.Sprintf("volume %v (finalizers %v deleted %v), directory %v; events: %s",
					err, cur.GetFinalizers(), cur.GetDeletionTimestamp(), dirErr, volumeEvents(c, pv.Name))
			})
			t.Logf("volume %s reclaimed; its events: %s", pv.Name, volumeEvents(c, pv.Name))
		}
		web1, web2 := volumeOf("www-web-1"), volumeOf("www-web-2")
		marker := filepath.Join(web1.Spec.Local.Path, "still-here")
		if err := os.WriteFile(marker, []byte("web-1 runs"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, claim := range []string{"www-web-1", "www-web-2"} {
			if err := c.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), claim, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		reclaimed(web2)
		held, err := c.CoreV1().PersistentVolumeClaims("default").Get(context.Background(), "www-web-1", metav1.GetOptions{})
		if err != nil || held.DeletionTimestamp == nil || !slices.Contains(held.Finalizers, "kubernetes.io/pvc-protection") {
			t.Fatalf("claim www-web-1, deleted under web-1, must stay Terminating with kubernetes.io/pvc-protection: %v %+v", err, held)
		}
		if out, err := s.Hosts[0].Kubectl(context.Background(), "", "get", "pvc", "www-web-1", "--no-headers"); err != nil || !strings.Contains(out, "Terminating") {
			t.Errorf("kubectl get pvc www-web-1: %v %q, want Terminating", err, out)
		}
		if pv, err := c.CoreV1().PersistentVolumes().Get(context.Background(), web1.Name, metav1.GetOptions{}); err != nil ||
			pv.DeletionTimestamp != nil || pv.Status.Phase != corev1.VolumeBound {
			t.Errorf("volume %s of the held claim must stay Bound: %v %+v", web1.Name, err, pv)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("the data of web-1's volume went while web-1 runs: %v", err)
		}
		// A new pod naming the claim being deleted does not start, as with the kubelet (the
		// scheduler already refuses it; this one is put on web-1's host by hand).
		web1Pod, err := getPod(c, "web-1")
		if err != nil {
			t.Fatal(err)
		}
		late := newPod("late", web1Pod.Spec.NodeName, corev1.RestartPolicyNever, tool("late", "sleep", "1h"))
		late.Spec.Volumes = []corev1.Volume{{Name: "www", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "www-web-1"}}}}
		if _, err := c.CoreV1().Pods("default").Create(context.Background(), late, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "pod late refused its claim being deleted (FailedMount)", func() (bool, string) {
			evs, err := c.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "late").String()})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.Reason == "FailedMount" && strings.Contains(e.Message, `persistentVolumeClaim "www-web-1" is being deleted`) {
					return true, ""
				}
			}
			p, _ := getPod(c, "late")
			return false, describe(p)
		})
		if p, err := getPod(c, "late"); err != nil || p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Waiting == nil {
			t.Errorf("pod late must wait without starting: %v %s", err, describe(p))
		}
		if err := c.CoreV1().Pods("default").Delete(context.Background(), "late", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
			t.Fatal(err)
		}
		if out, err := s.Hosts[0].Kubectl(context.Background(), "", "scale", "statefulset", "web", "--replicas=1"); err != nil {
			t.Fatalf("scale: %v %s", err, out)
		}
		reclaimed(web1)
	})

	t.Run("DaemonSet: one pod per host, and one for a new host", func(t *testing.T) {
		applyExample(t, s.Hosts[0], "examples/node-agent-daemonset")
		perHost := func(want int) {
			waitFor(t, 2*time.Minute, fmt.Sprintf("%d node-agent pods, one per host", want), func() (bool, string) {
				pods, err := podNames(c, "kube-system", "app=node-agent")
				if err != nil {
					return false, err.Error()
				}
				nodes := map[string]bool{}
				for _, p := range pods {
					if _, ok := readyAt(&p); ok {
						nodes[p.Spec.NodeName] = true
					}
				}
				return len(nodes) == want && len(pods) == want, fmt.Sprintf("%d pods on %v", len(pods), nodes)
			})
		}
		perHost(3)
		for _, h := range s.Hosts[:3] {
			if code, body, err := get("http://"+h.IP+":9100/healthz", ""); code != 200 {
				t.Errorf("the daemon on %s (host network, :9100): %d %q %v", h.Name, code, body, err)
			}
		}
		if err := s.Hosts[3].StartJoining(s.Hosts[:1]); err != nil {
			t.Fatal(err)
		}
		perHost(4)
	})

	t.Run("a generic ephemeral volume: a claim made for the pod, gone with it", func(t *testing.T) {
		pod := newPod("scratch", "", corev1.RestartPolicyAlways, tool("app", "sleep", "600s"))
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			}}}}}}
		created, err := c.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitPod(t, c, "scratch", 2*time.Minute, "Ready", podReady)
		claim, err := c.CoreV1().PersistentVolumeClaims("default").Get(context.Background(), "scratch-data", metav1.GetOptions{})
		if err != nil || !metav1.IsControlledBy(claim, created) || claim.Status.Phase != corev1.ClaimBound {
			t.Fatalf("claim scratch-data must be Bound and controlled by pod scratch: %v %+v", err, claim)
		}
		pv, err := c.CoreV1().PersistentVolumes().Get(context.Background(), claim.Spec.VolumeName, metav1.GetOptions{})
		if err != nil || pv.Spec.Local == nil {
			t.Fatalf("volume of claim scratch-data: %v %+v", err, pv)
		}
		if out, err := s.Hosts[0].Kubectl(context.Background(), "", "exec", "scratch", "--", "/app", "append", "/data/notes", "kept"); err != nil {
			t.Fatalf("write to the ephemeral volume: %v %s", err, out)
		}
		if b, err := os.ReadFile(filepath.Join(pv.Spec.Local.Path, "notes")); err != nil || strings.TrimSpace(string(b)) != "kept" {
			t.Fatalf("the pod's write is not in volume %s on the host: %v %q", pv.Name, err, b)
		}
		if err := c.CoreV1().Pods("default").Delete(context.Background(), "scratch", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, "claim scratch-data, its volume and directory gone with the pod", func() (bool, string) {
			_, claimErr := c.CoreV1().PersistentVolumeClaims("default").Get(context.Background(), "scratch-data", metav1.GetOptions{})
			_, pvErr := c.CoreV1().PersistentVolumes().Get(context.Background(), pv.Name, metav1.GetOptions{})
			_, dirErr := os.Stat(pv.Spec.Local.Path)
			return apierrors.IsNotFound(claimErr) && apierrors.IsNotFound(pvErr) && os.IsNotExist(dirErr),
				fmt.Sprintf("claim %v, volume %v, directory %v", claimErr, pvErr, dirErr)
		})
	})

	t.Run("Job with completions 5, parallelism 2", func(t *testing.T) {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "five", Namespace: "default"},
			Spec: batchv1.JobSpec{Completions: ptr.To(int32(5)), Parallelism: ptr.To(int32(2)),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{tool("work", "sleep", "1s")}}}}}
		if _, err := c.BatchV1().Jobs("default").Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		maxActive := int32(0)
		waitFor(t, 3*time.Minute, "Job five Complete", func() (bool, string) {
			j, err := c.BatchV1().Jobs("default").Get(context.Background(), "five", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			maxActive = max(maxActive, j.Status.Active)
			for _, cond := range j.Status.Conditions {
				if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
					return j.Status.Succeeded == 5, fmt.Sprintf("succeeded %d", j.Status.Succeeded)
				}
			}
			return false, fmt.Sprintf("active %d succeeded %d failed %d", j.Status.Active, j.Status.Succeeded, j.Status.Failed)
		})
		if maxActive > 2 {
			t.Errorf("%d pods active at once with parallelism 2", maxActive)
		}
	})

	t.Run("CronJob every minute creates Jobs", func(t *testing.T) {
		cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "tick", Namespace: "default"},
			Spec: batchv1.CronJobSpec{Schedule: "* * * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure,
					Containers: []corev1.Container{tool("tick", "exit", "0", "tick")}}}}}}}
		if _, err := c.BatchV1().CronJobs("default").Create(context.Background(), cj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 150*time.Second, "a Job of CronJob tick completed", func() (bool, string) {
			jobs, err := c.BatchV1().Jobs("default").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, j := range jobs.Items {
				if strings.HasPrefix(j.Name, "tick-") && j.Status.Succeeded == 1 {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d jobs", len(jobs.Items))
		})
	})
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}
