package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// execer runs a command in a container (probes and exec hooks).
type execer interface {
	Exec(ctx context.Context, id string, cmd []string, stdin io.Reader, stdout, stderr io.Writer, tty bool) (int, error)
}

// handlerTarget is where a probe or hook is aimed: the container and its pod's address.
type handlerTarget struct {
	rt          execer
	containerID string
	podIP       string
	container   *corev1.Container
}

// runHandler runs one probe or lifecycle handler; nil error means success.
func runHandler(ctx context.Context, t handlerTarget, h corev1.ProbeHandler, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case h.Exec != nil:
		var out bytes.Buffer
		code, err := t.rt.Exec(ctx, t.containerID, h.Exec.Command, nil, &out, &out, false)
		if err != nil {
			return fmt.Errorf("exec %v: %w", h.Exec.Command, err)
		}
		if code != 0 {
			return fmt.Errorf("exec %v exited with %d: %s", h.Exec.Command, code, truncate(out.String(), 200))
		}
		return nil
	case h.HTTPGet != nil:
		return httpGet(ctx, t, h.HTTPGet)
	case h.TCPSocket != nil:
		host := h.TCPSocket.Host
		if host == "" {
			host = t.podIP
		}
		port, err := resolvePort(h.TCPSocket.Port, t.container)
		if err != nil {
			return err
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("tcp %s:%d: %w", host, port, err)
		}
		return conn.Close()
	case h.GRPC != nil:
		conn, err := grpc.NewClient(net.JoinHostPort(t.podIP, strconv.Itoa(int(h.GRPC.Port))), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		service := ""
		if h.GRPC.Service != nil {
			service = *h.GRPC.Service
		}
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return fmt.Errorf("grpc health: %w", err)
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("grpc health: %s", resp.Status)
		}
		return nil
	}
	return fmt.Errorf("probe names no handler")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

var probeTransport = &http.Transport{
	TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet does not verify probe certificates either
	DisableKeepAlives: true,
}

func httpGet(ctx context.Context, t handlerTarget, g *corev1.HTTPGetAction) error {
	host := g.Host
	if host == "" {
		host = t.podIP
	}
	port, err := resolvePort(g.Port, t.container)
	if err != nil {
		return err
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: g.Path}
	if u.Path == "" {
		u.Path = "/"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "kube-probe/1.37")
	for _, h := range g.HTTPHeaders {
		if h.Name == "Host" {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	client := &http.Client{Transport: probeTransport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u.String(), err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: HTTP probe failed with statuscode: %d", u.String(), resp.StatusCode)
	}
	return nil
}

// resolvePort turns a number or a named container port into a port number.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("container %q has no port named %q", c.Name, p.StrVal)
}

// probeKind is liveness, readiness or startup.
type probeKind string

const (
	probeLiveness  probeKind = "Liveness"
	probeReadiness probeKind = "Readiness"
	probeStartup   probeKind = "Startup"
)

// probeResults holds the current verdicts of one running container's probes.
type probeResults struct {
	mu          sync.Mutex
	ready       bool
	started     bool
	livenessBad bool
	// lastFailure explains the last failure, for the Unhealthy event.
	lastFailure string
}

func (r *probeResults) get() (ready, started, livenessBad bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready, r.started, r.livenessBad
}

// runProbes runs the container's probes until ctx ends, calling changed whenever a verdict
// changes. Without a startup probe the container counts as started at once; without a
// readiness probe it is ready once started.
func runProbes(ctx context.Context, t handlerTarget, res *probeResults, changed func(kind probeKind, ok bool, msg string)) {
	c := t.container
	res.mu.Lock()
	res.started = c.StartupProbe == nil
	res.ready = c.ReadinessProbe == nil && res.started
	res.mu.Unlock()
	changed("", true, "")

	var wg sync.WaitGroup
	startedCh := make(chan struct{})
	if c.StartupProbe == nil {
		close(startedCh)
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probeLoop(ctx, t, probeStartup, c.StartupProbe, func(ok bool, msg string) bool {
				if ok {
					res.mu.Lock()
					res.started = true
					if c.ReadinessProbe == nil {
						res.ready = true
					}
					res.mu.Unlock()
					close(startedCh)
					changed(probeStartup, true, "")
					return false
				}
				return true
			}, func(msg string) {
				// A startup probe that fails failureThreshold times kills the container.
				res.mu.Lock()
				res.livenessBad, res.lastFailure = true, msg
				res.mu.Unlock()
				changed(probeStartup, false, msg)
			})
		}()
	}
	after := func(p *corev1.Probe, kind probeKind, onResult func(ok bool, msg string)) {
		if p == nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-startedCh:
			}
			probeLoop(ctx, t, kind, p, func(ok bool, msg string) bool {
				onResult(ok, msg)
				return true
			}, nil)
		}()
	}
	after(c.ReadinessProbe, probeReadiness, func(ok bool, msg string) {
		res.mu.Lock()
		was := res.ready
		res.ready = ok
		res.mu.Unlock()
		if was != ok {
			changed(probeReadiness, ok, msg)
		}
	})
	after(c.LivenessProbe, probeLiveness, func(ok bool, msg string) {
		if ok {
			return
		}
		res.mu.Lock()
		res.livenessBad, res.lastFailure = true, msg
		res.mu.Unlock()
		changed(probeLiveness, false, msg)
	})
	wg.Wait()
}

// probeLoop probes every periodSeconds after initialDelaySeconds, applying success and failure
// thresholds; verdict is called on every settled change (and each settled failure for
// liveness), and the loop ends when verdict returns false. onGiveUp, when set, is called
// instead of verdict for a settled failure.
func probeLoop(ctx context.Context, t handlerTarget, kind probeKind, p *corev1.Probe, verdict func(ok bool, msg string) bool, onGiveUp func(msg string)) {
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	successThreshold := max(p.SuccessThreshold, 1)
	failureThreshold := max(p.FailureThreshold, 1)
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	var successes, failures int32
	settled := 0 // 0 unknown, 1 ok, -1 failing
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		err := runHandler(ctx, t, p.ProbeHandler, timeout)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			failures = 0
			successes++
			if successes >= successThreshold && settled != 1 {
				settled = 1
				if !verdict(true, "") {
					return
				}
			}
		} else {
			countProbeFailure(kind)
			successes = 0
			failures++
			if failures >= failureThreshold {
				if onGiveUp != nil {
					onGiveUp(err.Error())
					return
				}
				settled = -1
				failures = 0
				if !verdict(false, err.Error()) {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// runLifecycleHandler runs a postStart or preStop handler (exec, httpGet or sleep).
func runLifecycleHandler(ctx context.Context, t handlerTarget, h *corev1.LifecycleHandler, timeout time.Duration) error {
	if h == nil {
		return nil
	}
	if h.Sleep != nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
			return nil
		}
	}
	return runHandler(ctx, t, corev1.ProbeHandler{Exec: h.Exec, HTTPGet: h.HTTPGet, TCPSocket: h.TCPSocket}, timeout)
}
