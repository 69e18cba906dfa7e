package main

import (
	"testing"

	"github.com/spf13/cobra"
)

// TestLoggerArgsInAnyOrder: the shim passes the binary:// log URI's query as arguments in map
// order; whatever the order, `logger` is found and its flags are read.
func TestLoggerArgsInAnyOrder(t *testing.T) {
	for _, args := range [][]string{
		{"logger", "", "--path", "/l/0.log", "--max-size", "1048576", "--max-files", "3"},
		{"--max-files", "3", "--path", "/l/0.log", "logger", "", "--max-size", "1048576"},
		{"--max-size", "1048576", "--max-files", "3", "--path", "/l/0.log", "logger", ""},
	} {
		root := &cobra.Command{Use: "flotilla"}
		root.PersistentFlags().String("log-level", "info", "")
		root.AddCommand(newLoggerCommand())
		cmd, rest, err := root.Find(args)
		if err != nil || cmd.Name() != "logger" {
			t.Fatalf("%q: found %v, %v", args, cmd.Name(), err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		path, _ := cmd.Flags().GetString("path")
		size, _ := cmd.Flags().GetInt64("max-size")
		files, _ := cmd.Flags().GetInt("max-files")
		if path != "/l/0.log" || size != 1<<20 || files != 3 {
			t.Errorf("%q: path %q, max-size %d, max-files %d", args, path, size, files)
		}
	}
}
