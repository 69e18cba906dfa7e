package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/nodes/install"
)

// newStatusCommand is `flotilla status`: what runs on this host.
func newStatusCommand() *cobra.Command {
	o := install.StatusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what runs on this host: the agent, its role, the site, the elections it leads, its pods",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Version = flotillaVersion
			if o.DataDir == "" {
				dir, err := runningDataDir()
				if err != nil {
					return err
				}
				o.DataDir = dir
			}
			lines, err := install.Status(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), install.Format(lines))
			return nil
		},
	}
	cmd.Flags().StringVar(&o.DataDir, "data-dir", "", "the agent's data directory (default: that of the agent running on this machine)")
	cmd.Flags().StringVar(&o.Name, "name", "", "the agent's host name (default: the running agent's, else the system host name)")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 0, "how long each API request may take (default 5s)")
	return cmd
}
