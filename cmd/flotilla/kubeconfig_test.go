package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flotilla-dev/flotilla/reconciler/authz"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

const testAdminServer = "https://10.0.0.1:6443"

// kubeconfigTestHost is a data directory as a host leaves it: the site CA in pki/ and the
// admin kubeconfig naming the server.
func kubeconfigTestHost(t *testing.T) (dataDir string, ca *pki.CA) {
	t.Helper()
	dataDir = t.TempDir()
	ca, err := pki.LoadOrCreateCA(filepath.Join(dataDir, "pki"), "flotilla-ca")
	if err != nil {
		t.Fatal(err)
	}
	admin := clientcmdapi.NewConfig()
	admin.Clusters["flotilla"] = &clientcmdapi.Cluster{Server: testAdminServer, CertificateAuthorityData: ca.CertPEM}
	admin.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "secret"}
	admin.Contexts["flotilla"] = &clientcmdapi.Context{Cluster: "flotilla", AuthInfo: "admin"}
	admin.CurrentContext = "flotilla"
	if err := clientcmd.WriteToFile(*admin, filepath.Join(dataDir, "kubeconfig")); err != nil {
		t.Fatal(err)
	}
	return dataDir, ca
}

// runKubeconfigCLI runs `flotilla kubeconfig create` with args, as the binary parses them.
func runKubeconfigCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newKubeconfigCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(append([]string{"create"}, args...))
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

