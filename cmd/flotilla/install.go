package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/nodes/install"
)

// newInstallCommand is `flotilla install`: it writes the systemd unit that runs this binary's
// agent and, where systemd runs, enables and starts it.
func newInstallCommand() *cobra.Command {
	var configFile, dataDir, name, unitDir string
	cmd := &cobra.Command{
		Use:   "install [--config FILE] [--data-dir DIR] [--name N] [-- AGENT FLAGS...]",
		Short: "Run this host's agent as the systemd service flotilla.service (written, enabled and started)",
		Long: `Writes ` + install.DefaultUnitDir + `/` + install.UnitName + `, whose ExecStart is this binary's
"agent" with --config, --data-dir, --name and the flags after --, then runs systemctl
daemon-reload and systemctl enable --now flotilla. The agent's settings are checked first, as
the agent would read them. Where systemd is not running, the unit is written and not started.`,
		RunE: func(cmd *cobra.Command, extra []string) error {
			args, err := agentArgs(configFile, dataDir, name, extra)
			if err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this binary: %w", err)
			}
			if resolved, err := filepath.EvalSymlinks(self); err == nil {
				self = resolved
			}
			res, err := install.Install(install.Options{UnitOptions: install.UnitOptions{Binary: self, Args: args}, UnitDir: unitDir})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s\n", res.UnitPath)
			if res.Started {
				fmt.Fprintf(out, "enabled and started %s: see `systemctl status %s`, `journalctl -u %s`, `%s status`\n", install.ServiceName, install.ServiceName, install.ServiceName, self)
				return nil
			}
			fmt.Fprintf(out, "systemd is not running on this machine (PID 1 is %q), so the service was written but not enabled or started.\n", install.InitName())
			fmt.Fprintf(out, "Start the agent yourself:\n  %s agent %s\n", self, strings.Join(args, " "))
			fmt.Fprintf(out, "or, once booted with systemd: systemctl daemon-reload && systemctl enable --now %s\n", install.ServiceName)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "the agent's YAML settings file (see `flotilla agent --config`)")
	f.StringVar(&dataDir, "data-dir", "", "the agent's data directory (or data-dir in --config)")
	f.StringVar(&name, "name", "", "the agent's host name (default: the system host name)")
	f.StringVar(&unitDir, "unit-dir", install.DefaultUnitDir, "directory the unit file is written to")
	return cmd
}

// agentArgs checks the agent's settings as `flotilla agent` would read them and returns the
// arguments of its ExecStart (paths made absolute).
func agentArgs(configFile, dataDir, name string, extra []string) ([]string, error) {
	var args []string
	if configFile != "" {
		abs, err := filepath.Abs(configFile)
		if err != nil {
			return nil, err
		}
		args = append(args, "--config", abs)
	}
	if dataDir != "" {
		abs, err := filepath.Abs(dataDir)
		if err != nil {
			return nil, err
		}
		args = append(args, "--data-dir", abs)
	}
	if name != "" {
		args = append(args, "--name", name)
	}
	args = append(args, extra...)
	agent := newAgentCommand()
	fs := agent.Flags()
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("agent flags %v: %w: see `flotilla agent --help`", extra, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: the agent takes flags only (after --)", fs.Arg(0))
	}
	if configFile != "" {
		if err := applyConfigFile(fs, configFile); err != nil {
			return nil, err
		}
	}
	if fs.Lookup("data-dir").Value.String() == "" {
		return nil, errors.New("no data directory: give --data-dir DIR (or data-dir in --config)")
	}
	for _, f := range []string{"config", "data-dir", "token-file"} {
		// Relative paths after -- would be resolved against systemd's working directory (/).
		if v := fs.Lookup(f).Value.String(); v != "" && fs.Lookup(f).Changed && !filepath.IsAbs(v) && containsFlag(extra, f) {
			return nil, fmt.Errorf("--%s %s after --: give an absolute path (the service does not run in this directory)", f, v)
		}
	}
	return args, nil
}

func containsFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			return true
		}
	}
	return false
}
