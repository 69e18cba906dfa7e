package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/renameio/v2"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/nodes/host"
	"github.com/flotilla-dev/flotilla/nodes/membership"
	"github.com/flotilla-dev/flotilla/reconciler/etcd"
	"github.com/flotilla-dev/flotilla/reconciler/hostaccess"
)

// siteAdminOptions reach the site's API as an administrator: --kubeconfig, or the admin
// kubeconfig of a server host's --data-dir.
type siteAdminOptions struct {
	dataDir, kubeconfig string
}

func (o *siteAdminOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.dataDir, "data-dir", "", "the agent's data directory on this server host (its admin kubeconfig is <data-dir>/kubeconfig)")
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of a site administrator (default: <data-dir>/kubeconfig)")
}

func (o *siteAdminOptions) client() (kubernetes.Interface, error) {
	path := o.kubeconfig
	if path == "" {
		if o.dataDir == "" {
			return nil, errors.New("set --data-dir (a server host's data directory) or --kubeconfig (a site administrator's)")
		}
		path = filepath.Join(o.dataDir, "kubeconfig")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return kubernetes.NewForConfig(cfg)
}

func newHostCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "host", Short: "Manage the site's hosts", Args: cobra.NoArgs}
	cmd.AddCommand(newHostRemoveCommand())
	return cmd
}

func newHostRemoveCommand() *cobra.Command {
	var o siteAdminOptions
	var force bool
	cmd := &cobra.Command{
		Use:   "remove NAME (--data-dir DIR | --kubeconfig FILE) [--force]",
		Short: "Remove a host from the site: its certificates are refused at once and it cannot join again with the current token",
		Long: `remove cuts a host off the site, e.g. a stolen or retired box:

  - every API server refuses its client certificates issued until now (401), within a
    watch's delay;
  - gossip ignores it, and the etcd leader removes its etcd membership if it had one;
  - its Node is deleted, so its pods are recreated on other hosts;
  - its join is refused until the site's join token changes (flotilla token rotate): a
    stolen box that kept the token cannot come back.

A server host (one that serves the API and may hold etcd) holds the site's CA key: removing
it needs --force, and what it held stays known to whoever has the box.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runHostRemove(cmd.Context(), o, args[0], force, cmd.OutOrStdout())
		},
	}
	o.addFlags(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "remove a server host too (it holds the site CA key and may be an etcd voter)")
	return cmd
}

func runHostRemove(ctx context.Context, o siteAdminOptions, name string, force bool, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	node, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if !force {
			return fmt.Errorf("no Node %s: check the name (kubectl get nodes), or pass --force to refuse that host's certificates and joins anyway", name)
		}
		node = nil
	case err != nil:
		return fmt.Errorf("get Node %s: %w", name, err)
	}
	if node != nil && !force {
		if node.Labels[host.ControlPlaneLabel] == "true" {
			return fmt.Errorf("%s serves the API: it holds the site CA key and may be an etcd voter; removing it takes its etcd seat and cannot take back what it holds. Pass --force to remove it anyway", name)
		}
	}
	rev, err := hostaccess.Revoke(ctx, c, name, time.Now())
	if err != nil {
		return fmt.Errorf("record %s as removed: %w", name, err)
	}
	if node != nil {
		if err := c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s is removed (its certificates are refused) but deleting its Node failed: %w; delete it with kubectl delete node %s", name, err, name)
		}
	}
	fmt.Fprintf(out, "host %s removed: its certificates issued before %s are refused, gossip ignores it and its Node is deleted.\n", name, rev.RevokedAt.Format(time.RFC3339))
	fmt.Fprintf(out, "It cannot join again with the current join token; to let it (or a host of that name) join, run flotilla token rotate and use the new token.\n")
	return nil
}

func newTokenCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Manage the site's join token", Args: cobra.NoArgs}
	cmd.AddCommand(newTokenRotateCommand())
	return cmd
}

func newTokenRotateCommand() *cobra.Command {
	var o siteAdminOptions
	cmd := &cobra.Command{
		Use:   "rotate --data-dir DIR [--kubeconfig FILE]",
		Short: "Issue a new join token: the old one stops admitting hosts",
		Long: `rotate makes a new join token, records its hash in the site (Secret
kube-system/flotilla-join-token) so every server admits it and no longer the old one,
writes it to <data-dir>/token and prints it. Hosts already in the site are not affected:
they keep their certificates, and a host started again with the old --token-file still
gossips (the new token carries the site's gossip key). Hosts removed with flotilla host
remove may join again with the new token. Run it on a server host, as root.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTokenRotate(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	o.addFlags(cmd)
	return cmd
}

func runTokenRotate(ctx context.Context, o siteAdminOptions, stdout, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.dataDir == "" {
		return errors.New("--data-dir is required: the data directory of a server host (its token is <data-dir>/token)")
	}
	path := filepath.Join(o.dataDir, "token")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: run this on a server host of the site, as root, with its --data-dir", err)
	}
	old, err := etcd.ParseToken(string(b))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if old.CAPin == "" {
		return fmt.Errorf("%s holds a token without the site CA's pin: this is not a server's data directory", path)
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return err
	}
	next := etcd.Token{CAPin: old.CAPin, Secret: hex.EncodeToString(buf), GossipKey: old.GossipKey}
	if next.GossipKey == nil {
		next.GossipKey = membership.GossipKey(old.Secret)
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	gen, err := hostaccess.RotateToken(ctx, c, next.Secret)
	if err != nil {
		return fmt.Errorf("record the new token in the site: %w (the old token still admits hosts)", err)
	}
	if err := renameio.WriteFile(path, []byte(next.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("the new token is in force but writing it to %s failed (%w): it is %s", path, err, next.String())
	}
	fmt.Fprintln(stdout, next.String())
	fmt.Fprintf(stderr, "join token rotated (generation %d) and written to %s; the previous token no longer admits hosts\n", gen, path)
	return nil
}
