package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/component-base/version"

	"github.com/flotilla-dev/flotilla/gitsync"
)

// flotillaVersion is stamped by the Makefile (-X main.flotillaVersion=...).
var flotillaVersion = "dev"

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of flotilla and of the Kubernetes API it serves",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := version.Get()
			fmt.Fprintf(cmd.OutOrStdout(), "flotilla %s (Kubernetes API %s, %s, %s)\n", flotillaVersion, v.GitVersion, v.GoVersion, v.Platform)
			return nil
		},
	}
}

// The status documents a site publishes name the version that wrote them.
func init() { gitsync.Version = flotillaVersion }
