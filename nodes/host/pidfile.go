package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PIDFileName is the file in the data directory that names the running agent: its PID and
// its start time (field 22 of /proc/PID/stat), so a recycled PID is never taken for it.
const PIDFileName = "agent.pid"

// WritePIDFile records this process as the agent of dataDir. The returned function removes
// the file if it still names this process (a clean exit).
func WritePIDFile(dataDir string) (func(), error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	pid := os.Getpid()
	path := filepath.Join(dataDir, PIDFileName)
	if other, ostart, err := readPIDFile(path); err == nil && other != pid {
		if s, err := procStartTime(other); err == nil && s == ostart {
			if _, ok := agentArgs(other); ok {
				return nil, fmt.Errorf("another agent (pid %d) runs on the data directory %s: stop it first (two agents on one data directory would share its etcd and containerd)", other, dataDir)
			}
		}
	}
	start, err := procStartTime(pid)
	if err != nil {
		return nil, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", pid, start), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return func() {
		if p, s, err := readPIDFile(path); err == nil && p == pid && s == start {
			_ = os.Remove(path)
		}
	}, nil
}

func readPIDFile(path string) (pid int, start uint64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("%s: want \"PID STARTTIME\", got %q", path, strings.TrimSpace(string(b)))
	}
	if pid, err = strconv.Atoi(f[0]); err != nil || pid <= 0 {
		return 0, 0, fmt.Errorf("%s: bad PID %q", path, f[0])
	}
	if start, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%s: bad start time %q", path, f[1])
	}
	return pid, start, nil
}

// procStartTime is field 22 of /proc/PID/stat (clock ticks since boot).
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command (field 2) is in parentheses and may hold spaces: count from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// AgentProcess is a running `flotilla agent`.
type AgentProcess struct {
	PID  int
	Args []string // its command line
}

// Flag returns the value of --name (or --name=value) on the agent's command line, or "".
func (a AgentProcess) Flag(name string) string {
	for i, arg := range a.Args {
		if arg == "--"+name && i+1 < len(a.Args) {
			return a.Args[i+1]
		}
		if v, ok := strings.CutPrefix(arg, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// FindAgent returns the running agent of dataDir: the one its PID file names (still the same
// process: same start time, and a flotilla agent), else a flotilla agent whose command line
// names dataDir (started before agents wrote PID files). ok is false when none runs.
func FindAgent(dataDir string) (AgentProcess, bool) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return AgentProcess{}, false
	}
	if pid, start, err := readPIDFile(filepath.Join(abs, PIDFileName)); err == nil {
		if s, err := procStartTime(pid); err == nil && s == start {
			if args, ok := agentArgs(pid); ok {
				return AgentProcess{PID: pid, Args: args}, true
			}
		}
	}
	for _, a := range RunningAgents() {
		if d := a.Flag("data-dir"); d != "" {
			if da, err := filepath.Abs(d); err == nil && da == abs {
				return a, true
			}
		}
	}
	return AgentProcess{}, false
}

// RunningAgents lists the flotilla agents running on this machine.
func RunningAgents() []AgentProcess {
	var out []AgentProcess
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if args, ok := agentArgs(pid); ok {
			out = append(out, AgentProcess{PID: pid, Args: args})
		}
	}
	return out
}

// agentArgs returns the command line of pid when it is a `flotilla agent`.
func agentArgs(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(args) < 2 || !strings.Contains(filepath.Base(args[0]), "flotilla") || args[1] != "agent" {
		return nil, false
	}
	return args, true
}

// StopAgent ends the running agent of dataDir, if any: SIGTERM, then SIGKILL when it has not
// exited within timeout. It returns the PID it stopped (0: none ran).
func StopAgent(dataDir string, timeout time.Duration) (int, error) {
	a, ok := FindAgent(dataDir)
	if !ok {
		return 0, nil
	}
	start, err := procStartTime(a.PID)
	if err != nil {
		return 0, nil // gone meanwhile
	}
	same := func() bool { s, err := procStartTime(a.PID); return err == nil && s == start }
	if err := syscall.Kill(a.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return a.PID, fmt.Errorf("stop the agent (pid %d): %w", a.PID, err)
	}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if !same() || isZombie(a.PID) {
			return a.PID, nil
		}
	}
	if same() {
		_ = syscall.Kill(a.PID, syscall.SIGKILL)
		for i := 0; i < 50 && same() && !isZombie(a.PID); i++ {
			time.Sleep(100 * time.Millisecond)
		}
		if same() && !isZombie(a.PID) {
			return a.PID, fmt.Errorf("the agent (pid %d) did not exit after SIGKILL", a.PID)
		}
	}
	return a.PID, nil
}

// isZombie reports whether pid has exited but was not reaped yet (its parent, such as a test
// harness, still holds it).
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}