// kubeconfigCert returns the user's certificate of a kubeconfig, checking that the current
// context names the user, namespace default, the server and the CA.
func kubeconfigCert(t *testing.T, data []byte, user, server string, ca *pki.CA) *x509.Certificate {
	t.Helper()
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatalf("load kubeconfig: %v\n%s", err, data)
	}
	if cfg.CurrentContext != user {
		t.Errorf("current context %q, want %q", cfg.CurrentContext, user)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		t.Fatalf("no context %q", cfg.CurrentContext)
	}
	if ctx.Namespace != "default" || ctx.AuthInfo != user {
		t.Errorf("context %+v: want namespace default, user %s", ctx, user)
	}
	cluster := cfg.Clusters[ctx.Cluster]
	if cluster == nil || cluster.Server != server || !ca.SameCA(cluster.CertificateAuthorityData) {
		t.Fatalf("cluster %+v: want server %s and the site's CA embedded", cluster, server)
	}
	auth := cfg.AuthInfos[ctx.AuthInfo]
	if auth == nil || auth.Token != "" {
		t.Fatalf("user %+v: want a client certificate, no token", auth)
	}
	if _, err := tls.X509KeyPair(auth.ClientCertificateData, auth.ClientKeyData); err != nil {
		t.Fatalf("certificate and key do not form a pair: %v", err)
	}
	block, _ := pem.Decode(auth.ClientCertificateData)
	if block == nil {
		t.Fatal("client certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cluster.CertificateAuthorityData)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate does not verify against the embedded CA: %v", err)
	}
	return cert
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// A plan-only kubeconfig written to a file: mode 0600, the server of the admin kubeconfig, a
// certificate for the user in its groups and flotilla:planners, valid for --ttl.
func TestKubeconfigCreateFile(t *testing.T) {
	dataDir, ca := kubeconfigTestHost(t)
	out := filepath.Join(t.TempDir(), "shop-berlin.kubeconfig")
	before := time.Now()
	stdout, stderr, err := runKubeconfigCLI(t, "--data-dir", dataDir, "--user", "ci-shop-berlin", "--plan-only",
		"--group", "team-a", "--group", "team-a", "--ttl", "2160h", "--out", out)
	if err != nil {
		t.Fatal(err)
	}
	if stdout != "" {
		t.Errorf("stdout with --out: %q", stdout)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	cert := kubeconfigCert(t, data, "ci-shop-berlin", testAdminServer, ca)
	if cert.Subject.CommonName != "ci-shop-berlin" {
		t.Errorf("common name %q", cert.Subject.CommonName)
	}
	if got, want := sortedCopy(cert.Subject.Organization), sortedCopy([]string{"team-a", authz.PlannersGroup}); !slices.Equal(got, want) {
		t.Errorf("organizations %v, want %v", got, want)
	}
	if d := cert.NotAfter.Sub(before.Add(2160 * time.Hour)); d < -time.Second || d > 5*time.Second {
		t.Errorf("expires %s, want 2160h after %s", cert.NotAfter, before)
	}
	expiry := cert.NotAfter.UTC().Format(time.RFC3339)
	for _, want := range []string{"ci-shop-berlin", out, authz.PlannersGroup, testAdminServer, "expires " + expiry} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	// An existing file is kept unless --force.
	_, _, err = runKubeconfigCLI(t, "--data-dir", dataDir, "--user", "someone-else", "--out", out)
	if err == nil || !strings.Contains(err.Error(), "exists: pass --force") {
		t.Errorf("overwrite without --force: %v", err)
	}
	if again, _ := os.ReadFile(out); !bytes.Equal(again, data) {
		t.Error("a refused overwrite changed the file")
	}
	if _, _, err := runKubeconfigCLI(t, "--data-dir", dataDir, "--user", "someone-else", "--out", out, "--force"); err != nil {
		t.Fatalf("--force: %v", err)
	}
	data, _ = os.ReadFile(out)
	if cert := kubeconfigCert(t, data, "someone-else", testAdminServer, ca); cert.Subject.CommonName != "someone-else" || len(cert.Subject.Organization) != 0 {
		t.Errorf("after --force: subject %v", cert.Subject)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after --force %v, want 0600", fi.Mode().Perm())
	}
}

// Without --out the kubeconfig goes to stdout, the note to stderr; --server replaces the
// admin kubeconfig's server, which is then not needed.
func TestKubeconfigCreateStdout(t *testing.T) {
	dataDir, ca := kubeconfigTestHost(t)
	if err := os.Remove(filepath.Join(dataDir, "kubeconfig")); err != nil {
		t.Fatal(err)
	}
	_, _, err := runKubeconfigCLI(t, "--data-dir", dataDir, "--user", "jane")
	if err == nil || !strings.Contains(err.Error(), "pass --server") {
		t.Errorf("no admin kubeconfig and no --server: %v", err)
	}
	stdout, stderr, err := runKubeconfigCLI(t, "--data-dir", dataDir, "--user", "jane", "--group", "ops", "--server", "https://site.example:6443")
	if err != nil {
		t.Fatal(err)
	}
	cert := kubeconfigCert(t, []byte(stdout), "jane", "https://site.example:6443", ca)
	if cert.Subject.CommonName != "jane" || !slices.Equal(cert.Subject.Organization, []string{"ops"}) {
		t.Errorf("subject %v", cert.Subject)
	}
	if d := time.Until(cert.NotAfter) - 720*time.Hour; d < -time.Minute || d > time.Minute {
		t.Errorf("default validity ends %s, want 720h from now", cert.NotAfter)
	}
	if !strings.Contains(stderr, "standard output") || strings.Contains(stderr, "BEGIN") {
		t.Errorf("stderr: %q", stderr)
	}
}

func TestKubeconfigCreateRefuses(t *testing.T) {
	dataDir, _ := kubeconfigTestHost(t)
	empty := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no data dir", []string{"--user", "jane"}, "--data-dir is required"},
		{"no user", []string{"--data-dir", dataDir}, "--user is required"},
		{"blank user", []string{"--data-dir", dataDir, "--user", "  "}, "--user is required"},
		{"system user", []string{"--data-dir", dataDir, "--user", "system:admin"}, `names starting with "system:" are reserved for the site's components`},
		{"zero ttl", []string{"--data-dir", dataDir, "--user", "jane", "--ttl", "0s"}, "--ttl 0s: must be positive"},
		{"negative ttl", []string{"--data-dir", dataDir, "--user", "jane", "--ttl", "-1h"}, "--ttl -1h0m0s: must be positive"},
		{"ttl past the CA", []string{"--data-dir", dataDir, "--user", "jane", "--ttl", "100000h"}, "the site's CA expires"},
		{"empty group", []string{"--data-dir", dataDir, "--user", "jane", "--group", ""}, "a group name must not be empty"},
		{"bad server", []string{"--data-dir", dataDir, "--user", "jane", "--server", "10.0.0.1:6443"}, "want the API's https URL"},
		{"no CA", []string{"--data-dir", empty, "--user", "jane"},
			"no site CA in " + filepath.Join(empty, "pki") + " (ca.crt, ca.key): run this on a host of the site, as root, with its --data-dir"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, _, err := runKubeconfigCLI(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			if stdout != "" {
				t.Errorf("a refused request wrote %q", stdout)
			}
		})
	}
}
