// Command flotilla is the one binary of a Flotilla site: every host runs `flotilla agent`.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "flotilla",
		Short:         "Flotilla: a GitOps appliance that runs Kubernetes semantics on every host of a site",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newAgentCommand(), newDevCommand(), newVersionCommand(), newImageCommand(), newLoggerCommand(), newResetCommand(), newPlanCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
