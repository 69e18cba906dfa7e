package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestVolumeEscapes: a container cannot get the agent, which runs as root on the host, to
// write a host file through a symlink planted in a volume the agent keeps up to date, nor
// mount the host's root through a subPath that is a symlink.
func TestVolumeEscapes(t *testing.T) {
	s, c := startPodSite(t, 1)
	h := s.Hosts[0]
	ctx := context.Background()

	t.Run("a symlink planted in a secret volume does not redirect the agent's writes", func(t *testing.T) {
		// A file of the host: the container cannot see it, but a symlink to its path would
		// be followed by the agent.
		hostDir := t.TempDir()
		hostFile := filepath.Join(hostDir, "credentials")
		if err := os.WriteFile(hostFile, []byte("host original\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		secrets := c.CoreV1().Secrets("default")
		if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-token"},
			Data: map[string][]byte{"token": []byte("v1")}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		app := tool("app", "sleep", "inf")
		// readOnly false on purpose: the agent mounts secrets read-only whatever is asked.
		app.VolumeMounts = []corev1.VolumeMount{{Name: "token", MountPath: "/secret", ReadOnly: false}}
		p := newPod("secret-escape", "host-1", corev1.RestartPolicyNever, app)
		p.Spec.Volumes = []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "app-token"}}}}
		create(t, c, p)
		waitPod(t, c, "secret-escape", 90*time.Second, "running", func(p *corev1.Pod) bool {
			cs := statusOf(p, "app")
			return cs != nil && cs.State.Running != nil
		})
		if out := kubectlOut(t, h, "exec", "secret-escape", "--", "/app", "cat", "/secret/token"); out != "v1" {
			t.Fatalf("secret seen in the container: %q", out)
		}

		// Every way of planting a symlink, or of writing at all, fails: the volume is read-only.
		for _, attempt := range [][]string{
			{"symlink", hostFile, "/secret/token"},
			{"symlink", hostFile, "/secret/token.flotilla-tmp"},
			{"symlink", hostDir, "/secret/..data"},
			{"symlink", hostDir, "/secret/..data/token"},
			{"append", "/secret/token", "written by the container"},
		} {
			args := append([]string{"exec", "secret-escape", "--", "/app"}, attempt...)
			// The command's stderr is in the error.
			out, err := h.Kubectl(ctx, "", args...)
			if err == nil || !strings.Contains(err.Error(), "exit code 1") || !strings.Contains(err.Error(), "read-only file system") {
				t.Errorf("%v in the container: want a read-only failure, got %v: %q", attempt, err, out)
			}
		}

		sec, err := secrets.Get(ctx, "app-token", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sec.Data["token"] = []byte("v2")
		if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Checked also when the wait fails: a planted symlink can stop the update from
		// reaching the container while the agent writes the host file instead.
		defer func() {
			if b, err := os.ReadFile(hostFile); err != nil || string(b) != "host original\n" {
				t.Errorf("host file after the agent's sync: %q, %v", b, err)
			}
			if st, err := os.Stat(hostFile); err != nil {
				t.Error(err)
			} else if st.Mode().Perm() != 0o600 {
				t.Errorf("host file mode after the agent's sync: %v", st.Mode())
			}
			if entries, _ := os.ReadDir(hostDir); len(entries) != 1 {
				t.Errorf("host directory holds %d entries after the agent's sync, want 1", len(entries))
			}
		}()
		waitFor(t, 90*time.Second, "the updated secret in the volume", func() (bool, string) {
			out, err := h.Kubectl(ctx, "", "exec", "secret-escape", "--", "/app", "cat", "/secret/token")
			return err == nil && out == "v2", out + errString(err)
		})
		if out := kubectlOut(t, h, "exec", "secret-escape", "--", "/app", "cat", "/secret/token"); out != "v2" {
			t.Errorf("secret seen in the container after the update: %q", out)
		}
	})

	t.Run("a subPath that is a symlink to / does not mount the host's root", func(t *testing.T) {
		marker, err := os.CreateTemp("/tmp", "flotilla-volume-escape-*")
		if err != nil {
			t.Fatal(err)
		}
		marker.Close()
		t.Cleanup(func() { os.Remove(marker.Name()) })

		plant := tool("plant", "symlink", "/", "/scratch/escape")
		plant.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		look := tool("look", "exists", filepath.Join("/mnt", marker.Name()))
		look.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/mnt", SubPath: "escape"}}
		p := newPod("subpath-escape", "host-1", corev1.RestartPolicyNever, look)
		p.Spec.InitContainers = []corev1.Container{plant}
		p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		create(t, c, p)
		got := waitPod(t, c, "subpath-escape", 90*time.Second, "refusing the subPath", func(p *corev1.Pod) bool {
			cs := statusOf(p, "look")
			return cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerConfigError"
		})
		if msg := statusOf(got, "look").State.Waiting.Message; !strings.Contains(msg, `subPath "escape" is outside the volume`) {
			t.Errorf("waiting message: %q", msg)
		}
		// It stays so: the container never runs, so it never sees the host's files. The pod's
		// worker retries every 2 s (its resync): 5 s span two retries.
		holdsFor(t, 5*time.Second, "the container with the escaping subPath never runs", func() (bool, string) {
			got, err := getPod(c, "subpath-escape")
			if err != nil {
				return false, err.Error()
			}
			cs := statusOf(got, "look")
			return got.Status.Phase == corev1.PodPending && cs != nil && cs.State.Waiting != nil && cs.LastTerminationState.Terminated == nil,
				"the container with the escaping subPath ran: " + describe(got)
		})
	})

	t.Run("a subPath through a symlink inside the volume is mounted", func(t *testing.T) {
		// The first init container writes through a subPath that does not exist yet (it is
		// created), the second links to it, the app reads through the link.
		write := tool("write", "append", "/out/file", "written inside")
		write.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/out", SubPath: "real/dir"}}
		link := tool("link", "symlink", "real/dir", "/scratch/link")
		link.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		read := tool("read", "cat", "/in/file")
		read.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/in", SubPath: "link"}}
		p := newPod("subpath-inside", "host-1", corev1.RestartPolicyNever, read)
		p.Spec.InitContainers = []corev1.Container{write, link}
		p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		create(t, c, p)
		waitPod(t, c, "subpath-inside", 90*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		if out := kubectlOut(t, h, "logs", "subpath-inside", "-c", "read"); out != "written inside\n" {
			t.Errorf("read through the subPath link: %q", out)
		}
	})

	t.Run("deleting the pods removes their subPath mounts", func(t *testing.T) {
		pods := filepath.Join(h.DataDir, "pods")
		if n := mountsUnder(t, pods); n == 0 {
			t.Fatal("no subPath staging mounts under the host's pods directory")
		}
		for _, name := range []string{"secret-escape", "subpath-escape", "subpath-inside"} {
			if err := c.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 90*time.Second, "no mounts left under the host's pods directory", func() (bool, string) {
			n := mountsUnder(t, pods)
			return n == 0, strings.Repeat("mount ", n)
		})
	})
}

// mountsUnder counts the staging mounts of subPaths below dir.
func mountsUnder(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") && strings.Contains(f[4], "/volume-subpaths/") {
			n++
		}
	}
	return n
}
