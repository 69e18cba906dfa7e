package gitsync

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// cacheHead is the commit checked out in a cache directory ("" when there is none).
func cacheHead(dir string) string {
	out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// TestWarmClone: while another host holds the controller Lease, RunWarm keeps this host's
// clone fresh without applying anything; while this host holds it, RunWarm leaves the cache to
// the controller; a controller started on the warm cache applies the source.
func TestWarmClone(t *testing.T) {
	r := newRepo(t)
	head := r.commit(map[string]string{"ns.yaml": nsYAML})
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers=", "--git-min-interval=1s"}})
	client := a.Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	holder, dur := "host-a", int32(3600)
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "flotilla-controllers"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, AcquireTime: &now, RenewTime: &now}}
	lease, err := client.CoordinationV1().Leases("kube-system").Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, err := controllers.NewContext(a.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	gs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "flotilla.dev/v1alpha1", "kind": "GitSource",
		"metadata": map[string]any{"name": "apps", "namespace": "default"},
		"spec":     map[string]any{"url": "file://" + r.dir, "interval": "1s", "serviceAccountName": testSA},
	}}
	(&env{t: t, client: client}).serviceAccount("default", testSA, "ClusterRoleBinding", "cluster-admin")
	if _, err := cctx.Dynamic.Resource(GitSourceResource).Namespace("default").Create(ctx, gs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cacheDir := t.TempDir()
	clone := filepath.Join(cacheDir, "default", "apps")
	warmDone := make(chan struct{})
	go func() {
		defer close(warmDone)
		_ = RunWarm(ctx, a.RESTConfig(), WarmConfig{CacheDir: cacheDir, Identity: "host-b", Lease: "flotilla-controllers", Tick: 200 * time.Millisecond})
	}()
	t.Cleanup(func() { cancel(); <-warmDone })
	waitHead := func(want string) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			return cacheHead(clone) == want, nil
		}); err != nil {
			t.Fatalf("warm clone at %q, want %s", cacheHead(clone), want)
		}
	}

	t.Log("another host leads: this host's clone follows the branch, nothing is applied")
	waitHead(head)
	head = r.commit(map[string]string{"cm.yaml": newCMYAML})
	waitHead(head)
	if _, err := client.CoreV1().Namespaces().Get(ctx, "demo", metav1.GetOptions{}); err == nil {
		t.Fatal("the warm clone runner applied objects")
	}

	t.Log("this host leads: the runner leaves the cache alone")
	holder = "host-b"
	lease.Spec.HolderIdentity = &holder
	if _, err := client.CoordinationV1().Leases("kube-system").Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a round already under way may finish
	warm := head
	head = r.commit(map[string]string{"cm2.yaml": strings.ReplaceAll(newCMYAML, "fresh", "fresh2")})
	// RunWarm reads the Lease from the API every 200 ms tick and fetches a 1 s-interval source
	// at most a tick past its interval: a fetch despite the lead would show within 1.2 s.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if got := cacheHead(clone); got != warm {
			t.Fatalf("runner fetched %s while this host leads", got)
		}
		if time.Now().After(deadline) {
			break
		}
	}

	t.Log("the new leader's controller starts on the warm cache and applies")
	c, err := NewWithConfig(cctx, Config{CacheDir: cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx, 1) }()
	t.Cleanup(func() { cancel(); <-done })
	e := &env{t: t, a: a, client: client, cctx: cctx}
	e.waitFor("leader applied", e.readyAt(head))
}
