package install

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestUnitRendersAgentService(t *testing.T) {
	u, err := Unit(UnitOptions{Binary: "/usr/local/bin/flotilla", Args: []string{"--config", "/etc/flotilla/my config.yaml", "--node-label", "a=$HOME%"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nExecStart=/usr/local/bin/flotilla agent --config \"/etc/flotilla/my config.yaml\" --node-label a=$$HOME%%\n",
		"\nKillMode=process\n", "\nDelegate=yes\n", "\nRestart=on-failure\n", "\nLimitNOFILE=1048576\n",
		"\nAfter=network-online.target\n", "\nWants=network-online.target\n", "\nWantedBy=multi-user.target\n",
	} {
		if !strings.Contains(u, want) {
			t.Errorf("unit lacks %q:\n%s", want, u)
		}
	}
	if _, err := Unit(UnitOptions{Binary: "flotilla"}); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("a relative binary path: got %v, want an error asking for an absolute path", err)
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain", "": `""`, "a b": `"a b"`, `q"x`: `"q\"x"`, `back\slash`: `"back\\slash"`, "50%": "50%%", "$X": "$$X",
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestInstallWithoutSystemdWritesOnly(t *testing.T) {
	dir := t.TempDir()
	no := false
	called := 0
	res, err := Install(Options{UnitOptions: UnitOptions{Binary: "/bin/flotilla", Args: []string{"--data-dir", "/var/lib/flotilla"}}, UnitDir: dir,
		Systemd: &no, Systemctl: func(...string) error { called++; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Started || called != 0 {
		t.Fatalf("without systemd nothing may be started: %+v, systemctl called %d times", res, called)
	}
	b, err := os.ReadFile(filepath.Join(dir, UnitName))
	if err != nil || !strings.Contains(string(b), "ExecStart=/bin/flotilla agent --data-dir /var/lib/flotilla\n") {
		t.Fatalf("unit: %v\n%s", err, b)
	}
}

func TestInstallWithSystemdEnablesAndStarts(t *testing.T) {
	dir := t.TempDir()
	yes := true
	var calls []string
	res, err := Install(Options{UnitOptions: UnitOptions{Binary: "/bin/flotilla"}, UnitDir: dir, Systemd: &yes,
		Systemctl: func(args ...string) error { calls = append(calls, strings.Join(args, " ")); return nil }})
	if err != nil || !res.Started {
		t.Fatalf("%+v %v", res, err)
	}
	if got := strings.Join(calls, "; "); got != "daemon-reload; enable --now flotilla" {
		t.Fatalf("systemctl calls: %s", got)
	}
	// Uninstall stops, disables, removes the unit and reloads; the data directory goes.
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(data, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	calls = nil
	err = Uninstall(context.Background(), UninstallOptions{DataDir: data, Name: "unit-test-no-such-host", UnitDir: dir, Systemd: &yes,
		Systemctl: func(args ...string) error { calls = append(calls, strings.Join(args, " ")); return nil }, skipReset: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(calls, "; "); got != "stop flotilla; disable flotilla; daemon-reload" {
		t.Fatalf("systemctl calls: %s", got)
	}
	for _, p := range []string{filepath.Join(dir, UnitName), data} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s should be gone: %v", p, err)
		}
	}
}

func TestUninstallKeepsDataAndRefusesForeignDirectories(t *testing.T) {
	no := false
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "cluster.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := UninstallOptions{DataDir: data, Name: "unit-test-no-such-host", UnitDir: t.TempDir(), Systemd: &no, skipReset: true}
	o.KeepData = true
	if err := Uninstall(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "cluster.json")); err != nil {
		t.Fatalf("--keep-data removed the data: %v", err)
	}
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "thesis.tex"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.DataDir, o.KeepData = foreign, false
	err := Uninstall(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "does not look like a flotilla data directory") {
		t.Fatalf("a foreign directory: got %v", err)
	}
	if _, err := os.Stat(filepath.Join(foreign, "thesis.tex")); err != nil {
		t.Fatal("a foreign directory was removed")
	}
	if err := Uninstall(context.Background(), UninstallOptions{Name: "x", Systemd: &no}); err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("no data dir: %v", err)
	}
}

func TestFormatAligns(t *testing.T) {
	got := Format([]Line{{"host", "h1"}, {"leader of", "controllers"}})
	want := "host:      h1\nleader of: controllers\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestDataDirWithMountsIsKept: a mount the reset could not detach (it may bind the host's own
// files into a container) keeps the data directory; once it is gone the directory goes.
func TestDataDirWithMountsIsKept(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("mounting a tmpfs needs root")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "data")
	mnt := filepath.Join(dir, "containerd", "bind")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	keep := filepath.Join(mnt, "host-file")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := removeDataDir(dir)
	if err == nil || !strings.Contains(err.Error(), "mounts remain") {
		t.Fatalf("removeDataDir with a mount below it: %v, want a refusal", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("a file behind the mount is gone: %v", err)
	}
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	if err := removeDataDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data directory still there: %v", err)
	}
}
