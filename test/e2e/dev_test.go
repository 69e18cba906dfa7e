package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/test/e2e/harness"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestDevUpDown runs the commands behind `make demo` / `make demo-down` and checks that the
// site answers and that nothing is left behind.
func TestDevUpDown(t *testing.T) {
	if err := harness.Preflight(); err != nil {
		if framework.InCI() {
			t.Fatalf("dev site cannot run: %v", err)
		}
		t.Skipf("dev site needs: %v", err)
	}
	bin, kubectl := framework.FlotillaBin(t), framework.KubectlBin(t)
	dir := filepath.Join(t.TempDir(), "demo")
	run := func(args ...string) string {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("flotilla %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { _, _ = exec.Command(bin, "dev", "down", "--dir", dir).CombinedOutput() })
	out := run("dev", "up", "--dir", dir, "--hosts", "2", "--kubectl", kubectl)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "API: https://") {
		t.Errorf("last line %q, want the API URL", last)
	}
	nodes, err := exec.Command(kubectl, "--kubeconfig", filepath.Join(dir, "host-2", "kubeconfig"), "get", "nodes", "--no-headers").CombinedOutput()
	if err != nil || strings.Count(string(nodes), " Ready ") != 2 {
		t.Errorf("kubectl get nodes through host-2: %v\n%s", err, nodes)
	}
	if status := run("dev", "status", "--dir", dir); strings.Count(status, "running") != 2 {
		t.Errorf("dev status:\n%s", status)
	}
	before, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	run("dev", "down", "--dir", dir)
	after, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	if strings.Count(string(after), "\n") != strings.Count(string(before), "\n")-2 {
		t.Errorf("namespaces left after dev down:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if out, _ := exec.Command("pgrep", "-f", "agent --data-dir "+dir).CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("agents left running: %s", out)
	}
}
