// Command flotilla is the one binary of a Flotilla site: every host runs `flotilla agent`.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/internal/logging"
)

func main() {
	logCfg := logging.DefaultConfig()
	root := &cobra.Command{
		Use:           "flotilla",
		Short:         "Flotilla: a GitOps appliance that runs Kubernetes semantics on every host of a site",
		SilenceUsage:  true,
		SilenceErrors: true,
		// One log stream: klog, etcd, grpc and the standard log package all reach logrus,
		// before any of them starts.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error { return logging.Setup(logCfg) },
	}
	root.PersistentFlags().StringVar(&logCfg.Level, "log-level", logCfg.Level, "least severe log level shown: debug, info, warn or error")
	root.PersistentFlags().StringVar(&logCfg.Format, "log-format", logCfg.Format, "log format: text, or json (one object per line)")
	root.AddCommand(newAgentCommand(), newDevCommand(), newVersionCommand(), newImageCommand(), newLoggerCommand(), newResetCommand(), newInstallCommand(), newStatusCommand(), newUninstallCommand(), newPlanCommand(), newKubeconfigCommand(), newHostCommand(), newTokenCommand(), newPolicyCommand(), newFleetCommand(), newSnapshotCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
