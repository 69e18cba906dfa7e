package main

import (
	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/nodes/runtime"
)

// newLoggerCommand is `flotilla logger`, containerd's binary:// log driver: the shim of every
// container runs it with the container's stdout and stderr on fds 3 and 4, and it appends them to
// --path in CRI log format, rotating it at --max-size bytes and keeping --max-files files (the
// agent's --container-log-max-size and --container-log-max-files). Not for use by hand.
func newLoggerCommand() *cobra.Command {
	var (
		path     string
		maxSize  int64
		maxFiles int
	)
	cmd := &cobra.Command{
		Use:    "logger --path FILE",
		Short:  "containerd log driver: write a container's output to a CRI-format log file (run by the shim)",
		Hidden: true,
		// The shim passes the log URI's query as arguments in map order, with an empty value
		// for "logger": accept and ignore stray arguments.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runtime.RunLogger(path, maxSize, maxFiles)
		},
	}
	cmd.Flags().StringVar(&path, "path", "", "log file to append to")
	cmd.Flags().Int64Var(&maxSize, "max-size", 0, "bytes of the log file before it is rotated (0: never)")
	cmd.Flags().IntVar(&maxFiles, "max-files", 5, "log files kept, the current one included (at least 2)")
	return cmd
}
