package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestContainerLogRotation: with --container-log-max-size 1Mi and --container-log-max-files 3,
// a container writing 100 MiB of logs never has more than 3 MiB (plus a line) on the host,
// kubectl logs reads over the rotated files, and kubectl logs -f follows through rotations
// without losing or repeating a line.
func TestContainerLogRotation(t *testing.T) {
	const maxSize, maxFiles = 1 << 20, 3
	s := newSite(t, 1)
	sideLoad(t, s)
	startSite(t, s, "--container-log-max-size=1Mi", fmt.Sprintf("--container-log-max-files=%d", maxFiles))
	h := s.Hosts[0]
	c := clientOf(t, h)

	// logFiles returns the log files of attempt 0 of a container and their total size.
	logFiles := func(p *corev1.Pod, container string) ([]string, int64) {
		files, _ := filepath.Glob(filepath.Join(h.DataDir, "pods", string(p.UID), "logs", container, "0.log*"))
		var total int64
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil {
				total += fi.Size()
			}
		}
		return files, total
	}
	// checkLines checks that out is "line N ..." for N from first on, count lines.
	checkLines := func(what, out string, first, count int) {
		t.Helper()
		ls := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(ls) != count {
			t.Fatalf("%s: %d lines, want %d (first %.40q, last %.40q)", what, len(ls), count, ls[0], ls[len(ls)-1])
		}
		for i, l := range ls {
			if !strings.HasPrefix(l, fmt.Sprintf("line %d ", first+i)) || len(l) != 99 {
				t.Fatalf("%s: line %d is %.40q, want line %d", what, i, l, first+i)
			}
		}
	}

	t.Run("follow through rotations", func(t *testing.T) {
		// 40000 lines of 100 bytes (about 140 in the CRI file) at 2000 a second: a rotation
		// every 4 s, 5 rotations; the oldest files are gone before the end.
		const n = 40000
		create(t, c, newPod("follow", h.Name, corev1.RestartPolicyNever, tool("lines", "lines", fmt.Sprint(n), "2000")))
		waitPod(t, c, "follow", 90*time.Second, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, framework.KubectlBin(t), "--kubeconfig", h.Kubeconfig(), "logs", "-f", "follow")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		var got strings.Builder
		for i := 0; i < n && sc.Scan(); i++ {
			got.WriteString(sc.Text() + "\n")
		}
		cancel()
		_ = cmd.Wait()
		checkLines("kubectl logs -f", got.String(), 0, n)
		p, _ := getPod(c, "follow")
		files, total := logFiles(p, "lines")
		if len(files) != maxFiles || total > maxFiles*maxSize {
			t.Fatalf("log files of the followed container: %v, %d bytes; want %d files, at most %d bytes", files, total, maxFiles, maxFiles*maxSize)
		}
		// The first lines were rotated away: kubectl logs starts later, and ends with the last.
		out := kubectlOut(t, h, "logs", "follow")
		var first int
		if _, err := fmt.Sscanf(out, "line %d ", &first); err != nil || first == 0 {
			t.Fatalf("kubectl logs after rotations starts with %.40q, want a line after line 0", out)
		}
		checkLines("kubectl logs", out, first, n-first)
	})

	t.Run("100 MiB of logs keep at most max-size times max-files", func(t *testing.T) {
		const n = 1 << 20 // lines of 100 bytes: 100 MiB
		create(t, c, newPod("flood", h.Name, corev1.RestartPolicyNever, tool("lines", "lines", fmt.Sprint(n))))
		p := waitPod(t, c, "flood", 90*time.Second, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		// While it writes, the files stay within the bound (a line of slack: the current file
		// may be renamed and not yet replaced when looked at, or a file appear as it is looked at).
		var peak int64
		waitFor(t, 3*time.Minute, "the last line logged", func() (bool, string) {
			files, total := logFiles(p, "lines")
			peak = max(peak, total)
			if len(files) > maxFiles+1 || total > maxFiles*maxSize+1024 {
				t.Fatalf("log files while writing: %v, %d bytes; want at most %d files, %d bytes", files, total, maxFiles, maxFiles*maxSize)
			}
			out, _ := h.Kubectl(context.Background(), "", "logs", "flood", "--tail=1")
			return strings.HasPrefix(out, fmt.Sprintf("line %d ", n-1)), fmt.Sprintf("%d files, %d bytes, last line %.20q", len(files), total, out)
		})
		files, total := logFiles(p, "lines")
		if len(files) != maxFiles || total > maxFiles*maxSize {
			t.Fatalf("log files after 100 MiB: %v, %d bytes; want %d files, at most %d bytes", files, total, maxFiles, maxFiles*maxSize)
		}
		t.Logf("100 MiB logged: %d files, %d bytes on disk (peak seen %d)", len(files), total, peak)
		// The tail reaches over the current file into the rotated ones.
		checkLines("kubectl logs --tail", kubectlOut(t, h, "logs", "flood", "--tail=15000"), n-15000, 15000)
		out := kubectlOut(t, h, "logs", "flood")
		var first int
		if _, err := fmt.Sscanf(out, "line %d ", &first); err != nil {
			t.Fatalf("kubectl logs starts with %.40q", out)
		}
		checkLines("kubectl logs", out, first, n-first)
	})

	t.Run("previous reads the rotated files of the last attempt", func(t *testing.T) {
		// 3 MiB on stdout, then exit (fsync of a pipe fails) and restart.
		create(t, c, newPod("again", h.Name, corev1.RestartPolicyAlways, tool("fill", "fill", "/dev/stdout", "3")))
		waitPod(t, c, "again", 2*time.Minute, "restarted", func(p *corev1.Pod) bool {
			cs := statusOf(p, "fill")
			return cs != nil && cs.RestartCount >= 1
		})
		out := kubectlOut(t, h, "logs", "again", "--previous")
		if len(out) <= maxSize || len(out) > maxFiles*maxSize {
			t.Fatalf("kubectl logs --previous printed %d bytes, want more than one file (%d) and at most %d", len(out), maxSize, maxFiles*maxSize)
		}
		// Every attempt writes the same bytes (the attempt may have changed meanwhile).
		if head := kubectlOut(t, h, "logs", "again", "--previous", "--limit-bytes=1000"); len(head) != 1000 || !strings.Contains(out, head) {
			t.Fatalf("kubectl logs --previous --limit-bytes=1000 printed %d bytes, not a part of the whole", len(head))
		}
	})
}
