package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flotilla-dev/flotilla/reconciler/authz"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// kubeconfigOptions are the flags of `flotilla kubeconfig create`.
type kubeconfigOptions struct {
	dataDir  string
	user     string
	groups   []string
	ttl      time.Duration
	planOnly bool
	server   string
	out      string
	force    bool
}

// defaultKubeconfigTTL is how long a kubeconfig made without --ttl is valid: 30 days.
const defaultKubeconfigTTL = 720 * time.Hour

func newKubeconfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Make kubeconfigs for people and CI jobs, signed by the site's CA",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newKubeconfigCreateCommand())
	return cmd
}

func newKubeconfigCreateCommand() *cobra.Command {
	o := kubeconfigOptions{ttl: defaultKubeconfigTTL}
	cmd := &cobra.Command{
		Use:   "create --data-dir DIR --user NAME [--group G]... [--ttl 720h] [--plan-only] [--server URL] [--out FILE]",
		Short: "Write a kubeconfig with a client certificate for a user, signed by the site's CA",
		Long: `create signs a client certificate for --user (the user name the API sees) with the
--group flags as its groups, and writes a kubeconfig holding it, its key and the site's CA.
It runs on a host of the site, as root: the CA is in <data-dir>/pki. The server is the one of
the host's admin kubeconfig (<data-dir>/kubeconfig) unless --server is given.

What the user may do is what RBAC grants its name and groups. --plan-only adds the group
` + authz.PlannersGroup + `: it may get, list and watch everything, with Secret values
redacted, and write only as a dry-run; what ` + "`flotilla plan --kubeconfig`" + ` needs, no more.

The certificate cannot be revoked before it expires: keep --ttl short, and make a new
kubeconfig when it runs out. The kubeconfig goes to --out (mode 0600; an existing file is
kept unless --force) or to standard output.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runKubeconfigCreate(o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "", "the agent's data directory on this host (its CA is in <data-dir>/pki)")
	f.StringVar(&o.user, "user", "", "user name the API sees (the certificate's common name), e.g. ci-shop-berlin")
	f.StringArrayVar(&o.groups, "group", nil, "group the user is in (the certificate's organization); repeat for more")
	f.DurationVar(&o.ttl, "ttl", o.ttl, "how long the certificate is valid, e.g. 720h (at most until the site's CA expires)")
	f.BoolVar(&o.planOnly, "plan-only", false, "add the group "+authz.PlannersGroup+": read everything (Secret values redacted), write only as a dry-run")
	f.StringVar(&o.server, "server", "", "API server URL (default: the server of <data-dir>/kubeconfig)")
	f.StringVar(&o.out, "out", "", "file to write the kubeconfig to, mode 0600 (default: standard output)")
	f.BoolVar(&o.force, "force", false, "overwrite --out if it exists")
	return cmd
}

// runKubeconfigCreate checks the options, issues the certificate and writes the kubeconfig to
// o.out or stdout; what was written goes to stderr.
func runKubeconfigCreate(o kubeconfigOptions, stdout, stderr io.Writer) error {
	groups, err := o.validate()
	if err != nil {
		return err
	}
	if o.out != "" && !o.force {
		if _, err := os.Lstat(o.out); err == nil {
			return fmt.Errorf("--out %s exists: pass --force to overwrite it, or choose another file", o.out)
		}
	}
	ca, err := pki.LoadCA(filepath.Join(o.dataDir, "pki"))
	if err != nil {
		return fmt.Errorf("%w: run this on a host of the site, as root, with its --data-dir", err)
	}
	server := o.server
	if server == "" {
		if server, err = adminServer(o.dataDir); err != nil {
			return err
		}
	}
	if left := time.Until(ca.Cert.NotAfter); o.ttl > left {
		return fmt.Errorf("--ttl %s: the site's CA expires %s, sooner: use at most --ttl %dh",
			o.ttl, ca.Cert.NotAfter.UTC().Format(time.RFC3339), int64(left/time.Hour))
	}
	certPEM, keyPEM, err := ca.IssueClient(o.user, groups, o.ttl)
	if err != nil {
		return fmt.Errorf("issue the client certificate: %w", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return errors.New("the issued certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("the issued certificate: %w", err)
	}
	data, err := clientcmd.Write(*userKubeconfig(o.user, server, ca.CertPEM, certPEM, keyPEM))
	if err != nil {
		return fmt.Errorf("encode kubeconfig: %w", err)
	}

	dest := "standard output"
	if o.out == "" {
		if _, err := stdout.Write(data); err != nil {
			return err
		}
	} else {
		if err := writeKubeconfigFile(o.out, data, o.force); err != nil {
			return err
		}
		dest = o.out
	}
	groupText := "no groups"
	if len(groups) > 0 {
		groupText = "groups " + strings.Join(groups, ", ")
	}
	fmt.Fprintf(stderr, "wrote a kubeconfig for user %s (%s), server %s, to %s\n", o.user, groupText, server, dest)
	fmt.Fprintf(stderr, "its certificate expires %s (in %s) and cannot be revoked before: keep the file secret\n",
		cert.NotAfter.UTC().Format(time.RFC3339), o.ttl)
	return nil
}

// validate checks the options and returns the certificate's groups: --group in the order
// given, each once, then the planners group with --plan-only.
func (o kubeconfigOptions) validate() ([]string, error) {
	if o.dataDir == "" {
		return nil, errors.New("--data-dir is required: the agent's data directory on this host (e.g. /var/lib/flotilla)")
	}
	user := o.user
	switch {
	case strings.TrimSpace(user) == "":
		return nil, errors.New("--user is required: the user name the API sees, e.g. --user ci-shop-berlin")
	case user != strings.TrimSpace(user):
		return nil, fmt.Errorf("--user %q: remove the leading or trailing spaces", user)
	case strings.HasPrefix(user, "system:"):
		return nil, fmt.Errorf(`--user %q: names starting with "system:" are reserved for the site's components; choose another name`, user)
	}
	if o.ttl <= 0 {
		return nil, fmt.Errorf("--ttl %s: must be positive, e.g. --ttl 720h", o.ttl)
	}
	var groups []string
	for _, g := range o.groups {
		if strings.TrimSpace(g) == "" {
			return nil, errors.New(`--group "": a group name must not be empty; remove the flag or name a group`)
		}
		if g != strings.TrimSpace(g) {
			return nil, fmt.Errorf("--group %q: remove the leading or trailing spaces", g)
		}
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	if o.planOnly && !slices.Contains(groups, authz.PlannersGroup) {
		groups = append(groups, authz.PlannersGroup)
	}
	if o.server != "" {
		u, err := url.Parse(o.server)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("--server %q: want the API's https URL, e.g. https://10.0.0.1:6443", o.server)
		}
	}
	return groups, nil
}

