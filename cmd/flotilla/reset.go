package main

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/nodes/host"
)

// newResetCommand removes what a stopped agent leaves running on purpose (its containers
// keep running across agent restarts): containers, containerd, pod sandboxes, mounts and
// cgroups, and what it programmed into the network namespace reset runs in (bridge, routes,
// nftables tables, IPVS). It is `flotilla uninstall` without the service and the data
// directory. `flotilla dev down` and the test harness use it.
func newResetCommand() *cobra.Command {
	var dataDir, name string
	network := true
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Stop and remove this host's pods, containerd, pod network (namespaces, bridge, routes, nftables tables, IPVS) and mounts (the agent must be stopped)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dataDir == "" {
				return errors.New("--data-dir is required: the agent's data directory")
			}
			if name == "" {
				return errors.New("--name is required: the host name the agent ran as")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			return host.ResetOnly(ctx, dataDir, name, network)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the agent's data directory")
	cmd.Flags().StringVar(&name, "name", "", "the agent's host name (its cgroup parent is /flotilla/<name>)")
	cmd.Flags().BoolVar(&network, "network", network, "also remove the bridge, routes, nftables tables and IPVS services of the network namespace reset runs in; false when the agent ran in another one")
	return cmd
}
