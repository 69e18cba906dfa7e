package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/version"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/nodes/host"
)

// flotillaVersion is stamped by the Makefile (-X main.flotillaVersion=...).
var flotillaVersion = "dev"

func newVersionCommand() *cobra.Command {
	var site bool
	var o siteAdminOptions
	cmd := &cobra.Command{
		Use:   "version [--site (--data-dir DIR | --kubeconfig FILE)]",
		Short: "Print the version of flotilla and of the Kubernetes API it serves; with --site, the version every host of the site runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := version.Get()
			fmt.Fprintf(cmd.OutOrStdout(), "flotilla %s (Kubernetes API %s, %s, %s)\n", flotillaVersion, v.GitVersion, v.GoVersion, v.Platform)
			if !site {
				return nil
			}
			c, err := o.client()
			if err != nil {
				return fmt.Errorf("--site reads the site's Nodes: %w", err)
			}
			return printSiteVersions(cmd.Context(), c, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&site, "site", false, "also list the flotilla version of every host of the site (its Node), as they run it now")
	o.addFlags(cmd)
	return cmd
}

// printSiteVersions lists the hosts, their flotilla and Kubernetes versions and readiness,
// then says whether the site runs one version.
func printSiteVersions(ctx context.Context, c kubernetes.Interface, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the site's Nodes: %w", err)
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tFLOTILLA\tKUBERNETES\tREADY")
	versions := map[string]int{}
	for _, n := range nodes.Items {
		kv := n.Status.NodeInfo.KubeletVersion
		fv := host.FlotillaVersionOf(kv)
		if fv == "" {
			fv = "unknown"
		}
		k8s := kv
		if i := len(kv) - len("+flotilla.") - len(fv); fv != "unknown" && i > 0 {
			k8s = kv[:i]
		}
		versions[fv]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Name, fv, k8s, siteNodeReady(&n))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch len(versions) {
	case 0:
		fmt.Fprintln(out, "the site has no Nodes yet")
	case 1:
		fmt.Fprintf(out, "every host runs the same version\n")
	default:
		fmt.Fprintf(out, "the site runs %d versions: an upgrade is under way, or a host was left behind\n", len(versions))
	}
	return nil
}

func siteNodeReady(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return string(c.Status)
		}
	}
	return "Unknown"
}

// The status documents a site publishes, and the Nodes, name the version that wrote them.
func init() {
	gitsync.Version = flotillaVersion
	host.Version = flotillaVersion
}