// adminServer is the server URL of the host's admin kubeconfig, <dataDir>/kubeconfig, which
// the agent writes once its API is ready.
func adminServer(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "kubeconfig")
	cfg, err := clientcmd.LoadFromFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no admin kubeconfig %s to take the server URL from (the agent writes it once its API is ready): pass --server https://HOST:PORT, or check --data-dir", path)
	}
	if err != nil {
		return "", fmt.Errorf("read the server URL from %s: %w; pass --server https://HOST:PORT", path, err)
	}
	server := ""
	if ctx, ok := cfg.Contexts[cfg.CurrentContext]; ok {
		if c, ok := cfg.Clusters[ctx.Cluster]; ok {
			server = c.Server
		}
	}
	if server == "" {
		return "", fmt.Errorf("%s names no server in its current context: pass --server https://HOST:PORT", path)
	}
	return server, nil
}

// userKubeconfig is a kubeconfig with one cluster (the site), one user and one context named
// after the user, in namespace default; the CA, certificate and key are embedded.
func userKubeconfig(user, server string, caPEM, certPEM, keyPEM []byte) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	const cluster = "flotilla"
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = user
	return cfg
}

// writeKubeconfigFile writes data to path with mode 0600. Without force an existing path is
// refused, also when it appears while writing; with force it is replaced at once.
func writeKubeconfigFile(path string, data []byte, force bool) error {
	if !force {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("--out %s exists: pass --force to overwrite it, or choose another file", path)
		}
		if err != nil {
			return fmt.Errorf("write kubeconfig: %w", err)
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			os.Remove(path)
			return fmt.Errorf("write kubeconfig %s: %w", path, err)
		}
		return f.Close()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// CreateTemp makes the file 0600.
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}
