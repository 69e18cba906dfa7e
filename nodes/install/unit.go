// Package install runs a flotilla agent as a systemd service (Install), reports what runs on
// a host (Status) and removes a host's agent and everything it created (Uninstall).
package install

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Defaults.
const (
	DefaultUnitDir = "/etc/systemd/system"
	UnitName       = "flotilla.service"
	// ServiceName is what systemctl is given.
	ServiceName = "flotilla"
)

// UnitOptions describe the service.
type UnitOptions struct {
	// Binary is the absolute path of the flotilla binary ExecStart runs.
	Binary string
	// Args follow "agent" on ExecStart (e.g. --config FILE, --data-dir DIR).
	Args []string
}

// Unit renders the systemd unit of the agent. Like k3s' unit: KillMode=process, so stopping
// or restarting the agent leaves its containers (and their shims) running; Delegate=yes, so
// systemd leaves the cgroups below the service to the agent's containerd; no limits on open
// files, processes and tasks; restarted when it fails.
func Unit(o UnitOptions) (string, error) {
	if !filepath.IsAbs(o.Binary) {
		return "", fmt.Errorf("the flotilla binary must be an absolute path, got %q", o.Binary)
	}
	exec := []string{quote(o.Binary), "agent"}
	for _, a := range o.Args {
		exec = append(exec, quote(a))
	}
	return `[Unit]
Description=Flotilla host agent (etcd, Kubernetes API, pods, proxy)
Documentation=https://github.com/flotilla-dev/flotilla
Wants=network-online.target
After=network-online.target

[Install]
WantedBy=multi-user.target

[Service]
Type=simple
ExecStartPre=-/sbin/modprobe overlay
ExecStartPre=-/sbin/modprobe br_netfilter
ExecStart=` + strings.Join(exec, " ") + `
KillMode=process
Delegate=yes
LimitNOFILE=1048576
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
TimeoutStartSec=0
Restart=on-failure
RestartSec=5s
`, nil
}

// quote renders one ExecStart argument: systemd splits on white space, expands % specifiers
// and $VARIABLES, and understands double quotes with C escapes.
func quote(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	s = strings.ReplaceAll(s, "$", "$$")
	if s != "" && !strings.ContainsAny(s, " \t\n\"'\\;") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}

// SystemdRunning reports whether systemd is this machine's init (sd_booted(3): the directory
// /run/systemd/system exists).
func SystemdRunning() bool {
	fi, err := os.Stat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// InitName is the command of PID 1 (for messages).
func InitName() string {
	b, err := os.ReadFile("/proc/1/comm")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// Options of Install.
type Options struct {
	UnitOptions
	// UnitDir is where the unit file goes; default DefaultUnitDir.
	UnitDir string
	// Systemctl runs systemctl (tests); default the real one.
	Systemctl func(args ...string) error
	// Systemd overrides SystemdRunning (tests).
	Systemd *bool
}

// Result says what Install did.
type Result struct {
	UnitPath string
	// Started is false when systemd does not run here: the unit was written only.
	Started bool
}

// Install writes the unit and, where systemd runs, reloads systemd and enables and starts the
// service. Installing again rewrites the unit and restarts nothing that runs unchanged
// (systemctl enable --now starts a stopped service only).
func Install(o Options) (Result, error) {
	o = o.withDefaults()
	unit, err := Unit(o.UnitOptions)
	if err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(o.UnitDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("create the unit directory: %w", err)
	}
	path := filepath.Join(o.UnitDir, UnitName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(unit), 0o644); err != nil {
		return Result{}, fmt.Errorf("write the unit: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return Result{}, fmt.Errorf("write the unit: %w", err)
	}
	res := Result{UnitPath: path}
	if !*o.Systemd {
		return res, nil
	}
	if err := o.Systemctl("daemon-reload"); err != nil {
		return res, err
	}
	if err := o.Systemctl("enable", "--now", ServiceName); err != nil {
		return res, err
	}
	res.Started = true
	return res, nil
}

func (o Options) withDefaults() Options {
	if o.UnitDir == "" {
		o.UnitDir = DefaultUnitDir
	}
	if o.Systemctl == nil {
		o.Systemctl = systemctl
	}
	if o.Systemd == nil {
		running := SystemdRunning()
		o.Systemd = &running
	}
	return o
}

func systemctl(args ...string) error {
	out, err := exec.Command("systemctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("systemctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
