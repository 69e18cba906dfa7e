package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/fleet"
	"github.com/flotilla-dev/flotilla/internal/gitremote"
)

type fleetStatusOptions struct {
	output       string
	username     string
	passwordFile string
	sshKey       string
	caFile       string
	insecure     bool
	timeout      time.Duration
}

func newFleetCommand() *cobra.Command { return newFleetCommandAt(time.Now) }

// newFleetCommandAt is newFleetCommand with the clock ages are measured by (tests).
func newFleetCommandAt(now func() time.Time) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Look at many sites through the git repository they deploy from",
	}
	o := fleetStatusOptions{output: "text", timeout: 2 * time.Minute}
	status := &cobra.Command{
		Use:   "status REPO",
		Short: "Show the status every site reported to REPO",
		Long: `status reads the reports the sites' leaders push to the source repository REPO (refs
refs/flotilla/status/<site>, or branches flotilla-status/<site>) and prints one line per site:
the revision it runs and since when, its health (and the revision it rolled back from, why),
its ready hosts and available workloads, and how old its last report is. A site that has not
reported for 3 times the heartbeat period it promised is STALE. Sites that run an older
revision than the newest one a site of the same source and branch reports are listed apart,
under "Still on an older revision:".

REPO is a URL (https://, ssh://, user@host:path, file://) or a directory: a clone (its remote
origin is read) or a repository without an origin (read itself).

A report that cannot be read is a warning naming its ref; the command fails (exit 1) only when
the repository cannot be read.`,
		Example: `  flotilla fleet status https://git.example.com/ops/site.git --username ci --password-file token
  flotilla fleet status git@git.example.com:ops/site.git --ssh-key ~/.ssh/id_ed25519
  flotilla fleet status . --output markdown > comment.md`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFleetStatus(cmd.Context(), args[0], o, now(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := status.Flags()
	f.StringVarP(&o.output, "output", "o", o.output, "output format: text, markdown (for a pull request comment) or json")
	f.StringVar(&o.username, "username", "", "user name for https (default git when --password-file is set: a token works as the password)")
	f.StringVar(&o.passwordFile, "password-file", "", "file holding the https password or token (with --ssh-key: the key's passphrase)")
	f.StringVar(&o.sshKey, "ssh-key", "", "private key file for ssh (the server's host key must be in ~/.ssh/known_hosts or $SSH_KNOWN_HOSTS)")
	f.StringVar(&o.caFile, "ca-file", "", "PEM CA certificates an https server's certificate must chain to (default: the host's roots)")
	f.BoolVar(&o.insecure, "insecure", false, "allow http:// and git:// (unencrypted: anyone on the path can change what is shown)")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "longest the read of the repository may take")
	cmd.AddCommand(status)
	return cmd
}

// runFleetStatus reads the statuses of repo and prints them; the error is a failure to
// read the repository (or bad flags), not a report that could not be read.
func runFleetStatus(ctx context.Context, repo string, o fleetStatusOptions, now time.Time, stdout, stderr io.Writer) error {
	var write func(io.Writer, fleet.Report) error
	switch o.output {
	case "text":
		write = fleet.WriteText
	case "markdown", "md":
		write = fleet.WriteMarkdown
	case "json":
		write = fleet.WriteJSON
	default:
		return fmt.Errorf("--output %q: want text, markdown or json", o.output)
	}
	url, err := fleet.RepoURL(repo)
	if err != nil {
		return err
	}
	remote, err := fleetRemote(url, o)
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	statuses, errs := fleet.Read(ctx, remote)
	var refErrs []error
	for _, err := range errs {
		var re *fleet.RefError
		if !errors.As(err, &re) {
			return fmt.Errorf("read the fleet status from %s: %w", url, err)
		}
		refErrs = append(refErrs, err)
		if o.output == "text" {
			fmt.Fprintln(stderr, "warning:", fleet.Plain(err.Error()))
		}
	}
	return write(stdout, fleet.Summarize(statuses, refErrs, now))
}

// fleetRemote builds the remote and its credentials from the flags. Errors name the flag
// to change.
func fleetRemote(url string, o fleetStatusOptions) (gitremote.Remote, error) {
	r := gitremote.Remote{URL: url, Insecure: o.insecure}
	ep, err := transport.NewEndpoint(url)
	if err != nil {
		return r, fmt.Errorf("REPO %q is neither a directory nor a git URL: %w", url, err)
	}
	creds := o.username != "" || o.passwordFile != "" || o.sshKey != ""
	if scheme := gitremote.InsecureTransport(url); scheme != "" {
		if creds {
			return r, fmt.Errorf("%s: credentials are never sent over %s:// (in the clear): use https:// or ssh://", url, scheme)
		}
		if !o.insecure {
			return r, fmt.Errorf("%s: %s:// reads in the clear, so a network attacker can change what is shown: use https:// or ssh://, or pass --insecure to accept it", url, scheme)
		}
	}
	var password []byte
	if o.passwordFile != "" {
		if password, err = os.ReadFile(o.passwordFile); err != nil {
			return r, fmt.Errorf("--password-file: %w", err)
		}
		password = []byte(strings.TrimRight(string(password), "\r\n"))
	}
	if o.caFile != "" {
		ca, err := os.ReadFile(o.caFile)
		if err != nil {
			return r, fmt.Errorf("--ca-file: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(ca) {
			return r, fmt.Errorf("--ca-file %s: no PEM certificate in it: give the CA certificates the server's certificate chains to", o.caFile)
		}
		r.CABundle = ca
	}
	switch ep.Protocol {
	case "ssh":
		if o.username != "" {
			return r, fmt.Errorf("--username is for https: put the ssh user in the URL (such as git@host:path)")
		}
		if o.sshKey == "" {
			return r, fmt.Errorf("%s is an ssh URL: pass --ssh-key with the private key to read it", url)
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		pk, err := gitssh.NewPublicKeysFromFile(user, o.sshKey, string(password))
		if err != nil {
			return r, fmt.Errorf("--ssh-key %s: not a usable private key (pass --password-file if it is encrypted): %w", o.sshKey, err)
		}
		r.Auth = pk
	case "https":
		if o.sshKey != "" {
			return r, fmt.Errorf("--ssh-key is for ssh URLs; %s is https: use --username and --password-file", url)
		}
		if o.username != "" || o.passwordFile != "" {
			user := o.username
			if user == "" {
				user = "git" // token only: any non-empty user name works with GitHub, GitLab, Gitea
			}
			r.Auth = &githttp.BasicAuth{Username: user, Password: string(password)}
		}
	default:
		if creds {
			return r, fmt.Errorf("%s: credentials are for https:// and ssh:// URLs only: remove --username, --password-file and --ssh-key", url)
		}
	}
	return r, nil
}
