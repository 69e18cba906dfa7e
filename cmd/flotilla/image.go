package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/nodes/runtime"
)

// newImageCommand is `flotilla image`: build images from static binaries and side-load them into
// a host's containerd (no registry needed).
func newImageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Pack static binaries into OCI images and import image tarballs into a host's containerd",
	}
	cmd.AddCommand(newImagePackCommand(), newImageImportCommand(), newImageListCommand())
	return cmd
}

func newImagePackCommand() *cobra.Command {
	var opts runtime.PackOptions
	var out string
	cmd := &cobra.Command{
		Use:   "pack --binary FILE --name NAME:TAG [--entrypoint /app] -o FILE.tar",
		Short: "Pack a static binary into a one-layer image tarball",
		Example: `  CGO_ENABLED=0 go build -o bin/hello ./examples/images/hello
  flotilla image pack --binary bin/hello --name flotilla.local/hello:latest -o bin/images/hello.tar`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Binary == "" || opts.Name == "" || out == "" {
				return errors.New("image pack needs --binary, --name and -o")
			}
			if err := runtime.PackImage(opts, out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "packed %s as %s\n", opts.Name, out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Binary, "binary", "", "static executable to put in the image (build it with CGO_ENABLED=0)")
	f.StringVar(&opts.Name, "name", "", "image reference, e.g. flotilla.local/hello:latest")
	f.StringVar(&opts.Entrypoint, "entrypoint", "/app", "path of the binary inside the image; the image's entrypoint")
	f.StringArrayVar(&opts.Env, "env", nil, "KEY=VALUE added to the image's environment (repeatable)")
	f.StringVarP(&out, "output", "o", "", "tarball to write")
	return cmd
}

// hostSocket is the containerd socket of a host: --socket, or the one the agent runs under --data-dir.
func hostSocket(dataDir, socket string) (string, error) {
	switch {
	case socket != "" && dataDir != "":
		return "", errors.New("set either --data-dir or --socket, not both")
	case socket != "":
		return socket, nil
	case dataDir != "":
		return runtime.SocketPath(filepath.Join(dataDir, "containerd")), nil
	}
	return "", errors.New("set --data-dir (the agent's data directory) or --socket (a containerd socket)")
}

func connectRuntime(ctx context.Context, dataDir, socket string) (*runtime.Runtime, error) {
	s, err := hostSocket(dataDir, socket)
	if err != nil {
		return nil, err
	}
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	rt, err := runtime.Start(ctx, runtime.Config{Socket: s, Log: logrus.NewEntry(log)})
	if err != nil {
		return nil, fmt.Errorf("%w (is `flotilla agent` running on this host?)", err)
	}
	return rt, nil
}

func newImageImportCommand() *cobra.Command {
	var dataDir, socket string
	cmd := &cobra.Command{
		Use:   "import FILE.tar... [--data-dir DIR | --socket S]",
		Short: "Import OCI-layout or docker-save image tarballs into a host's containerd (namespace flotilla)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Minute)
			defer cancel()
			rt, err := connectRuntime(ctx, dataDir, socket)
			if err != nil {
				return err
			}
			defer rt.Close()
			for _, a := range args {
				names, err := rt.ImportImage(ctx, a)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "imported %s: %s\n", a, strings.Join(names, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the agent's --data-dir (its containerd socket is <data-dir>/containerd/containerd.sock)")
	cmd.Flags().StringVar(&socket, "socket", "", "a containerd socket to import into instead")
	return cmd
}

func newImageListCommand() *cobra.Command {
	var dataDir, socket string
	cmd := &cobra.Command{
		Use:     "list [--data-dir DIR | --socket S]",
		Aliases: []string{"ls"},
		Short:   "List the images in a host's containerd",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			rt, err := connectRuntime(ctx, dataDir, socket)
			if err != nil {
				return err
			}
			defer rt.Close()
			imgs, err := rt.ListImages(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tSIZE")
			for _, im := range imgs {
				for _, n := range im.Names {
					fmt.Fprintf(tw, "%s\t%s\t%d\n", n, strings.TrimPrefix(im.ID, "sha256:")[:12], im.Size)
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the agent's --data-dir")
	cmd.Flags().StringVar(&socket, "socket", "", "a containerd socket instead")
	return cmd
}
