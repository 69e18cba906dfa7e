// Package framework starts real flotilla agents for tests: separate processes with their own
// data directory and ports, driven with the real kubectl and client-go.
package framework

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RepoRoot is the root of the source tree.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// InCI reports whether the tests run in CI, where a missing prerequisite is a failure.
func InCI() bool { return os.Getenv("CI") == "true" }

// FlotillaBin returns the agent binary: $FLOTILLA_BIN (set by make), or one built once.
func FlotillaBin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FLOTILLA_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		removeStaleBinaries()
		dir := filepath.Join(os.TempDir(), binDirPrefix+strconv.Itoa(os.Getpid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "flotilla")
		cmd := exec.Command("go", "build", "-o", builtBin, "./cmd/flotilla")
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build flotilla: %v", buildErr)
	}
	return builtBin
}

// binDirPrefix names the directories FlotillaBin builds into, one per test process:
// <TMPDIR>/flotilla-bin-<pid>.
const binDirPrefix = "flotilla-bin-"

// removeStaleBinaries removes the binaries built by test processes that have ended (each
// is 150+ MiB, and nothing else removes them).
func removeStaleBinaries() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), binDirPrefix))
		if err != nil {
			// An older layout (MkdirTemp's random suffix): remove it once it is an hour old.
			if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > time.Hour {
				_ = os.RemoveAll(d)
			}
			continue
		}
		if pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(d)
		}
	}
}

// KubectlBin returns the real kubectl: $KUBECTL (set by make) or bin/kubectl.
func KubectlBin(t testing.TB) string {
	t.Helper()
	p := os.Getenv("KUBECTL")
	if p == "" {
		p = filepath.Join(RepoRoot(), "bin", "kubectl")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("kubectl not found at %s: run `make kubectl` (or `make test`, which builds it)", p)
	}
	return p
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}

// FreePorts returns n distinct loopback TCP ports that were free a moment ago: all are held
// until the last is chosen, so the kernel cannot hand out one twice (as successive FreePort
// calls can, the port being closed in between).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// Agent is a flotilla agent process started by a test.
type Agent struct {
	Name       string
	DataDir    string
	Kubeconfig string
	APIPort    int
	Args       []string

	t       testing.TB
	cmd     *exec.Cmd
	logs    *lockedBuffer
	exited  chan struct{}
	exitErr error
}

// AgentOptions tune StartAgent.
type AgentOptions struct {
	Name    string
	DataDir string // default: a new t.TempDir()
	Extra   []string
}

