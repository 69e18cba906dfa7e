// Package runtime runs a host's containers on containerd: it starts and supervises the host's own
// containerd (own root, state, socket, runc root and cgroup parent, so several simulated hosts
// can share one kernel), imports and pulls images, and creates, runs, stops, inspects and execs
// into containers whose output goes to CRI-format log files through the `flotilla logger` binary.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/sirupsen/logrus"
)

// ErrNotFound is returned (wrapped) when an image or a container does not exist.
var ErrNotFound = errors.New("not found")

// Config says which containerd to use and how containers are placed on the host.
type Config struct {
	// Dir holds our containerd's root, state, socket and config.toml (<data-dir>/containerd).
	Dir string
	// Socket, when set, is an existing containerd to use; no containerd is started.
	Socket string
	// Namespace is the containerd namespace of every image and container; default "flotilla".
	Namespace string
	// CgroupParent is the cgroup parent of every container, e.g. "/flotilla/host-1"; it must be
	// unique per simulated host.
	CgroupParent string
	// RuncRoot is runc's state directory; default Dir+"/runc".
	RuncRoot string
	// LoggerBinary is the absolute path of the flotilla binary; the shim runs its `logger`
	// subcommand for every container with a LogPath.
	LoggerBinary string
	// ContainerLogMaxSize is the size in bytes at which the logger rotates a container's log
	// file (0: never); ContainerLogMaxFiles is how many files it keeps, the current one
	// included (at least 2). See rotatingFile.
	ContainerLogMaxSize  int64
	ContainerLogMaxFiles int
	// Registries are the host's registries.yaml (mirrors, credentials, TLS); nil: every
	// registry over HTTPS with no credentials but a pod's pull secrets.
	Registries *RegistryConfig
	// Log receives the runtime's own log lines.
	Log *logrus.Entry
}

// Runtime is a connection to a host's containerd, optionally supervising that containerd.
type Runtime struct {
	cfg    Config
	socket string
	client *containerd.Client
	log    *logrus.Entry

	// daemon supervision (nil when Config.Socket is used)
	bgctx       context.Context
	cancel      context.CancelFunc
	watchCancel context.CancelFunc
	done        chan struct{}

	mu      sync.Mutex
	proc    *os.Process // the running containerd child, or an adopted one
	closing bool

	reapMu sync.Map // container ID -> *sync.Mutex: one reaper at a time per container

	// peers, when set, are asked for image content before registries (peers.go).
	peers *Peers
}

const (
	// readyTimeout bounds how long Start waits for containerd to answer.
	readyTimeout = 30 * time.Second
	runcRuntime  = "io.containerd.runc.v2"
	// maxDaemonLog is the size at which containerd.log is rotated (on each containerd start).
	maxDaemonLog = 10 << 20
)

// Start connects to containerd, first starting and supervising our own one unless cfg.Socket is
// set. The child containerd runs in its own process group: it outlives the agent unless Close
// stops it, and the shims it starts keep running even then.
func Start(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = "flotilla"
	}
	if cfg.Log == nil {
		cfg.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	if cfg.Socket == "" && cfg.Dir == "" {
		return nil, errors.New("runtime: set Config.Dir (to start our containerd) or Config.Socket (to use one)")
	}
	// gRPC reads a relative unix socket path's first element as an authority ("invalid
	// (non-empty) authority"), and containerd wants absolute directories.
	for _, p := range []*string{&cfg.Dir, &cfg.Socket} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return nil, fmt.Errorf("runtime: %w", err)
			}
			*p = abs
		}
	}
	if cfg.RuncRoot == "" && cfg.Dir != "" {
		cfg.RuncRoot = filepath.Join(cfg.Dir, "runc")
	}
	r := &Runtime{cfg: cfg, log: cfg.Log.WithField("component", "runtime")}
	if cfg.Socket != "" {
		r.socket = cfg.Socket
	} else {
		r.socket = SocketPath(cfg.Dir)
		if err := r.startDaemon(ctx); err != nil {
			return nil, err
		}
	}
	client, err := waitReady(ctx, r.socket, cfg.Namespace)
	if err != nil {
		_ = r.Close()
		if cfg.Socket == "" {
			return nil, fmt.Errorf("%w; containerd.log ends with:\n%s", err, logTail(filepath.Join(cfg.Dir, "containerd.log"), 2048))
		}
		return nil, err
	}
	r.client = client
	wctx, wcancel := context.WithCancel(r.bgContext())
	r.mu.Lock()
	r.watchCancel = wcancel
	r.mu.Unlock()
	go r.watchEvents(wctx)
	return r, nil
}

