package host

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// testCert issues a server certificate for 127.0.0.1 from a new CA; it returns the files
// and a client that trusts the CA.
func testCert(t *testing.T, name string) (certFile, keyFile string, client *http.Client) {
	t.Helper()
	ca, err := pki.LoadOrCreateCA(filepath.Join(t.TempDir(), "pki"), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err = ca.Ensure(pki.Request{Name: name, CommonName: name, Usage: pki.Server, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	return certFile, keyFile, &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func TestConfigCompleteWebhookFlags(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := testCert(t, "webhook")
	empty := filepath.Join(dir, "empty")
	token := filepath.Join(dir, "token")
	for file, content := range map[string]string{empty: " \n", token: "s3cret\n"} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string // empty: no error
	}{
		{"off", func(c *Config) {}, ""},
		{"on", func(c *Config) { c.WebhookPort = 9443 }, ""},
		{"own certificate", func(c *Config) {
			c.WebhookPort, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = 9443, certFile, keyFile
		}, ""},
		{"secret file", func(c *Config) { c.GitURL, c.GitWebhookSecretFile = "https://git.example.com/site.git", token }, ""},
		{"negative port", func(c *Config) { c.WebhookPort = -1 }, "--webhook-port -1 is not a port"},
		{"port out of range", func(c *Config) { c.WebhookPort = 65536 }, "--webhook-port 65536 is not a port"},
		{"port of the API", func(c *Config) { c.WebhookPort = c.APIPort }, "--webhook-port 6443 is also --api-port"},
		{"port of the Ingress proxy", func(c *Config) { c.WebhookPort = 443 }, "is also --ingress-https-port"},
		{"port of the Ingress proxy, without it", func(c *Config) { c.WebhookPort, c.Proxy = 443, false }, ""},
		{"certificate without key", func(c *Config) { c.WebhookPort, c.WebhookTLSCertFile = 9443, certFile }, "--webhook-tls-cert-file and --webhook-tls-key-file go together"},
		{"key without certificate", func(c *Config) { c.WebhookPort, c.WebhookTLSKeyFile = 9443, keyFile }, "--webhook-tls-cert-file and --webhook-tls-key-file go together"},
		{"certificate without port", func(c *Config) { c.WebhookTLSCertFile, c.WebhookTLSKeyFile = certFile, keyFile }, "needs --webhook-port"},
		{"unreadable certificate", func(c *Config) {
			c.WebhookPort, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = 9443, filepath.Join(dir, "missing.crt"), keyFile
		}, "--webhook-tls-cert-file: open"},
		{"unreadable key", func(c *Config) {
			c.WebhookPort, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = 9443, certFile, filepath.Join(dir, "missing.key")
		}, "--webhook-tls-key-file: open"},
		{"key of another certificate", func(c *Config) { c.WebhookPort, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = 9443, certFile, token },
			"--webhook-tls-cert-file " + certFile + " and --webhook-tls-key-file " + token},
		{"secret file without --git-url", func(c *Config) { c.GitWebhookSecretFile = token }, "--git-webhook-secret-file needs --git-url"},
		{"empty secret file", func(c *Config) { c.GitURL, c.GitWebhookSecretFile = "file:///repo", empty }, "--git-webhook-secret-file " + empty + " is empty"},
		{"unreadable secret file", func(c *Config) { c.GitURL, c.GitWebhookSecretFile = "file:///repo", filepath.Join(dir, "nope") }, "--git-webhook-secret-file: open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.DataDir, c.Name = t.TempDir(), "host-1"
			tc.change(&c)
			_, err := c.Complete()
			if tc.want == "" && err != nil {
				t.Fatalf("Complete() = %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Complete() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if b, err := readWebhookToken(token); err != nil || string(b) != "s3cret" {
		t.Errorf("token %q %v: the final newline is not part of it", b, err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestWebhookListener: the listener serves the hook below /hooks/git/ only, with the API's
// certificate or its own, and stops with the host.
func TestWebhookListener(t *testing.T) {
	apiCert, apiKey, apiClient := testCert(t, "apiserver")
	ownCert, ownKey, ownClient := testCert(t, "webhook")
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hook "+r.URL.Path) })
	for _, tc := range []struct {
		name              string
		certFile, keyFile string
		client, other     *http.Client
	}{
		{"API certificate", "", "", apiClient, ownClient},
		{"own certificate", ownCert, ownKey, ownClient, apiClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := DefaultConfig()
			c.ListenAddress, c.WebhookPort, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = "127.0.0.1", freePort(t), tc.certFile, tc.keyFile
			h := &Host{cfg: c, runCtx: ctx, log: logrus.WithField("test", t.Name())}
			h.certs.apiCert, h.certs.apiKey = apiCert, apiKey
			if err := h.startWebhook(hook); err != nil {
				t.Fatal(err)
			}
			base := "https://127.0.0.1:" + strconv.Itoa(c.WebhookPort)
			get := func(path string) (int, string) {
				t.Helper()
				resp, err := tc.client.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.ProtoMajor != 1 {
					t.Errorf("%s: %s, want HTTP/1.1", path, resp.Proto)
				}
				return resp.StatusCode, string(b)
			}
			if code, body := get("/hooks/git/default/apps"); code != http.StatusOK || body != "hook /hooks/git/default/apps" {
				t.Errorf("webhook path: %d %q", code, body)
			}
			for _, p := range []string{"/", "/readyz", "/api/v1/secrets", "/hooks/git", "/flotilla/v1/join"} {
				if code, _ := get(p); code != http.StatusNotFound {
					t.Errorf("%s: %d, want 404", p, code)
				}
			}
			if _, err := tc.other.Get(base + "/hooks/git/default/apps"); err == nil {
				t.Error("served a certificate of the other CA")
			}

			h2 := &Host{cfg: c, runCtx: ctx, log: h.log}
			h2.certs = h.certs
			if err := h2.startWebhook(hook); err == nil || !strings.Contains(err.Error(), "--webhook-port "+strconv.Itoa(c.WebhookPort)) {
				t.Errorf("a second listener on the port: %v", err)
			}

			cancel()
			deadline := time.Now().Add(5 * time.Second)
			for {
				conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.WebhookPort)), time.Second)
				if err != nil {
					break
				}
				conn.Close()
				if time.Now().After(deadline) {
					t.Fatal("the listener still accepts after the host stopped")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

func TestWebhookServerLimits(t *testing.T) {
	srv := newWebhookServer(http.NotFoundHandler(), nil, nil)
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Errorf("timeouts: %+v", srv)
	}
	if srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 64<<10 {
		t.Errorf("MaxHeaderBytes %d", srv.MaxHeaderBytes)
	}
}

// TestCertReloader: a renewed certificate is served without a restart; a pair that does not
// load yet keeps the previous one.
func TestCertReloader(t *testing.T) {
	certFile, keyFile, _ := testCert(t, "one")
	otherCert, otherKey, _ := testCert(t, "two")
	r, err := newCertReloader(certFile, keyFile, true, logrus.WithField("test", t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := r.getCertificate(nil)
	copyFile := func(from, to string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(time.Hour)
	// Half a renewal: the certificate is new, the key is not.
	copyFile(otherCert, certFile)
	_ = os.Chtimes(certFile, later, later)
	r.checked = time.Time{}
	if got, _ := r.getCertificate(nil); got != first {
		t.Error("a certificate without its key replaced the served one")
	}
	copyFile(otherKey, keyFile)
	_ = os.Chtimes(keyFile, later, later)
	r.checked = time.Time{}
	got, _ := r.getCertificate(nil)
	if got == first {
		t.Fatal("the renewed certificate is not served")
	}
	leaf, err := x509.ParseCertificate(got.Certificate[0])
	if err != nil || leaf.Subject.CommonName != "two" {
		t.Errorf("serving %v, want the renewed certificate", leaf.Subject)
	}
}
