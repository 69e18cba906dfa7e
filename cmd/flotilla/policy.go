package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/policies"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
)

func newPolicyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with ValidatingAdmissionPolicies offline",
	}
	cmd.AddCommand(newPolicyTestCommand())
	return cmd
}

func newPolicyTestCommand() *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "test DIR",
		Short: "Check that ValidatingAdmissionPolicies admit and refuse the objects of their fixtures",
		Long: `test evaluates fixtures against ValidatingAdmissionPolicies without a cluster, with the
API server's own admission plugin (the same CEL environment, matching, params, failure
policies and messages as flotilla's API).

Every directory under DIR (DIR included) with an allowed/ or denied/ subdirectory is a test.
Its policies and context are the YAML files directly in it and in its parent directories up to
DIR (not those of sibling directories): ValidatingAdmissionPolicies, their bindings, params
(e.g. ConfigMaps), Namespaces (with their labels), CustomResourceDefinitions (for the kinds
of custom resources). Every object of every file in allowed/ must be admitted, every object in
denied/ refused; a denied object may carry the annotation
policies.flotilla.dev/expect-message: "<substring>", which the error must contain.

Objects are evaluated as gitsync applies them: created by
system:controller:gitsync, defaulted as the API defaults them, in
namespace "default" when a namespaced object has none. A namespace that is not among the
context objects exists with only its kubernetes.io/metadata.name label. The authorizer
variable of the expressions allows everything.

The output follows go test: failures (and with -v every fixture), then "ok" or "FAIL" with DIR.
Exit status 1 when a fixture fails or a policy does not load (a file that does not decode, an
expression with a syntax or type error, named with its file and policy).`,
		Example: `  flotilla policy test policies/library
  flotilla policy test -v ./site/policies`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("log-level") {
				// The plugin logs its informers' progress at info: not what a test run is for.
				logrus.SetLevel(logrus.WarnLevel)
			}
			ok, err := runPolicyTest(cmd.Context(), args[0], verbose, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if !ok {
				// The failures are printed; main would add "error: ..." to them.
				os.Exit(1)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print every fixture as it runs and passes, not only failures")
	return cmd
}

// runPolicyTest runs the tests of dir, printing go test's output to w, and reports whether
// all passed. The error is for a dir that cannot be tested: missing, or without any test.
func runPolicyTest(ctx context.Context, dir string, verbose bool, w io.Writer) (bool, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	start := time.Now()
	dir = filepath.Clean(dir)
	if st, err := os.Stat(dir); err != nil {
		return false, err
	} else if !st.IsDir() {
		return false, fmt.Errorf("%s is not a directory: give the directory of the policy tests", dir)
	}
	fsys := os.DirFS(dir)
	suites, err := policies.FindSuites(fsys)
	if err != nil {
		return false, fmt.Errorf("%s: %w", dir, err)
	}
	mapper := apiserver.OfflineRESTMapper()
	ok := true
	for _, s := range suites {
		suiteStart := time.Now()
		err := s.Run(ctx, fsys, mapper, func(r policies.FixtureResult) {
			if verbose {
				fmt.Fprintf(w, "=== RUN   %s\n", r.Name)
			}
			if len(r.Failures) == 0 {
				if verbose {
					fmt.Fprintf(w, "--- PASS: %s (%.2fs)\n", r.Name, r.Elapsed.Seconds())
				}
				return
			}
			ok = false
			fmt.Fprintf(w, "--- FAIL: %s (%.2fs)\n", r.Name, r.Elapsed.Seconds())
			for _, f := range r.Failures {
				fmt.Fprintf(w, "    %s\n", indent(f))
			}
		})
		if err != nil {
			// The suite's policies or context do not load: none of its fixtures ran.
			ok = false
			fmt.Fprintf(w, "--- FAIL: %s (%.2fs)\n", s.Dir, time.Since(suiteStart).Seconds())
			fmt.Fprintf(w, "    %s\n", indent(err.Error()))
		}
	}
	status := "ok  "
	if !ok {
		status = "FAIL"
	}
	fmt.Fprintf(w, "%s\t%s\t%.2fs\n", status, filepath.ToSlash(dir), time.Since(start).Seconds())
	return ok, nil
}

// indent indents the continuation lines of a multi-line message as its first line is.
func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
