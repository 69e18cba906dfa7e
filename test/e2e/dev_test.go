package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestDevUpDown runs the commands behind `make demo` / `make demo-down` and checks that the
// app answers, that a git push deploys at once, and that nothing is left behind.
func TestDevUpDown(t *testing.T) {
	if err := devsite.Preflight(); err != nil {
		if framework.InCI() {
			t.Fatalf("dev site cannot run: %v", err)
		}
		t.Skipf("dev site cannot run: %v", err)
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
	out := run("dev", "up", "--dir", dir, "--hosts", "2", "--kubectl", kubectl,
		"--app", filepath.Join(framework.RepoRoot(), "examples", "hello"), "--images", imagesDir(t))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	url := lines[len(lines)-1]
	if !strings.HasPrefix(url, "http://") {
		t.Fatalf("last line %q, want the app's URL", url)
	}
	if code, body, err := get(url, ""); code != 200 || !strings.Contains(body, "version v1") {
		t.Fatalf("GET %s: %d %q %v", url, code, body, err)
	}
	nodes, err := exec.Command(kubectl, "--kubeconfig", filepath.Join(dir, "host-2", "kubeconfig"), "get", "nodes", "--no-headers").CombinedOutput()
	if err != nil || strings.Count(string(nodes), " Ready ") != 2 {
		t.Errorf("kubectl get nodes through host-2: %v\n%s", err, nodes)
	}

	// A push deploys at once: the repository's hook sends the site a signed push event (the
	// source otherwise polls every minute).
	work := filepath.Join(dir, "work")
	b, err := os.ReadFile(filepath.Join(work, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "deployment.yaml"), []byte(strings.Replace(string(b), `value: "v1"`, `value: "v2"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", work}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("-c", "user.name=test", "-c", "user.email=test@flotilla.invalid", "commit", "-qam", "hello v2")
	pushed := time.Now()
	git("push", "-q")
	rev := git("rev-parse", "HEAD")
	waitFor(t, 15*time.Second, "the pushed commit applied through the push webhook", func() (bool, string) {
		out, err := exec.Command(kubectl, "--kubeconfig", filepath.Join(dir, "host-1", "kubeconfig"), "-n", "kube-system", "get", "gitsource", "root",
			"-o", `jsonpath={.metadata.annotations.flotilla\.dev/requested-at} {.status.lastAppliedRevision}`).CombinedOutput()
		f := strings.Fields(string(out))
		return err == nil && len(f) == 2 && strings.HasSuffix(f[1], rev), fmt.Sprint(string(out), err)
	})
	t.Logf("git push -> applied: %s", time.Since(pushed).Round(100*time.Millisecond))
	waitFor(t, 90*time.Second, "v2 answering", func() (bool, string) {
		code, body, err := get(url, "")
		return code == 200 && strings.Contains(body, "version v2"), fmt.Sprint(code, body, err)
	})
	if status := run("dev", "status", "--dir", dir); strings.Count(status, "running") != 2 {
		t.Errorf("dev status:\n%s", status)
	}

	// A host whose agent dies comes back with `dev start`, with its data.
	site, err := devsite.Load(filepath.Join(dir, "site.json"), devsite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	host2 := site.Hosts[1]
	if err := syscall.Kill(host2.PID(), syscall.SIGKILL); err != nil {
		t.Fatalf("kill host-2's agent (pid %d, started by dev up here): %v", host2.PID(), err)
	}
	waitFor(t, 30*time.Second, "dev status showing host-2 stopped", func() (bool, string) {
		status := run("dev", "status", "--dir", dir)
		return strings.Contains(status, "stopped") && strings.Count(status, "running") == 1, status
	})
	if out, err := exec.Command(bin, "dev", "start", "--dir", dir, "host-9").CombinedOutput(); err == nil || !strings.Contains(string(out), `no host "host-9"`) {
		t.Errorf("dev start host-9: %v %s, want an error naming the hosts", err, out)
	}
	if out := run("dev", "start", "--dir", dir); !strings.Contains(out, "host-2 started") || strings.Contains(out, "host-1") {
		t.Errorf("dev start: %q, want host-2 started and host-1 left alone", out)
	}
	waitFor(t, 2*time.Minute, "host-2 Ready again", func() (bool, string) {
		nodes, err := exec.Command(kubectl, "--kubeconfig", filepath.Join(dir, "host-2", "kubeconfig"), "get", "nodes", "--no-headers").CombinedOutput()
		return err == nil && strings.Count(string(nodes), " Ready ") == 2, fmt.Sprint(string(nodes), err)
	})
	if out := run("dev", "start", "--dir", dir); !strings.Contains(out, "every host is running") {
		t.Errorf("dev start with every host running: %q", out)
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
