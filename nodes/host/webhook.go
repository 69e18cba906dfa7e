package host

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/gitsync"
)

// Timeouts and limits of the webhook listener. A delivery is small (gitsync.MaxHookBody) and
// its handler bounds its own API requests, so a client slower than these is not a git server.
const (
	webhookReadHeaderTimeout = 10 * time.Second
	webhookReadTimeout       = 30 * time.Second
	webhookWriteTimeout      = 30 * time.Second
	webhookIdleTimeout       = 60 * time.Second
	webhookMaxHeaderBytes    = 16 << 10
	// certCheckInterval is how often the listener looks for a renewed certificate.
	certCheckInterval = time.Minute
)

// completeWebhook checks the webhook flags: --webhook-port, --webhook-tls-cert-file,
// --webhook-tls-key-file and --git-webhook-secret-file.
func (c *Config) completeWebhook() error {
	if c.WebhookPort < 0 || c.WebhookPort > 65535 {
		return fmt.Errorf("--webhook-port %d is not a port (1-65535, typically 9443; 0 turns the webhook listener off)", c.WebhookPort)
	}
	if c.WebhookPort != 0 {
		others := []struct {
			flag string
			port int
		}{{"--api-port", c.APIPort}, {"--etcd-client-port", c.EtcdClientPort}, {"--etcd-peer-port", c.EtcdPeerPort}, {"--gossip-port", c.GossipPort}}
		if c.Pods {
			others = append(others, struct {
				flag string
				port int
			}{"--agent-port", c.AgentPort})
		}
		if c.Proxy {
			others = append(others, struct {
				flag string
				port int
			}{"--ingress-http-port", c.IngressHTTPPort}, struct {
				flag string
				port int
			}{"--ingress-https-port", c.IngressHTTPSPort})
		}
		for _, o := range others {
			if o.port == c.WebhookPort {
				return fmt.Errorf("--webhook-port %d is also %s: give the webhook listener a port of its own (typically 9443)", c.WebhookPort, o.flag)
			}
		}
	}
	if (c.WebhookTLSCertFile == "") != (c.WebhookTLSKeyFile == "") {
		return errors.New("--webhook-tls-cert-file and --webhook-tls-key-file go together: give both, or neither to serve the API's certificate")
	}
	if c.WebhookTLSCertFile != "" {
		if c.WebhookPort == 0 {
			return errors.New("--webhook-tls-cert-file is the webhook listener's certificate: it needs --webhook-port (typically 9443)")
		}
		if _, err := loadWebhookCert(c.WebhookTLSCertFile, c.WebhookTLSKeyFile, true); err != nil {
			return err
		}
	}
	if c.GitWebhookSecretFile != "" {
		if c.GitURL == "" {
			return errors.New("--git-webhook-secret-file needs --git-url: the token is that of GitSource kube-system/root")
		}
		if _, err := readWebhookToken(c.GitWebhookSecretFile); err != nil {
			return err
		}
	}
	return nil
}

// readWebhookToken reads --git-webhook-secret-file; surrounding white space (a final
// newline) is not part of the token.
func readWebhookToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--git-webhook-secret-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return nil, fmt.Errorf("--git-webhook-secret-file %s is empty: write into it the secret given to the git server for the webhook", path)
	}
	return []byte(token), nil
}

// loadWebhookCert loads the listener's certificate; flags says whether the files are the
// --webhook-tls-* flags' (else the API's serving certificate), for the errors.
func loadWebhookCert(certFile, keyFile string, flags bool) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		if flags {
			return nil, fmt.Errorf("--webhook-tls-cert-file: %w", err)
		}
		return nil, fmt.Errorf("webhook listener: the API serving certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		if flags {
			return nil, fmt.Errorf("--webhook-tls-key-file: %w", err)
		}
		return nil, fmt.Errorf("webhook listener: the API serving key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if flags {
			return nil, fmt.Errorf("--webhook-tls-cert-file %s and --webhook-tls-key-file %s: %w (give the PEM certificate chain and its private key)", certFile, keyFile, err)
		}
		return nil, fmt.Errorf("webhook listener: the API serving certificate: %w", err)
	}
	return &cert, nil
}

