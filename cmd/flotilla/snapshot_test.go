package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The agent refuses a bad schedule or retention at start, from a flag or from --config.
func TestAgentRefusesBadSnapshotFlags(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("snapshot-schedule: \"0 25 * * *\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--snapshot-schedule", "hourly"}, `--snapshot-schedule "hourly" is not a cron expression`},
		{[]string{"--snapshot-retention", "0"}, "--snapshot-retention 0"},
		{[]string{"--config", cfg}, `--snapshot-schedule "0 25 * * *" is not a cron expression`},
	} {
		cmd := newAgentCommand()
		cmd.SetArgs(append([]string{"--data-dir", filepath.Join(dir, "data"), "--name", "h1"}, c.args...))
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%v: want an error containing %q, got %v", c.args, c.want, err)
		}
	}
}

func TestRestorePeerURL(t *testing.T) {
	if u, err := restorePeerURL("10.1.2.3", "", 2380); err != nil || u != "https://10.1.2.3:2380" {
		t.Fatalf("%s %v", u, err)
	}
	if u, err := restorePeerURL("0.0.0.0", "10.9.9.9", 2390); err != nil || u != "https://10.9.9.9:2390" {
		t.Fatalf("%s %v", u, err)
	}
	if _, err := restorePeerURL("host-1", "", 2380); err == nil || !strings.Contains(err.Error(), "--listen-address") {
		t.Fatalf("got %v", err)
	}
}
