package gitsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// agentPID finds the agent process by its data directory on the command line.
func agentPID(t *testing.T, dataDir string) string {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && args[1] == "agent" && strings.Contains(string(b), "\x00"+dataDir+"\x00") {
			return e.Name()
		}
	}
	t.Fatalf("no agent process with data dir %s", dataDir)
	return ""
}

// procStatus returns the named fields (VmRSS, VmHWM) of /proc/<pid>/status.
func procStatus(t *testing.T, pid string, fields ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, f := range fields {
			if strings.HasPrefix(line, f+":") {
				out = append(out, strings.Join(strings.Fields(line), " "))
			}
		}
	}
	return strings.Join(out, ", ")
}

// TestLargeRepository: the agent's own gitsync (the root source from --git-url) applies a
// repository of 2,000 ConfigMaps; the test prints the seconds it took and the agent's RSS.
func TestLargeRepository(t *testing.T) {
	const files, perFile = 20, 100
	r := newRepo(t)
	content := map[string]string{}
	for f := range files {
		var b strings.Builder
		for i := range perFile {
			fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%02d-%03d\n  namespace: default\ndata:\n  index: %q\n  payload: %q\n",
				f, i, fmt.Sprint(f*perFile+i), strings.Repeat("x", 256))
		}
		content[fmt.Sprintf("part-%02d.yaml", f)] = b.String()
	}
	head := r.commit(content)
	start := time.Now()
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers=gitsync", "--git-url", "file://" + r.dir}})
	pid := agentPID(t, a.DataDir)
	t.Logf("agent pid %s ready after %v: %s", pid, time.Since(start).Round(time.Millisecond), procStatus(t, pid, "VmRSS"))
	dyn, err := dynamic.NewForConfig(a.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	var gs v1alpha1.GitSource
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(GitSourceResource).Namespace("kube-system").Get(ctx, "root", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		gs = v1alpha1.GitSource{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gs); err != nil {
			return false, err
		}
		c := apimeta.FindStatusCondition(gs.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && gs.Status.LastAppliedRevision == "main@sha1:"+head, nil
	})
	if err != nil {
		t.Fatalf("2,000 objects not applied: %v; status conditions %+v", err, gs.Status.Conditions)
	}
	took := time.Since(start)
	list, err := a.Client().CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{LabelSelector: SourceLabel + "=kube-system.root"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != files*perFile || gs.Status.Inventory == nil || len(gs.Status.Inventory.Entries) != files*perFile {
		t.Fatalf("applied %d ConfigMaps, inventory %d; want %d", len(list.Items), len(gs.Status.Inventory.Entries), files*perFile)
	}
	framework.Figure(t, "2000 objects applied %.1f s after the agent started; agent %s", took.Seconds(), procStatus(t, pid, "VmRSS", "VmHWM"))
	for _, line := range strings.Split(a.Logs(), "\n") {
		if strings.Contains(line, "msg=applied") {
			t.Logf("agent: %s", line)
		}
	}
}