// StartAgent starts an agent on loopback and waits until its kubeconfig is written (the API
// answers /readyz). The agent is stopped when the test ends.
func StartAgent(t testing.TB, o AgentOptions) *Agent {
	t.Helper()
	if o.Name == "" {
		o.Name = "host-1"
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	a := &Agent{Name: o.Name, DataDir: o.DataDir, Kubeconfig: filepath.Join(o.DataDir, "kubeconfig"), t: t}
	ports := FreePorts(t, 4)
	a.APIPort = ports[0]
	a.Args = append([]string{"agent", "--data-dir", o.DataDir, "--name", o.Name, "--listen-address", "127.0.0.1",
		"--api-port", strconv.Itoa(a.APIPort), "--etcd-client-port", strconv.Itoa(ports[1]),
		"--etcd-peer-port", strconv.Itoa(ports[2]), "--gossip-port", strconv.Itoa(ports[3]),
		// Agents on loopback serve the API only: pods and the proxy need a host network
		// namespace of their own (see internal/devsite).
		"--pods=false", "--proxy=false"}, o.Extra...)
	a.start()
	t.Cleanup(func() {
		// A failing test shows why the API stopped answering, if it did.
		if t.Failed() {
			state := "running"
			select {
			case <-a.exited:
				state = fmt.Sprintf("exited: %v", a.exitErr)
			default:
			}
			t.Logf("---- agent %s (%s), log tail ----\n%s", a.Name, state, tail(a.logs.String(), 60))
		}
		a.Stop()
	})
	return a
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (a *Agent) start() {
	a.t.Helper()
	_ = os.Remove(a.Kubeconfig)
	a.logs = &lockedBuffer{}
	a.exited = make(chan struct{})
	a.cmd = exec.Command(FlotillaBin(a.t), a.Args...)
	a.cmd.Stdout = a.logs
	a.cmd.Stderr = a.logs
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Pdeathsig fires when the thread that started the child ends, not the process, and Go
	// ends a thread whose goroutine exits locked to it (as tests entering a network namespace
	// do): start and wait on a thread locked for as long as the agent runs.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := a.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		a.exitErr = a.cmd.Wait()
		close(a.exited)
	}()
	if err := <-started; err != nil {
		a.t.Fatalf("start agent: %v", err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(a.Kubeconfig); err == nil {
			return
		}
		select {
		case <-a.exited:
			a.t.Fatalf("agent exited before it was ready: %v\n%s", a.exitErr, a.logs.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	a.t.Fatalf("agent not ready after 90s:\n%s", a.logs.String())
}

// Restart stops the agent cleanly and starts it again on the same data and ports.
func (a *Agent) Restart() {
	a.t.Helper()
	if _, err := a.Stop(); err != nil {
		a.t.Fatalf("stop: %v", err)
	}
	a.start()
}

// Stop sends SIGTERM and waits for the process to exit; it returns how long that took.
func (a *Agent) Stop() (time.Duration, error) {
	if a.cmd == nil || a.cmd.Process == nil {
		return 0, nil
	}
	select {
	case <-a.exited:
		return 0, a.exitErr
	default:
	}
	start := time.Now()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
		return time.Since(start), a.exitErr
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
		return time.Since(start), fmt.Errorf("agent did not exit within 30s of SIGTERM")
	}
}

// Logs returns what the agent printed so far.
func (a *Agent) Logs() string { return a.logs.String() }

// RESTConfig returns a client configuration from the agent's kubeconfig.
func (a *Agent) RESTConfig() *rest.Config {
	a.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", a.Kubeconfig)
	if err != nil {
		a.t.Fatalf("load kubeconfig: %v", err)
	}
	// Tests measure the server, not client-go's default 5 requests/s limit.
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg
}

// Client returns a client-go clientset for the agent.
func (a *Agent) Client() *kubernetes.Clientset {
	a.t.Helper()
	c, err := kubernetes.NewForConfig(a.RESTConfig())
	if err != nil {
		a.t.Fatalf("client: %v", err)
	}
	return c
}

// Kubectl runs the real kubectl against the agent with a 60 s limit.
func (a *Agent) Kubectl(stdin string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, KubectlBin(a.t), append([]string{"--kubeconfig", a.Kubeconfig}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = bytes.NewBufferString(stdin)
	}
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// MustKubectl runs kubectl and fails the test when it fails.
func (a *Agent) MustKubectl(stdin string, args ...string) string {
	a.t.Helper()
	out, errOut, err := a.Kubectl(stdin, args...)
	if err != nil {
		a.t.Fatalf("kubectl %v: %v\nstdout: %s\nstderr: %s", args, err, out, errOut)
	}
	return out
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// EtcdClient returns a client of the agent's embedded etcd, authenticated with the API
// server's client certificate.
func EtcdClient(t testing.TB, a *Agent) *clientv3.Client {
	t.Helper()
	port := ""
	for i, arg := range a.Args {
		if arg == "--etcd-client-port" && i+1 < len(a.Args) {
			port = a.Args[i+1]
		}
	}
	pkiDir := filepath.Join(a.DataDir, "pki")
	tlsInfo := transport.TLSInfo{CertFile: filepath.Join(pkiDir, "etcd-client.crt"), KeyFile: filepath.Join(pkiDir, "etcd-client.key"), TrustedCAFile: filepath.Join(pkiDir, "ca.crt")}
	tlsCfg, err := tlsInfo.ClientConfig()
	if err != nil {
		t.Fatalf("etcd TLS: %v", err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://127.0.0.1:" + port}, TLS: tlsCfg, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	return cli
}
