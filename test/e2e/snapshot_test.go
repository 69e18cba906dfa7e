package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/test/framework"
)

const snapshotObjects = 500

// TestSnapshotRestore is the disaster recovery of issue 30: a 3-host site with 500 objects and
// a Deployment is saved with `flotilla snapshot save`, destroyed, restored with `flotilla
// snapshot restore` on a new host of a new site (other addresses), and two more hosts join
// it: every object is there with its data, the Deployment's pods run again on the new hosts,
// and the old site's admin kubeconfig still works (only its server address changes, since the
// new site has other addresses).
func TestSnapshotRestore(t *testing.T) {
	// The old site also takes scheduled snapshots (each server its own), keeping 2.
	old, oldClient := startPodSite(t, 3, "--snapshot-schedule=@every 15s", "--snapshot-retention=2")
	ctx := context.Background()
	ns := "backup"
	if _, err := oldClient.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	createConfigMaps(t, oldClient, ns, snapshotObjects)
	framework.Figure(t, "created %d ConfigMaps in %s", snapshotObjects, time.Since(start).Round(time.Millisecond))
	if _, err := oldClient.AppsV1().Deployments(ns).Create(ctx, webDeployment(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWebReady(t, oldClient, ns, old.Subnet(), 3)

	// Scheduled snapshots: every server host writes its own and keeps the newest 2 (a third
	// exists only between writing the newest and removing the oldest).
	firstSeen := map[string]string{}
	waitFor(t, 2*time.Minute, "scheduled snapshots on every host, older ones removed", func() (bool, string) {
		var state []string
		ok := true
		for _, h := range old.Hosts {
			files, _ := filepath.Glob(filepath.Join(h.DataDir, "snapshots", "snapshot-*.tar.gz"))
			state = append(state, fmt.Sprintf("%s: %d", h.Name, len(files)))
			if len(files) > 3 {
				t.Fatalf("%s keeps %d scheduled snapshots, --snapshot-retention=2: %v", h.Name, len(files), files)
			}
			if len(files) == 0 {
				ok = false
				continue
			}
			if firstSeen[h.Name] == "" {
				firstSeen[h.Name] = files[0]
			}
			// Pruned: exactly 2 left, and the first one seen is gone.
			ok = ok && len(files) == 2 && files[0] > firstSeen[h.Name]
		}
		return ok, strings.Join(state, ", ")
	})

	// The old admin kubeconfig, as an administrator would have copied it off host 1.
	oldKubeconfig, err := os.ReadFile(old.Hosts[0].Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(t.TempDir(), "site.snap")
	start = time.Now()
	out, err := exec.Command(framework.FlotillaBin(t), "snapshot", "save", file, "--data-dir", old.Hosts[0].DataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	saveTook := time.Since(start)
	t.Logf("snapshot save: %s", out)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("the snapshot holds the CA key, its mode should be 0600: %v", fi.Mode())
	}
	framework.Figure(t, "snapshot save of a 3-host site with %d ConfigMaps: %s, file %.1f KiB", snapshotObjects, saveTook.Round(time.Millisecond), float64(fi.Size())/(1<<10))

	// Destroy the site: agents, containers, namespaces, bridge.
	oldSubnet := old.Subnet()
	old.Close()

	// A new site on other addresses: restore on its host 1, start it, join two more.
	s := newSite(t, 3)
	h1 := s.Hosts[0]
	if err := os.WriteFile(filepath.Join(h1.DataDir, "stray"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(framework.FlotillaBin(t), "snapshot", "restore", file, "--data-dir", h1.DataDir, "--name", h1.Name, "--listen-address", h1.IP).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is not empty") {
		t.Fatalf("restore into a non-empty data directory should be refused: %v\n%s", err, out)
	}
	os.Remove(filepath.Join(h1.DataDir, "stray"))
	start = time.Now()
	out, err = exec.Command(framework.FlotillaBin(t), "snapshot", "restore", file, "--data-dir", h1.DataDir, "--name", h1.Name, "--listen-address", h1.IP).CombinedOutput()
	if err != nil {
		t.Fatalf("snapshot restore: %v\n%s", err, out)
	}
	restoreTook := time.Since(start)
	t.Logf("snapshot restore: %s", out)
	sideLoad(t, s)
	start = time.Now()
	startSite(t, s)
	framework.Figure(t, "snapshot restore: %s; restored host and two joining hosts serving in %s", restoreTook.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	client := clientOf(t, h1)
	waitFor(t, 2*time.Minute, "3 Ready nodes", func() (bool, string) {
		got, out := readyNodes(h1)
		return got == 3, out
	})

	// Every object, with its data.
	list, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, cm := range list.Items {
		got[cm.Name] = cm.Data["i"] + "/" + cm.Data["payload"]
	}
	for i := range snapshotObjects {
		name := fmt.Sprintf("cm-%03d", i)
		if want := fmt.Sprintf("%d/%s", i, payload(i)); got[name] != want {
			t.Fatalf("ConfigMap %s/%s after restore: %q, want %q (%d ConfigMaps listed)", ns, name, got[name], want, len(list.Items))
		}
	}

	// The Deployment runs again, on the new hosts.
	waitWebReady(t, client, ns, s.Subnet(), 3)
	framework.Figure(t, "Deployment running again %s after the restored host started", time.Since(start).Round(time.Millisecond))
	// The controllers and the scheduler lead on the restored site (the old site's election
	// keys do not hold them off): a scaled Deployment gets its new pod scheduled and running.
	if _, err := client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWebReady(t, client, ns, s.Subnet(), 4)

	// The old admin kubeconfig: same CA, same admin token. The new site has other addresses
	// (a new devsite subnet), so its server: is the one thing changed.
	if oldSubnet == s.Subnet() {
		t.Fatalf("the new site should have other addresses than the old one (%s)", oldSubnet)
	}
	cfg, err := clientcmd.Load(oldKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + h1.IP + ":6443"
	}
	oldPath := filepath.Join(t.TempDir(), "old-kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, oldPath); err != nil {
		t.Fatal(err)
	}
	kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kout, err := exec.CommandContext(kctx, framework.KubectlBin(t), "--kubeconfig", oldPath, "get", "configmaps", "-n", ns, "--no-headers").CombinedOutput()
	if err != nil {
		t.Fatalf("the old admin kubeconfig against the restored site: %v\n%s", err, kout)
	}
	if n := strings.Count(string(kout), "cm-"); n != snapshotObjects {
		t.Fatalf("the old admin kubeconfig lists %d ConfigMaps, want %d", n, snapshotObjects)
	}
}

func payload(i int) string { return strings.Repeat(fmt.Sprintf("%04d", i), 64) }

// createConfigMaps creates n ConfigMaps cm-000... with data i and a 256-byte payload, 16 at a time.
func createConfigMaps(t *testing.T, c kubernetes.Interface, ns string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)},
				Data: map[string]string{"i": fmt.Sprint(i), "payload": payload(i)}}
			if _, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create ConfigMaps: %v", err)
	}
}

func webDeployment(ns string) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Containers: []corev1.Container{{Name: "hello", Image: hello, ImagePullPolicy: corev1.PullIfNotPresent,
						ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}}}},
				},
			},
		},
	}
}

// waitWebReady waits for n pods of Deployment web to be Running and Ready on hosts of the
// given subnet ("10.213.N").
func waitWebReady(t *testing.T, c kubernetes.Interface, ns, subnet string, n int) {
	t.Helper()
	waitFor(t, 3*time.Minute, fmt.Sprintf("Deployment web: %d pods Running and Ready on hosts of %s", n, subnet), func() (bool, string) {
		pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		var state []string
		for i := range pods.Items {
			p := &pods.Items[i]
			state = append(state, p.Name+": "+describe(p)+" hostIP="+p.Status.HostIP)
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) && strings.HasPrefix(p.Status.HostIP, subnet+".") {
				ready++
			}
		}
		return ready == n, strings.Join(state, "; ")
	})
}
