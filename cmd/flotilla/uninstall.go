package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/nodes/host"
	"github.com/flotilla-dev/flotilla/nodes/install"
)

// newUninstallCommand is `flotilla uninstall`: stop this host's agent and remove everything it
// created.
func newUninstallCommand() *cobra.Command {
	o := install.UninstallOptions{}
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Stop this host's agent and remove its service, containers, containerd, pod network, nftables tables, IPVS services, mounts, cgroups and (unless --keep-data) its data directory",
		Long: `Stops the service flotilla (where systemd runs it) or the agent process of --data-dir, then
removes what it created: containers and their shims, containerd's state, pod network
namespaces, mounts and cgroups, the bridge flotilla0 and the routes to other hosts' pods, the
nftables tables flotilla* and flotilla's IPVS services (in the network namespace it runs in),
the unit file, and unless --keep-data the data directory. Run it again after an error: every
step is repeated safely.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.DataDir == "" {
				dir, err := runningDataDir()
				if err != nil {
					return err
				}
				o.DataDir = dir
			}
			if o.Name == "" {
				if a, ok := host.FindAgent(o.DataDir); ok {
					o.Name = a.Flag("name")
				}
			}
			if o.Name == "" {
				o.Name, _ = os.Hostname()
			}
			o.Log = func(format string, args ...any) { fmt.Fprintf(cmd.OutOrStdout(), format+"\n", args...) }
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Minute)
			defer cancel()
			if err := install.Uninstall(ctx, o); err != nil {
				return fmt.Errorf("uninstall left something behind (run it again, or remove it by hand):\n%w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.DataDir, "data-dir", "", "the agent's data directory (default: that of the agent running on this machine)")
	f.StringVar(&o.Name, "name", "", "the agent's host name (default: the running agent's --name, else the system host name)")
	f.BoolVar(&o.KeepData, "keep-data", false, "keep the data directory (site CA, etcd data, checkpoint)")
	f.StringVar(&o.UnitDir, "unit-dir", install.DefaultUnitDir, "directory of the unit file")
	f.DurationVar(&o.StopTimeout, "stop-timeout", 30*time.Second, "how long the agent may take to exit after SIGTERM before it is killed")
	return cmd
}

// runningDataDir is the data directory of the one agent running on this machine.
func runningDataDir() (string, error) {
	var dirs []string
	for _, a := range host.RunningAgents() {
		if d := a.Flag("data-dir"); d != "" {
			dirs = append(dirs, d)
		}
	}
	switch len(dirs) {
	case 1:
		return dirs[0], nil
	case 0:
		return "", fmt.Errorf("--data-dir is required: no agent runs on this machine with --data-dir on its command line to take it from")
	default:
		return "", fmt.Errorf("--data-dir is required: several agents run on this machine (data directories %v)", dirs)
	}
}
