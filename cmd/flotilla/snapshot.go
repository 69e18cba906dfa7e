package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/nodes/snapshot"
)

func newSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back the site up (etcd, site CA, join and admin tokens) to one file, and start a new site from it",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newSnapshotSaveCommand(), newSnapshotRestoreCommand())
	return cmd
}

func newSnapshotSaveCommand() *cobra.Command {
	var dataDir, endpoint, tokenFile string
	cmd := &cobra.Command{
		Use:   "save FILE --data-dir DIR [--token-file FILE]",
		Short: "Save a consistent snapshot of the site to FILE (run as root on a server host whose agent runs)",
		Long: `save takes a consistent etcd snapshot through etcd's client API, with the host's own etcd
client certificate, and writes it to FILE (a gzip-compressed tar, mode 0600, written
atomically) with what a restore needs to keep the site's identity: the site CA (certificate
and key), the join token and the admin token of <data-dir>/kubeconfig. The snapshot's
integrity (its sha256 trailer, the database) is verified before save returns.

FILE holds the CA key: keep it as secret as <data-dir>/pki.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dataDir == "" {
				return errors.New("--data-dir is required: the data directory of this server host's agent")
			}
			var token string
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				token = string(b)
			}
			start := time.Now()
			m, err := snapshot.Save(cmd.Context(), snapshot.SaveOptions{DataDir: dataDir, Out: args[0], Endpoint: endpoint, Token: token, Version: flotillaVersion})
			if err != nil {
				return err
			}
			fi, err := os.Stat(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "saved %s: site %s, etcd revision %d, %d keys, etcd.db %s, file %s, in %s\n",
				args[0], orUnknown(m.Site), m.Revision, m.Keys, sizeOf(m.EtcdSize), sizeOf(fi.Size()), time.Since(start).Round(time.Millisecond))
			fmt.Fprintf(out, "etcd members: %s; nodes: %s\n", strings.Join(m.Members, ", "), strings.Join(m.Nodes, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the agent's data directory on this server host (its etcd client certificate, CA and tokens)")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "the site's join token, when <data-dir>/token is absent (a host that joined: the --token-file its agent was given)")
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "etcd client URL to snapshot (default: this host's etcd member, https://<its address>:2379; give it when the agent runs with another --etcd-client-port)")
	return cmd
}

func newSnapshotRestoreCommand() *cobra.Command {
	var dataDir, name, listen, advertise string
	peerPort := 2380
	cmd := &cobra.Command{
		Use:   "restore FILE --data-dir DIR --name NAME [--listen-address IP]",
		Short: "Prepare an empty data directory so that `flotilla agent` starts a new site from a snapshot",
		Long: `restore prepares DIR (empty or absent) from a snapshot written by snapshot save: etcd's data as
a one-member cluster of this host, and the old site's CA, join token and admin token. Then

  flotilla agent --data-dir DIR --name NAME --listen-address IP ...

(no --join; the same --name, --listen-address, --advertise-address and --etcd-peer-port as
given here) starts a new site with one etcd voter and every object of the old one. Other
hosts join it as usual: --join IP:7946 --token-file DIR/token. The old site's admin
kubeconfig keeps working (same CA, same admin token); change its server: to
https://IP:6443 if the address changed. The old hosts' Nodes stay as objects and go NotReady
until hosts of those names join again; delete the others.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dataDir == "" {
				return errors.New("--data-dir is required: the new host's data directory (empty or absent)")
			}
			if name == "" {
				return errors.New("--name is required: the new host's name, given to its agent as --name")
			}
			peerURL, err := restorePeerURL(listen, advertise, peerPort)
			if err != nil {
				return err
			}
			start := time.Now()
			m, err := snapshot.Restore(snapshot.RestoreOptions{File: args[0], DataDir: dataDir, Name: name, PeerURL: peerURL})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "restored %s (site %s, taken %s on %s, etcd revision %d, %d keys) into %s as host %s (etcd peer %s) in %s\n",
				args[0], orUnknown(m.Site), m.Time.Format(time.RFC3339), orUnknown(m.Host), m.Revision, m.Keys, dataDir, name, peerURL, time.Since(start).Round(time.Millisecond))
			fmt.Fprintf(out, "start it with: flotilla agent --data-dir %s --name %s --listen-address %s (no --join)\n", dataDir, name, listen)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "the new host's data directory: empty or absent")
	f.StringVar(&name, "name", "", "the new host's name (its agent's --name)")
	f.StringVar(&listen, "listen-address", "0.0.0.0", "the IP its agent will be given as --listen-address")
	f.StringVar(&advertise, "advertise-address", "", "the IP its agent will be given as --advertise-address (default: the listen address, or the first non-loopback address)")
	f.IntVar(&peerPort, "etcd-peer-port", peerPort, "its agent's --etcd-peer-port")
	return cmd
}

// restorePeerURL is the etcd peer URL the agent will advertise: on the listen address, or
// the advertise address when it listens on all (as nodes/host does).
func restorePeerURL(listen, advertise string, port int) (string, error) {
	ip := net.ParseIP(listen)
	if ip == nil {
		return "", fmt.Errorf("--listen-address %q is not an IP address", listen)
	}
	if port < 1 || port > 65535 {
		return "", fmt.Errorf("--etcd-peer-port %d is not a port (1-65535)", port)
	}
	host := listen
	if ip.IsUnspecified() {
		if advertise == "" {
			advertise = firstAddress()
		}
		if net.ParseIP(advertise) == nil {
			return "", fmt.Errorf("--advertise-address %q is not an IP address", advertise)
		}
		host = advertise
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// firstAddress is the agent's default advertise address: the first non-loopback IPv4.
func firstAddress() string {
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

func sizeOf(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
