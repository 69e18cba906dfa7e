package host

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPIDFileNamesThisProcessUntilRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	remove, err := WritePIDFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	pid, start, err := readPIDFile(filepath.Join(dir, PIDFileName))
	if err != nil || pid != os.Getpid() {
		t.Fatalf("pid file: %d %v", pid, err)
	}
	if s, _ := procStartTime(pid); s != start {
		t.Fatalf("start time %d, /proc says %d", start, s)
	}
	// The test binary is no flotilla agent: it is never taken for one, nor signalled.
	if a, ok := FindAgent(dir); ok {
		t.Fatalf("took %+v for the agent", a)
	}
	if pid, err := StopAgent(dir, time.Second); pid != 0 || err != nil {
		t.Fatalf("StopAgent without an agent: %d %v", pid, err)
	}
	remove()
	if _, err := os.Stat(filepath.Join(dir, PIDFileName)); !os.IsNotExist(err) {
		t.Fatalf("pid file left after a clean exit: %v", err)
	}
}

func TestPIDFileOfAnotherProcessIsKept(t *testing.T) {
	dir := t.TempDir()
	remove, err := WritePIDFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A newer agent overwrote the file: the older one's exit must not remove it.
	path := filepath.Join(dir, PIDFileName)
	if err := os.WriteFile(path, []byte("1 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	remove()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("another agent's pid file was removed: %v", err)
	}
	if _, ok := FindAgent(dir); ok {
		t.Fatal("a recycled PID (other start time) was taken for the agent")
	}
}

func TestAgentFlag(t *testing.T) {
	a := AgentProcess{Args: []string{"/usr/local/bin/flotilla", "agent", "--data-dir", "/var/lib/flotilla", "--name=edge-1"}}
	if a.Flag("data-dir") != "/var/lib/flotilla" || a.Flag("name") != "edge-1" || a.Flag("join") != "" {
		t.Fatalf("flags of %v", a.Args)
	}
}
