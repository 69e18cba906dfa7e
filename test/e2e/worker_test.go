package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestWorkerHost: a 4th host joins a 3-host site with --etcd=false. Its certificates come
// from CertificateSigningRequests the join token approved; its data directory holds no CA
// key, no admin token and no etcd certificate; it runs pods (logs reach its agent through
// its serving certificate) and reaches the API through its local proxy; with its own
// credentials it may change its own Node and not another's.
func TestWorkerHost(t *testing.T) {
	s := newSite(t, 5)
	sideLoad(t, s)
	startHosts(t, s.Hosts[:3])
	worker := s.Hosts[3]
	joined := time.Now()
	if err := worker.StartJoining(s.Hosts[:1], "--git-min-interval=1s", "--etcd=false"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "4 Ready nodes", func() (bool, string) {
		got, out := readyNodes(s.Hosts[0])
		return got == 4, out
	})
	framework.Figure(t, "worker joined and Ready %s after its start", time.Since(joined).Round(100*time.Millisecond))
	c := clientOf(t, s.Hosts[0])
	ctx := context.Background()

	t.Run("no site secret on the worker", func(t *testing.T) {
		var found []string
		_ = filepath.WalkDir(worker.DataDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			base := d.Name()
			if base == "ca.key" || base == "admin-token" || base == "kubeconfig" || strings.HasPrefix(base, "etcd-") || strings.HasPrefix(base, "client-") {
				found = append(found, path)
			}
			return nil
		})
		if len(found) > 0 {
			t.Errorf("the worker holds site secrets: %v", found)
		}
		for _, f := range []string{"pki/ca.crt", "pki/node-client.crt", "pki/node-client.key", "pki/node-serving.crt"} {
			if _, err := os.Stat(filepath.Join(worker.DataDir, f)); err != nil {
				t.Errorf("the worker lacks %s: %v", f, err)
			}
		}
		csrs, err := c.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		signed := 0
		for _, csr := range csrs.Items {
			if strings.HasPrefix(csr.Name, "flotilla-join-"+worker.Name+"-") && len(csr.Status.Certificate) > 0 {
				signed++
			}
		}
		if signed != 2 {
			t.Errorf("%d signed CertificateSigningRequests of the worker's join, want 2", signed)
		}
	})

	t.Run("the worker runs pods", func(t *testing.T) {
		used := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "used-on-worker", Namespace: "default"}, StringData: map[string]string{"k": "v"}}
		if _, err := c.CoreV1().Secrets("default").Create(ctx, used, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := newPod("on-worker", worker.Name, corev1.RestartPolicyAlways, tool("app", "serve", "8080"))
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: used.Name}}})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "s", MountPath: "/etc/used"})
		create(t, c, pod)
		waitPod(t, c, "on-worker", 90*time.Second, "Ready", podReady)
		// Logs go from the API to the worker's agent, which serves with its own certificate.
		waitFor(t, 30*time.Second, "logs of the worker's pod", func() (bool, string) {
			_, err := s.Hosts[0].Kubectl(ctx, "", "logs", "on-worker")
			return err == nil, fmt.Sprint(err)
		})
	})

	// The worker's own credentials, as a thief of the box would use them.
	wc := workerClient(t, worker, s.Hosts[0])

	t.Run("the worker's credentials reach its own Node only", func(t *testing.T) {
		// The node role updates Nodes (as the agent does when it registers); NodeRestriction
		// keeps that to the host's own.
		relabel := func(name string) error {
			n, err := wc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Labels["example.com/relabelled"] = "yes"
			_, err = wc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}
		if err := relabel(worker.Name); err != nil {
			t.Errorf("the worker updating its own Node: %v", err)
		}
		if err := relabel(s.Hosts[0].Name); !apierrors.IsForbidden(err) {
			t.Errorf("the worker updating Node %s: %v, want 403", s.Hosts[0].Name, err)
		}
		restricted := []byte(`{"metadata":{"labels":{"node-restriction.kubernetes.io/pool":"a"}}}`)
		if _, err := c.CoreV1().Nodes().Patch(ctx, worker.Name, types.MergePatchType, restricted, metav1.PatchOptions{}); err != nil {
			t.Errorf("an administrator labelling the worker's Node: %v", err)
		}
		n, err := wc.CoreV1().Nodes().Get(ctx, worker.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(n.Labels, "node-restriction.kubernetes.io/pool")
		if _, err := wc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the worker removing a node-restriction.kubernetes.io label from its Node: %v, want 403", err)
		}
	})

	t.Run("the worker reads only the Secrets its pods use", func(t *testing.T) {
		unused := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-on-worker", Namespace: "default"}, StringData: map[string]string{"k": "v"}}
		if _, err := c.CoreV1().Secrets("default").Create(ctx, unused, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := wc.CoreV1().Secrets("default").Get(ctx, "used-on-worker", metav1.GetOptions{}); err != nil {
			t.Errorf("the worker reading the Secret its pod mounts: %v", err)
		}
		if _, err := wc.CoreV1().Secrets("default").Get(ctx, unused.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the worker reading a Secret no pod on it uses: %v, want 403", err)
		}
		if _, err := wc.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the worker listing every Secret: %v, want 403", err)
		}
	})

	t.Run("Secrets are ciphertext in etcd", func(t *testing.T) {
		resp, err := etcdClient(t, s.Hosts[0]).Get(ctx, "/registry/secrets/default/not-on-worker")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("%d keys for Secret default/not-on-worker in etcd", len(resp.Kvs))
		}
		if v := resp.Kvs[0].Value; !strings.HasPrefix(string(v), "k8s:enc:") || strings.Contains(string(v), "not-on-worker") {
			t.Errorf("Secret default/not-on-worker is stored in the clear: %q", v[:min(len(v), 80)])
		}
	})

	t.Run("the worker follows the API to another server", func(t *testing.T) {
		// Kill the server the worker's connections go to: a pod bound to the worker afterwards
		// must reach it and its status come back, through another server.
		out, err := exec.Command("ip", "netns", "exec", worker.NetNS, "ss", "-Htn", "state", "established", "( dport = :6443 )").CombinedOutput()
		if err != nil {
			t.Fatalf("ss in the worker's namespace: %v\n%s", err, out)
		}
		var used, other *devsite.Host
		for _, h := range s.Hosts[:3] {
			if strings.Contains(string(out), " "+h.IP+":6443") && used == nil {
				used = h
			} else if other == nil {
				other = h
			}
		}
		if used == nil {
			t.Fatalf("the worker has no connection to a server's API:\n%s", out)
		}
		killed := time.Now()
		used.Kill()
		c2 := clientOf(t, other)
		pod := newPod("after-failover", worker.Name, corev1.RestartPolicyAlways, tool("app", "serve", "8080"))
		// The killed host may have led etcd: writes time out until another member leads.
		waitFor(t, 30*time.Second, "pod after-failover created", func() (bool, string) {
			_, err := c2.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
			return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err)
		})
		waitPod(t, c2, pod.Name, 90*time.Second, "Ready", podReady)
		framework.Figure(t, "a pod bound to the worker Ready %s after the server its connections went to was killed", time.Since(killed).Round(100*time.Millisecond))
	})
	t.Run("flotilla host remove cuts the worker off", func(t *testing.T) {
		var server *devsite.Host
		for _, h := range s.Hosts[:3] {
			if h.Running() {
				server = h
				break
			}
		}
		thief := workerClient(t, worker, server)
		if _, err := thief.CoreV1().Nodes().Get(ctx, worker.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("the worker's credentials before its removal: %v", err)
		}
		admin := clientOf(t, server)
		removed := time.Now()
		if out, err := flotillaCLI(t, "host", "remove", worker.Name, "--data-dir", server.DataDir); err != nil {
			t.Fatalf("flotilla host remove: %v\n%s", err, out)
		}
		// Every server refuses the certificate, not only the one the command talked to.
		for _, h := range s.Hosts[:3] {
			if !h.Running() {
				continue
			}
			hc := workerClient(t, worker, h)
			waitFor(t, 5*time.Second, "401 for the removed worker's certificate at "+h.Name, func() (bool, string) {
				_, err := hc.CoreV1().Nodes().Get(ctx, worker.Name, metav1.GetOptions{})
				return apierrors.IsUnauthorized(err), fmt.Sprint(err)
			})
		}
		framework.Figure(t, "removed worker's certificate refused by every server %s after flotilla host remove started", time.Since(removed).Round(10*time.Millisecond))
		waitFor(t, 30*time.Second, "the worker's Node gone", func() (bool, string) {
			_, err := admin.CoreV1().Nodes().Get(ctx, worker.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})

		// Restarted with its data directory, it is refused and does not come back. Its --join
		// host was killed above: it finds the site through the peers it remembered.
		worker.Kill()
		logged := len(worker.Logs())
		if err := worker.Restart(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the restarted worker refused (401)", func() (bool, string) {
			l := worker.Logs()
			return strings.Contains(l[min(logged, len(l)):], "Unauthorized"), "no 401 in its log yet"
		})
		if _, err := admin.CoreV1().Nodes().Get(ctx, worker.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the removed worker's Node after its restart: %v, want it absent", err)
		}
		worker.Kill()

		// A fresh join under its name with the token of its removal is refused...
		again := s.Hosts[4]
		if err := again.StartJoining([]*devsite.Host{server}, "--etcd=false", "--name", worker.Name); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the join under the removed name refused", func() (bool, string) {
			return !again.Running() && strings.Contains(again.Logs(), "was removed from this site"), "still running"
		})
		// ...and admitted once the token was rotated (the new token is host 1's token file).
		if out, err := flotillaCLI(t, "token", "rotate", "--data-dir", s.Hosts[0].DataDir, "--kubeconfig", server.Kubeconfig()); err != nil {
			t.Fatalf("flotilla token rotate: %v\n%s", err, out)
		}
		if err := again.StartJoining([]*devsite.Host{server}, "--etcd=false", "--name", worker.Name); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, "the host readmitted with the new token and Ready", func() (bool, string) {
			st, _ := nodeHealth(admin, worker.Name)
			return st == corev1.ConditionTrue, string(st)
		})
		// The old data directory's certificate stays refused.
		if _, err := workerClient(t, worker, server).CoreV1().Nodes().Get(ctx, worker.Name, metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
			t.Errorf("the removed worker's old certificate after the readmission: %v, want 401", err)
		}
	})
}

// workerClient uses a worker's node credentials against server's API.
func workerClient(t *testing.T, worker, server *devsite.Host) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + server.IP + ":6443", TLSClientConfig: rest.TLSClientConfig{
		CAFile:   filepath.Join(worker.DataDir, "pki", "ca.crt"),
		CertFile: filepath.Join(worker.DataDir, "pki", "node-client.crt"),
		KeyFile:  filepath.Join(worker.DataDir, "pki", "node-client.key"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// flotillaCLI runs the flotilla binary (from the test's network namespace: the root one).
func flotillaCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(framework.FlotillaBin(t), args...).CombinedOutput()
	return string(out), err
}
