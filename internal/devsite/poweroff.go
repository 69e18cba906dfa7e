package devsite

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flotilla-dev/flotilla/nodes/host"
)

// PowerOff simulates a power loss of the host: every process of it (the agent, its
// containerd, the shims, the containers) is killed with SIGKILL in one pass, and then what a
// reboot wipes is cleared (`flotilla reset`: containers, mounts, cgroups), while the data
// directory (etcd's data, certificates, the agent's checkpoints) stays. Start (Restart) boots
// it again.
func (h *Host) PowerOff() error {
	h.mu.Lock()
	cmd, exited := h.cmd, h.exited
	h.mu.Unlock()
	for i := 0; i < 3; i++ {
		pids := h.processes()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if cmd != nil {
		<-exited
	}
	if h.site.opts.Bin == "" {
		return fmt.Errorf("%s: no flotilla binary (Options.Bin) to clear what a reboot clears with", h.Name)
	}
	if out, err := exec.Command(h.site.opts.Bin, "reset", "--data-dir", h.DataDir, "--name", h.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: reset after the power loss: %v\n%s", h.Name, err, out)
	}
	return nil
}

// processes lists the host's processes: those whose command line names its data directory
// (the agent, containerd, the shims) and those in its cgroups (the containers).
func (h *Host) processes() []int {
	abs, err := filepath.Abs(h.DataDir)
	if err != nil {
		abs = h.DataDir
	}
	seen := map[int]bool{}
	if pid := h.PID(); pid > 0 {
		seen[pid] = true
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), abs+"/") || strings.Contains(string(b), "\x00"+abs+"\x00") {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
				seen[pid] = true
			}
		}
	}
	for _, pid := range host.CgroupProcesses("/flotilla/" + h.Name) {
		seen[pid] = true
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	return out
}