// SocketPath is the containerd socket that Start uses for a Config.Dir.
func SocketPath(dir string) string { return filepath.Join(dir, "containerd.sock") }

// bgContext lives until Close.
func (r *Runtime) bgContext() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		r.bgctx = ctx
	}
	return r.bgctx
}

// ns returns ctx in our containerd namespace.
func (r *Runtime) ns(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.Namespace)
}

// Client exposes the containerd client for callers that need more than this package offers.
func (r *Runtime) Client() *containerd.Client { return r.client }

func waitReady(ctx context.Context, socket, ns string) (*containerd.Client, error) {
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if _, err := os.Stat(socket); err == nil {
			c, err := containerd.New(socket, containerd.WithDefaultNamespace(ns), containerd.WithTimeout(2*time.Second))
			if err == nil {
				vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err = c.Version(vctx)
				cancel()
				if err == nil {
					return c, nil
				}
				c.Close()
			}
			lastErr = err
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("containerd at %s did not answer within %s: %w", socket, readyTimeout, lastErr)
}

// logTail returns the last n bytes of a file.
func logTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	_, _ = f.ReadAt(b, off)
	return string(b)
}

// configTOML is our containerd's configuration: everything under dir, the CRI plugin and other
// plugins we never use disabled so it starts fast and does not touch the host's /var/lib.
func configTOML(dir string) string {
	q := strconv.Quote
	return strings.Join([]string{
		"version = 2",
		"root = " + q(filepath.Join(dir, "root")),
		"state = " + q(filepath.Join(dir, "state")),
		"plugin_dir = \"\"",
		`disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]`,
		"[grpc]",
		"  address = " + q(SocketPath(dir)),
		"[ttrpc]",
		"  address = " + q(SocketPath(dir)+".ttrpc"),
		"[debug]",
		"  address = \"\"",
		"  level = \"info\"",
		"[metrics]",
		"  address = \"\"",
		"[plugins]",
		"  [plugins.\"io.containerd.internal.v1.opt\"]",
		"    path = " + q(filepath.Join(dir, "opt")),
		"",
	}, "\n")
}

func (r *Runtime) pidFile() string { return filepath.Join(r.cfg.Dir, "containerd.pid") }

// startDaemon writes the config and starts containerd, or adopts the one a previous agent left
// running on our socket (it lives in its own process group on purpose).
func (r *Runtime) startDaemon(ctx context.Context) error {
	dir := r.cfg.Dir
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("create containerd dir %s: %w", dir, err)
	}
	if _, err := exec.LookPath("containerd"); err != nil {
		return fmt.Errorf("containerd not found in PATH: install Debian's containerd and runc packages, or pass a --containerd-socket: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(configTOML(dir)), 0o644); err != nil {
		return fmt.Errorf("write containerd config: %w", err)
	}
	bg := r.bgContext()
	r.done = make(chan struct{})
	if p := r.adoptable(ctx); p != nil {
		r.log.WithField("pid", p.Pid).Info("adopting the containerd left running by a previous agent")
		r.mu.Lock()
		r.proc = p
		r.mu.Unlock()
	} else if err := r.spawn(); err != nil {
		return err
	}
	go r.supervise(bg)
	return nil
}

