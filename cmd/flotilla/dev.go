package main

import (
	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/internal/devsite"
)

// newDevCommand is `flotilla dev`: a site of several hosts on this machine.
func newDevCommand() *cobra.Command {
	o := &devsite.Dev{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "A site of several hosts on this machine (network namespaces), for trying flotilla out; needs root",
	}
	cmd.PersistentFlags().StringVar(&o.Dir, "dir", "demo", "directory for the hosts' data, logs and the site's state")
	up := &cobra.Command{
		Use:   "up",
		Short: "Create the hosts and start a flotilla agent on each; print how to reach the site",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return o.Up(cmd.Context()) },
	}
	up.Flags().IntVar(&o.Hosts, "hosts", 3, "how many hosts")
	up.Flags().StringVar(&o.Bin, "flotilla", "", "the flotilla binary the hosts run (default: this one)")
	up.Flags().StringVar(&o.Kubectl, "kubectl", "kubectl", "kubectl to show in the instructions")
	up.Flags().StringVar(&o.Images, "images", "", "directory of OCI image tarballs (*.tar) side-loaded into every host")
	up.Flags().StringVar(&o.App, "app", "", "directory committed to a local git repository that the site deploys from (e.g. examples/hello)")
	down := &cobra.Command{
		Use: "down", Short: "Stop the hosts and remove everything `dev up` created", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return o.Down() },
	}
	start := &cobra.Command{
		Use:   "start [HOST...]",
		Short: "Start again the stopped hosts of the dev site (the named ones, or all), with the arguments `dev up` gave them",
		RunE:  func(cmd *cobra.Command, args []string) error { return o.Start(args) },
	}
	start.Flags().StringVar(&o.Bin, "flotilla", "", "the flotilla binary the hosts run (default: the one `dev up` gave them)")
	status := &cobra.Command{
		Use: "status", Short: "Show the hosts of the dev site", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return o.Status(cmd.Context()) },
	}
	cmd.AddCommand(up, down, start, status, &cobra.Command{
		Use:   "notify",
		Short: "Send the dev site a signed git push event (what the repository's post-receive hook runs)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return o.Notify(cmd.Context()) },
	})
	return cmd
}
