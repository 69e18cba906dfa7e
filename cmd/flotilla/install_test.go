package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallAgentArgs(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(good, []byte("data-dir: /var/lib/flotilla\nname: edge-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args, err := agentArgs(good, "", "", []string{"--etcd-voters", "1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(args, " "); got != "--config "+good+" --etcd-voters 1" {
		t.Fatalf("args: %s", got)
	}
	args, err = agentArgs("", "rel/data", "h1", nil)
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if got := strings.Join(args, " "); got != "--data-dir "+filepath.Join(wd, "rel/data")+" --name h1" {
		t.Fatalf("args: %s", got)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("- not\n- a map\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unknown := filepath.Join(dir, "unknown.yaml")
	if err := os.WriteFile(unknown, []byte("data-dir: /d\nno-such-setting: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, config, dataDir string
		extra                 []string
		want                  string
	}{
		{"missing config", filepath.Join(dir, "nope.yaml"), "", nil, "no such file"},
		{"config not a map", bad, "", nil, "not a YAML map"},
		{"unknown setting", unknown, "", nil, `unknown setting "no-such-setting"`},
		{"no data dir", "", "", nil, "give --data-dir"},
		{"unknown agent flag", "", "/d", []string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
		{"bad agent flag value", "", "/d", []string{"--etcd-voters", "many"}, "etcd-voters"},
		{"stray argument", "", "/d", []string{"oops"}, `unexpected argument "oops"`},
		{"relative token file after --", "", "/d", []string{"--token-file", "token"}, "absolute path"},
	} {
		if _, err := agentArgs(c.config, c.dataDir, "", c.extra); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
}
