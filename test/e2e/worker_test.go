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
	s := newSite(t, 4)
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
		create(t, c, newPod("on-worker", worker.Name, corev1.RestartPolicyAlways, tool("app", "serve", "8080")))
		waitPod(t, c, "on-worker", 90*time.Second, "Ready", podReady)
		// Logs go from the API to the worker's agent, which serves with its own certificate.
		waitFor(t, 30*time.Second, "logs of the worker's pod", func() (bool, string) {
			_, err := s.Hosts[0].Kubectl(ctx, "", "logs", "on-worker")
			return err == nil, fmt.Sprint(err)
		})
	})

	t.Run("the worker's credentials reach its own Node only", func(t *testing.T) {
		cfg := &rest.Config{Host: "https://" + s.Hosts[0].IP + ":6443", TLSClientConfig: rest.TLSClientConfig{
			CAFile:   filepath.Join(worker.DataDir, "pki", "ca.crt"),
			CertFile: filepath.Join(worker.DataDir, "pki", "node-client.crt"),
			KeyFile:  filepath.Join(worker.DataDir, "pki", "node-client.key"),
		}}
		wc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
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

	t.Run("the worker follows the API to another server", func(t *testing.T) {
		// Kill the server the worker's connections go to: a later heartbeat must come
		// through another.
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
		waitFor(t, 90*time.Second, "the worker's Lease renewed through another server", func() (bool, string) {
			l, err := c2.CoordinationV1().Leases("kube-node-lease").Get(ctx, worker.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if l.Spec.RenewTime == nil {
				return false, "never renewed"
			}
			return l.Spec.RenewTime.After(killed.Add(time.Second)), "renewed " + l.Spec.RenewTime.String()
		})
	})
}
