package agent

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/flotilla-dev/flotilla/nodes/agent/stats"
	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
)

// ServerConfig configures the agent's HTTPS endpoint, which the API server calls for pods/log,
// exec, port-forward and resource usage (stats.SummaryPath).
type ServerConfig struct {
	Address           string // host:port
	CertFile, KeyFile string
	// ClientCAFile and ClientNames admit callers presenting a client certificate signed by
	// that CA whose common name is one of ClientNames (the API server's node client).
	ClientCAFile string
	ClientNames  []string
	// Token, when set, also admits callers presenting it as a bearer token.
	Token string
	// Content, when set, serves this host's image content under /v2/ to the site's other
	// hosts: callers presenting a node certificate (system:node:NAME in system:nodes) signed
	// by ClientCAFile for which Peer(NAME) is true.
	Content http.Handler
	Peer    func(name string) bool
}

// Serve answers node-agent requests until ctx ends.
func (m *PodManager) Serve(ctx context.Context, cfg ServerConfig) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", m.serveLogs)
	mux.HandleFunc("GET /exec/{namespace}/{pod}/{container}", m.serveExec)
	mux.HandleFunc("POST /exec/{namespace}/{pod}/{container}", m.serveExec)
	mux.HandleFunc("GET /portForward/{namespace}/{pod}", m.servePortForward)
	mux.HandleFunc("POST /portForward/{namespace}/{pod}", m.servePortForward)
	mux.HandleFunc("GET "+stats.SummaryPath, m.serveStats)
	certs, err := newKeyPairReloader(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("node agent endpoint certificate: %w", err)
	}
	tlsCfg := &tls.Config{GetCertificate: certs.GetCertificate, MinVersion: tls.VersionTLS12}
	if cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return fmt.Errorf("node agent endpoint client CA: %w", err)
		}
		tlsCfg.ClientCAs = x509.NewCertPool()
		tlsCfg.ClientCAs.AppendCertsFromPEM(pem)
		tlsCfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	handler := requireCaller(cfg, mux)
	if cfg.Content != nil {
		peers := requirePeer(cfg, cfg.Content)
		api := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2" || strings.HasPrefix(r.URL.Path, "/v2/") {
				peers.ServeHTTP(w, r)
				return
			}
			api.ServeHTTP(w, r)
		})
	}
	srv := &http.Server{
		Handler:           handler,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
	}
	l, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return fmt.Errorf("node agent endpoint: listen on %s: %w", cfg.Address, err)
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go m.stats.run(ctx)
	logrus.WithField("address", cfg.Address).Info("node agent endpoint serving")
	if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// requireCaller admits a request with a verified client certificate of one of
// cfg.ClientNames, or with cfg.Token; others get 401.
func requireCaller(cfg ServerConfig, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && slices.Contains(cfg.ClientNames, r.TLS.VerifiedChains[0][0].Subject.CommonName) {
			next.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if cfg.Token == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(cfg.Token)) != 1 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requirePeer admits a request with a verified node client certificate of another host of the
// site (cfg.Peer); others get 401, or 403 for a node that is not (or no longer) one.
func requirePeer(cfg ServerConfig, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			http.Error(w, "Unauthorized: present this site's node client certificate", http.StatusUnauthorized)
			return
		}
		cert := r.TLS.VerifiedChains[0][0]
		name, ok := strings.CutPrefix(cert.Subject.CommonName, rbac.NodeUserPrefix)
		if !ok || name == "" || !slices.Contains(cert.Subject.Organization, rbac.NodesGroup) || cfg.Peer == nil || !cfg.Peer(name) {
			http.Error(w, fmt.Sprintf("Forbidden: %q is not a host of this site", cert.Subject.CommonName), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// flushWriter flushes after every write so `kubectl logs -f` sees lines as they come.
type flushWriter struct {
	w http.ResponseWriter
	f http.Flusher
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if f.f != nil {
		f.f.Flush()
	}
	return n, err
}

func (m *PodManager) serveLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	opts := rt.LogOptions{Tail: -1}
	opts.Follow, _ = strconv.ParseBool(q.Get("follow"))
	opts.Timestamps, _ = strconv.ParseBool(q.Get("timestamps"))
	previous, _ := strconv.ParseBool(q.Get("previous"))
	if v := q.Get("tailLines"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "tailLines must be a non-negative integer", http.StatusBadRequest)
			return
		}
		opts.Tail = n
	}
	if v := q.Get("limitBytes"); v != "" {
		opts.LimitBytes, _ = strconv.ParseInt(v, 10, 64)
	}
	if v := q.Get("sinceSeconds"); v != "" {
		n, _ := strconv.ParseInt(v, 10, 64)
		opts.Since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			http.Error(w, "sinceTime must be RFC 3339", http.StatusBadRequest)
			return
		}
		opts.Since = t
	}
	path, err := m.LogPath(r.Context(), r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container"), previous)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	f, _ := w.(http.Flusher)
	out := flushWriter{w: w, f: f}
	if err := rt.ReadLogs(r.Context(), path, opts, out, out); err != nil && r.Context().Err() == nil {
		logrus.WithError(err).WithField("path", path).Debug("read logs")
	}
}

// execChannels are the streams of the channel.k8s.io protocols kubectl exec speaks over a
// websocket: stdin, stdout, stderr, the error/status channel and terminal resizes.
var execChannels = []wsstream.ChannelType{wsstream.ReadChannel, wsstream.WriteChannel, wsstream.WriteChannel,
	wsstream.WriteChannel, wsstream.ReadChannel}

func (m *PodManager) serveExec(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	flag := func(k string) bool {
		b, _ := strconv.ParseBool(q.Get(k))
		return b
	}
	cmd := q["command"]
	if len(cmd) == 0 {
		http.Error(w, "no command given", http.StatusBadRequest)
		return
	}
	id, err := m.ContainerID(r.Context(), r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !wsstream.IsWebSocketRequest(r) {
		http.Error(w, "exec needs a websocket upgrade (channel.k8s.io protocols; kubectl 1.30 or newer)", http.StatusBadRequest)
		return
	}
	cfg := wsstream.ChannelProtocolConfig{Binary: true, Channels: execChannels}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		"v5.channel.k8s.io": cfg, "v4.channel.k8s.io": cfg,
	})
	conn.SetIdleTimeout(4 * time.Hour)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		logrus.WithError(err).Debug("exec: websocket handshake")
		return
	}
	defer conn.Close()
	var stdin io.Reader
	if flag("stdin") {
		stdin = streams[0]
	}
	stdout, stderr := io.Writer(io.Discard), io.Writer(io.Discard)
	if flag("stdout") {
		stdout = streams[1]
	}
	if flag("stderr") {
		stderr = streams[2]
	}
	code, err := m.Exec(r.Context(), id, cmd, stdin, stdout, stderr, flag("tty"))
	status := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess}
	switch {
	case err != nil:
		status.Status, status.Reason, status.Message = metav1.StatusFailure, metav1.StatusReasonInternalError, err.Error()
	case code != 0:
		status.Status, status.Reason = metav1.StatusFailure, "NonZeroExitCode"
		status.Message = fmt.Sprintf("command terminated with non-zero exit code: error executing command %v: exit status %d", cmd, code)
		status.Details = &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: "ExitCode", Message: strconv.Itoa(code)}}}
	}
	b, _ := json.Marshal(status)
	_, _ = streams[3].Write(b)
}