// certReloader serves a certificate from files and loads them again when they change, so
// that a renewed certificate (a publicly trusted one lives 90 days or less) is served
// without a restart. A pair that does not load keeps the previous one.
type certReloader struct {
	certFile, keyFile string
	flags             bool
	log               *logrus.Entry

	mu               sync.Mutex
	cert             *tls.Certificate
	certMod, keyMod  time.Time
	checked          time.Time
	lastReloadFailed bool
}

func newCertReloader(certFile, keyFile string, flags bool, log *logrus.Entry) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, flags: flags, log: log}
	r.certMod, r.keyMod = modTime(certFile), modTime(keyFile)
	cert, err := loadWebhookCert(certFile, keyFile, flags)
	if err != nil {
		return nil, err
	}
	r.cert, r.checked = cert, time.Now()
	return r, nil
}

func modTime(path string) time.Time {
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// getCertificate is tls.Config.GetCertificate.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < certCheckInterval {
		return r.cert, nil
	}
	r.checked = time.Now()
	certMod, keyMod := modTime(r.certFile), modTime(r.keyFile)
	if certMod.Equal(r.certMod) && keyMod.Equal(r.keyMod) {
		return r.cert, nil
	}
	cert, err := loadWebhookCert(r.certFile, r.keyFile, r.flags)
	if err != nil {
		// Half-way through a renewal the pair may not match yet: try again at the next check.
		if !r.lastReloadFailed {
			r.log.WithError(err).Warn("webhook listener: the changed certificate does not load; serving the previous one")
		}
		r.lastReloadFailed = true
		return r.cert, nil
	}
	r.cert, r.certMod, r.keyMod, r.lastReloadFailed = cert, certMod, keyMod, false
	r.log.WithField("cert", r.certFile).Info("webhook listener: certificate reloaded")
	return r.cert, nil
}

// onlyHooks serves hook below gitsync.WebhookPathPrefix and 404 elsewhere.
func onlyHooks(hook http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, gitsync.WebhookPathPrefix) {
			http.NotFound(w, r)
			return
		}
		hook.ServeHTTP(w, r)
	})
}

// newWebhookServer is the webhook listener's server: only the webhook, tight timeouts,
// small headers, HTTP/1.1 (what git servers send webhooks with; a refused request then
// closes its connection rather than having its body drained).
func newWebhookServer(hook http.Handler, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), errorLog *stdlog.Logger) *http.Server {
	return &http.Server{
		Handler:           onlyHooks(hook),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert},
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: webhookReadHeaderTimeout,
		ReadTimeout:       webhookReadTimeout,
		WriteTimeout:      webhookWriteTimeout,
		IdleTimeout:       webhookIdleTimeout,
		MaxHeaderBytes:    webhookMaxHeaderBytes,
		ErrorLog:          errorLog,
	}
}

// startWebhook serves hook on --listen-address:--webhook-port (when set) with TLS, until the
// host stops. The port is meant to be what the git server reaches, instead of the API port.
func (h *Host) startWebhook(hook http.Handler) error {
	c := h.cfg
	if c.WebhookPort == 0 {
		return nil
	}
	log := h.log.WithField("component", "git-webhook")
	certFile, keyFile, flags := h.certs.apiCert, h.certs.apiKey, false
	if c.WebhookTLSCertFile != "" {
		certFile, keyFile, flags = c.WebhookTLSCertFile, c.WebhookTLSKeyFile, true
	}
	certs, err := newCertReloader(certFile, keyFile, flags, log)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(c.ListenAddress, strconv.Itoa(c.WebhookPort))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--webhook-port %d: %w", c.WebhookPort, err)
	}
	// TLS handshake errors of scanners are not worth a warning.
	errorLog := log.WriterLevel(logrus.DebugLevel)
	srv := newWebhookServer(hook, certs.getCertificate, stdlog.New(errorLog, "", 0))
	go func() {
		<-h.runCtx.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		_ = errorLog.Close()
	}()
	go func() {
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("webhook listener stopped: pushes wait for the next poll")
		}
	}()
	log.WithFields(logrus.Fields{"address": addr, "cert": certFile}).Info("webhook listener serving")
	return nil
}
