package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigFileSetsFlagsAndFlagsWin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(`
data-dir: /var/lib/flotilla
api-port: 7443
etcd-voters: 1
node-monitor-grace-period: 20s
pods: false
join: [10.0.0.1:7946, 10.0.0.2:7946]
node-label:
  zone: a
  tier: edge
name: from-file
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newAgentCommand()
	if err := cmd.ParseFlags([]string{"--name", "from-flag", "--config", path}); err != nil {
		t.Fatal(err)
	}
	if err := applyConfigFile(cmd.Flags(), path); err != nil {
		t.Fatal(err)
	}
	get := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	for flag, want := range map[string]string{
		"data-dir": "/var/lib/flotilla", "api-port": "7443", "etcd-voters": "1", "pods": "false",
		"node-monitor-grace-period": (20 * time.Second).String(), "join": "[10.0.0.1:7946,10.0.0.2:7946]",
		"name": "from-flag", // the command line wins
	} {
		if got := get(flag); got != want {
			t.Errorf("--%s = %q, want %q", flag, got, want)
		}
	}
	if got := get("node-label"); !strings.Contains(got, "zone=a") || !strings.Contains(got, "tier=edge") {
		t.Errorf("--node-label = %q, want zone=a and tier=edge", got)
	}
}

func TestConfigFileBadInput(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown setting", "data-dirr: /x\n", `unknown setting "data-dirr"`},
		{"wrong type", "api-port: high\n", `api-port: "high"`},
		{"not a map", "- a\n- b\n", "not a YAML map"},
		{"config in config", "config: other.yaml\n", `unknown setting "config"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			err := applyConfigFile(newAgentCommand().Flags(), path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %s", err, tc.want)
			}
		})
	}
	if err := applyConfigFile(newAgentCommand().Flags(), "/nonexistent/flotilla.yaml"); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Fatalf("missing file: %v", err)
	}
}