// adoptable returns the process of a containerd from our pid file that still answers.
func (r *Runtime) adoptable(ctx context.Context) *os.Process {
	b, err := os.ReadFile(r.pidFile())
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !processAlive(pid) {
		return nil
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if !strings.Contains(string(cmdline), filepath.Join(r.cfg.Dir, "config.toml")) {
		return nil
	}
	p, _ := os.FindProcess(pid)
	c, err := containerd.New(r.socket, containerd.WithTimeout(2*time.Second))
	if err == nil {
		defer c.Close()
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err = c.Version(vctx); err == nil {
			return p
		}
	}
	// Ours but hung: it holds the metadata lock a new containerd needs.
	r.log.WithError(err).WithField("pid", pid).Warn("killing the unresponsive containerd left by a previous agent")
	_ = p.Signal(syscall.SIGKILL)
	for i := 0; i < 50 && processAlive(pid); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie child of ours would still accept signal 0.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func (r *Runtime) spawn() error {
	dir := r.cfg.Dir
	logPath := filepath.Join(dir, "containerd.log")
	if fi, err := os.Stat(logPath); err == nil && fi.Size() > maxDaemonLog {
		_ = os.Rename(logPath, logPath+".1")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open containerd log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Own process group: a Ctrl-C or a SIGTERM to the agent's group must not stop containerd.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	if err := os.WriteFile(r.pidFile(), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		r.log.WithError(err).Warn("write containerd pid file")
	}
	r.mu.Lock()
	r.proc = cmd.Process
	r.mu.Unlock()
	r.log.WithFields(logrus.Fields{"pid": cmd.Process.Pid, "dir": dir}).Info("containerd started")
	return nil
}

// supervise restarts containerd whenever it dies, until Close.
func (r *Runtime) supervise(ctx context.Context) {
	defer close(r.done)
	backoff := 500 * time.Millisecond
	for {
		r.mu.Lock()
		p := r.proc
		r.mu.Unlock()
		started := time.Now()
		waitProcess(ctx, p)
		r.mu.Lock()
		closing := r.closing
		r.mu.Unlock()
		if closing || ctx.Err() != nil {
			return
		}
		if time.Since(started) > time.Minute {
			backoff = 500 * time.Millisecond
		}
		r.log.WithField("pid", p.Pid).Warnf("containerd exited; restarting in %s", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 10*time.Second {
			backoff *= 2
		}
		if err := r.spawn(); err != nil {
			r.log.WithError(err).Error("restart containerd")
		}
	}
}

// waitProcess returns when p is gone (reaping it when it is our child) or ctx ends.
func waitProcess(ctx context.Context, p *os.Process) {
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		if _, err := p.Wait(); err == nil {
			return
		}
		// Not our child (adopted): poll.
		for processAlive(p.Pid) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	select {
	case <-exited:
	case <-ctx.Done():
	}
}

// Close stops the containerd we started (SIGTERM, then SIGKILL after 10 s). Shims and the
// containers they run keep running; a later Start finds them again.
func (r *Runtime) Close() error {
	r.mu.Lock()
	r.closing = true
	p := r.proc
	cancel := r.cancel
	if r.watchCancel != nil {
		r.watchCancel()
	}
	r.mu.Unlock()
	if r.client != nil {
		r.client.Close()
	}
	if p == nil {
		if cancel != nil {
			cancel()
		}
		return nil
	}
	_ = p.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(p.Pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if processAlive(p.Pid) {
		_ = p.Signal(syscall.SIGKILL)
	}
	if r.done != nil {
		<-r.done
	}
	if cancel != nil {
		cancel()
	}
	_ = os.Remove(r.pidFile())
	r.log.WithField("pid", p.Pid).Info("containerd stopped")
	return nil
}

// Teardown removes every container in cfg's namespace, stops the host's containerd (the
// supervised one, or one left running by a killed agent) and removes the host's cgroup parent:
// what a host reset (`flotilla reset`, also run when internal/devsite removes a site) needs,
// since containers and containerd deliberately outlive the agent.
func Teardown(ctx context.Context, cfg Config) error {
	r, err := Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("teardown: %w", err)
	}
	var errs []error
	list, err := r.ListContainers(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, c := range list {
		if err := r.RemoveContainer(ctx, c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	if err := r.Close(); err != nil {
		errs = append(errs, err)
	}
	if cfg.CgroupParent != "" {
		if err := RemoveCgroupParent(cfg.CgroupParent); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
