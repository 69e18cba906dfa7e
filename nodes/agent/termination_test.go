package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// The termination message: the file bound to terminationMessagePath (its last 4 KiB), or with
// FallbackToLogsOnError, when the file is empty and the container failed, the end of its log
// (the last 80 lines, at most 2 KiB).
func TestTerminationMessage(t *testing.T) {
	podDir := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exitedAttempt := func(attempt int, code int32) *rt.ContainerStatus {
		return &rt.ContainerStatus{ID: fmt.Sprintf("c-%d", attempt), State: rt.StateExited, ExitCode: code,
			Labels: map[string]string{labelAttempt: fmt.Sprint(attempt)}}
	}
	var log strings.Builder
	for i := range 100 {
		fmt.Fprintf(&log, "2026-12-06T00:00:%02d.000000000Z stderr F line %03d\n", i%60, i)
	}
	file := &corev1.Container{Name: "app", TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile}
	fallback := file.DeepCopy()
	fallback.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError

	write(terminationLogPath(podDir, "app", 0), "disk full\n")
	write(terminationLogPath(podDir, "app", 1), strings.Repeat("x", 5000)+"END")
	write(terminationLogPath(podDir, "app", 2), "")
	for _, a := range []int{2, 3} {
		write(logPath(podDir, "app", a), log.String())
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		c    *corev1.Container
		s    *rt.ContainerStatus
		want func(string) bool
	}{
		{"the file", file, exitedAttempt(0, 1), func(m string) bool { return m == "disk full\n" }},
		{"its last 4 KiB", file, exitedAttempt(1, 1), func(m string) bool { return len(m) == 4096 && strings.HasSuffix(m, "END") }},
		{"an empty file, policy File", file, exitedAttempt(2, 1), func(m string) bool { return m == "" }},
		{"an empty file, fallback, failed: the log's last 80 lines", fallback, exitedAttempt(2, 1), func(m string) bool {
			return strings.HasPrefix(m, "line 020\n") && strings.HasSuffix(m, "line 099\n") && strings.Count(m, "\n") == 80
		}},
		{"fallback, succeeded: no log", fallback, exitedAttempt(2, 0), func(m string) bool { return m == "" }},
		{"fallback, no file at all: the log", fallback, exitedAttempt(3, 2), func(m string) bool { return strings.HasSuffix(m, "line 099\n") }},
		{"the file wins over the log", fallback, exitedAttempt(0, 1), func(m string) bool { return m == "disk full\n" }},
	} {
		if got := terminationMessage(ctx, podDir, tc.c, tc.s); !tc.want(got) {
			t.Errorf("%s: message %q", tc.name, got)
		}
	}
	// The log's tail is cut to its last 2 KiB.
	var long strings.Builder
	for i := range 80 {
		fmt.Fprintf(&long, "2026-12-06T00:00:00.000000000Z stdout F %03d %s\n", i, strings.Repeat("y", 60))
	}
	write(logPath(podDir, "app", 4), long.String())
	if got := terminationMessage(ctx, podDir, fallback, exitedAttempt(4, 1)); len(got) != 2048 || !strings.HasSuffix(got, "079 "+strings.Repeat("y", 60)+"\n") {
		t.Errorf("a long log: %d bytes ending %q", len(got), got[max(len(got)-70, 0):])
	}

	// The agent binds the file into every container at its terminationMessagePath.
	pod := testPod()
	pod.Spec.Containers[0].TerminationMessagePath = "/tmp/why"
	cfg, err := buildContainerConfig(pod, &pod.Spec.Containers[0], containerParams{Attempt: 7, PodDir: podDir})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range cfg.Mounts {
		if m.Destination == "/tmp/why" && m.Source == terminationLogPath(podDir, pod.Spec.Containers[0].Name, 7) && !m.ReadOnly {
			found = true
		}
	}
	if !found {
		t.Errorf("no writable mount of the termination log at /tmp/why: %+v", cfg.Mounts)
	}
}
