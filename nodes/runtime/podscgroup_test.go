package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestLimitCgroupParent caps a real cgroup (this machine's hierarchy) and reads the caps
// back from the kernel.
func TestLimitCgroupParent(t *testing.T) {
	if os.Geteuid() != 0 {
		if framework.InCI() {
			t.Fatal("needs root to write cgroups")
		}
		t.Skip("needs root to write cgroups")
	}
	parent := fmt.Sprintf("/flotilla-test-limit-%d/pods", os.Getpid())
	t.Cleanup(func() { _ = RemoveCgroupParent(parent) })
	if err := LimitCgroupParent(parent, 256<<20, 1500); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir := filepath.Join("/sys/fs/cgroup", parent)
		if got := read(filepath.Join(dir, "memory.max")); got != "268435456" {
			t.Errorf("memory.max = %s", got)
		}
		return
	}
	if got := read(filepath.Join("/sys/fs/cgroup/memory", parent, "memory.limit_in_bytes")); got != "268435456" {
		t.Errorf("memory.limit_in_bytes = %s, want 268435456", got)
	}
	if got := read(filepath.Join("/sys/fs/cgroup/cpu", parent, "cpu.shares")); got != "1536" {
		t.Errorf("cpu.shares = %s, want 1536 (1.5 CPUs)", got)
	}
	if err := LimitCgroupParent("/", 1, 1); err == nil {
		t.Error("the root cgroup was limited")
	}
}
