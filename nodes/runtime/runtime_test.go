package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestMain lets the test binary double as the logger binary: the shim runs it with the
// arguments of the binary:// log URI ("logger", "", "--path", FILE in any order).
func TestMain(m *testing.M) {
	if os.Getenv("CONTAINER_ID") != "" && hasArg(os.Args[1:], "logger") {
		p := argAfter(os.Args[1:], "--path")
		maxSize, _ := strconv.ParseInt(argAfter(os.Args[1:], "--max-size"), 10, 64)
		maxFiles, _ := strconv.Atoi(argAfter(os.Args[1:], "--max-files"))
		if err := RunLogger(p, maxSize, maxFiles); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func hasArg(args []string, s string) bool {
	for _, a := range args {
		if a == s {
			return true
		}
	}
	return false
}

func argAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// requireContainerd skips (fails in CI) without root, containerd and runc.
func requireContainerd(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, b := range []string{"containerd", "runc", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("needs %s (install Debian's containerd, runc and iproute2; run as root)", strings.Join(missing, ", "))
	if framework.InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

type env struct {
	t       *testing.T
	dir     string
	cfg     Config
	rt      *Runtime
	image   string
	cgroup  string
	created []string
}

func newEnv(t *testing.T) *env {
	requireContainerd(t)
	e := &env{t: t, dir: t.TempDir()}
	e.cgroup = "/flotilla-test-" + randomHex(4)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	e.cfg = Config{
		Dir:          filepath.Join(e.dir, "containerd"),
		CgroupParent: e.cgroup,
		LoggerBinary: self,
		Log:          logrus.NewEntry(log),
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	rt, err := Start(ctx, e.cfg)
	if err != nil {
		t.Fatalf("start containerd: %v (log: %s)", err, readFile(filepath.Join(e.cfg.Dir, "containerd.log")))
	}
	t.Logf("containerd ready in %s", time.Since(start).Round(time.Millisecond))
	e.rt = rt
	t.Cleanup(e.cleanup)

	// A packed image of the test program.
	bin := filepath.Join(e.dir, "testapp")
	build := exec.Command("go", "build", "-o", bin, "./testdata/testapp")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build testapp: %v\n%s", err, out)
	}
	tarPath := filepath.Join(e.dir, "testapp.tar")
	if err := PackImage(PackOptions{Binary: bin, Name: "flotilla.local/testapp:latest"}, tarPath); err != nil {
		t.Fatal(err)
	}
	names, err := rt.ImportImage(context.Background(), tarPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != "flotilla.local/testapp:latest" {
		t.Fatalf("imported names = %v, want [flotilla.local/testapp:latest]", names)
	}
	e.image = "flotilla.local/testapp"
	return e
}

func (e *env) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if e.rt != nil {
		for _, id := range e.created {
			if err := e.rt.RemoveContainer(ctx, id); err != nil {
				e.t.Errorf("remove %s: %v", id, err)
			}
		}
		_ = e.rt.Close()
	}
	if err := RemoveCgroupParent(e.cgroup); err != nil {
		e.t.Errorf("cgroups left behind: %v", err)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*" + e.cgroup); len(left) > 0 {
		e.t.Errorf("cgroups left behind: %v", left)
	}
}

// run creates and starts a container.
func (e *env) run(c ContainerConfig) {
	e.t.Helper()
	if c.Image == "" {
		c.Image = e.image
	}
	if c.LogPath == "" {
		c.LogPath = filepath.Join(e.dir, "logs", c.ID+".log")
	}
	ctx := context.Background()
	if err := e.rt.CreateContainer(ctx, c); err != nil {
		e.t.Fatal(err)
	}
	e.created = append(e.created, c.ID)
	st, err := e.rt.ContainerStatus(ctx, c.ID)
	if err != nil || st.State != StateCreated {
		e.t.Fatalf("status after create = %+v, %v; want created", st, err)
	}
	if err := e.rt.StartContainer(ctx, c.ID); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) waitState(id string, want State, timeout time.Duration) *ContainerStatus {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var st *ContainerStatus
	var err error
	for time.Now().Before(deadline) {
		st, err = e.rt.ContainerStatus(context.Background(), id)
		if err == nil && st.State == want {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("container %s: state %+v (err %v), want %s", id, st, err, want)
	return nil
}

func (e *env) waitLog(id, substr string, timeout time.Duration) string {
	e.t.Helper()
	p := filepath.Join(e.dir, "logs", id+".log")
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if s := readFile(p); strings.Contains(s, substr) {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("log of %s never contained %q; log:\n%s", id, substr, readFile(p))
	return ""
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

var criLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z (stdout|stderr) (F|P) .*$`)

func TestRealContainerd(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()

	t.Run("images", func(t *testing.T) {
		im, err := e.rt.ImageStatus(ctx, "flotilla.local/testapp:latest")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(im.ID, "sha256:") || im.Size <= 0 || len(im.Names) != 1 {
			t.Fatalf("image = %+v", im)
		}
		if byID, err := e.rt.ImageStatus(ctx, im.ID); err != nil || !reflect.DeepEqual(byID, im) {
			t.Fatalf("ImageStatus(%s) = %+v, %v; want %+v", im.ID, byID, err, im)
		}
		if _, err := e.rt.ImageStatus(ctx, "sha256:"+strings.Repeat("0", 64)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ImageStatus(unknown ID) err = %v, want ErrNotFound", err)
		}
		if _, err := e.rt.ImageStatus(ctx, "nginx"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ImageStatus(nginx) err = %v, want ErrNotFound", err)
		}
		all, err := e.rt.ListImages(ctx)
		if err != nil || len(all) != 1 || all[0].ID != im.ID {
			t.Fatalf("ListImages = %+v, %v", all, err)
		}
		if err := e.rt.CreateContainer(ctx, ContainerConfig{ID: "noimage", Image: "flotilla.local/absent:v1"}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("create with a missing image: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("exit code and CRI logs", func(t *testing.T) {
		e.run(ContainerConfig{ID: "exit3", Args: []string{"exit3"}, Labels: map[string]string{"app": "x"}})
		st := e.waitState("exit3", StateExited, 20*time.Second)
		if st.ExitCode != 3 || st.OOMKilled || st.StartedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) || st.Labels["app"] != "x" || len(st.Labels) != 1 {
			t.Fatalf("status = %+v", st)
		}
		if !strings.HasPrefix(st.ImageID, "sha256:") || st.Image != "flotilla.local/testapp:latest" {
			t.Fatalf("image fields = %q %q", st.Image, st.ImageID)
		}
		raw := e.waitLog("exit3", "second line", 10*time.Second)
		lines := strings.Split(strings.TrimSuffix(raw, "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("log has %d lines:\n%s", len(lines), raw)
		}
		for _, l := range lines {
			if !criLine.MatchString(l) {
				t.Errorf("not a CRI log line: %q", l)
			}
		}
		path := filepath.Join(e.dir, "logs", "exit3.log")
		var out, errb bytes.Buffer
		if err := ReadLogs(ctx, path, LogOptions{Tail: -1}, &out, &errb); err != nil {
			t.Fatal(err)
		}
		if out.String() != "hello stdout\nsecond line\n" || errb.String() != "hello stderr\n" {
			t.Fatalf("ReadLogs: stdout %q stderr %q", out.String(), errb.String())
		}
		out.Reset()
		errb.Reset()
		if err := ReadLogs(ctx, path, LogOptions{Tail: 1, Timestamps: true}, &out, &errb); err != nil {
			t.Fatal(err)
		}
		// The last line of the file, whichever stream wrote it, with its timestamp.
		last := strings.SplitN(lines[2], " ", 4)
		if got := out.String() + errb.String(); got != last[0]+" "+last[3]+"\n" {
			t.Fatalf("ReadLogs tail 1 with timestamps = %q, want the file's last line %q", got, lines[2])
		}
		if err := e.rt.StartContainer(ctx, "exit3"); err == nil {
			t.Fatal("starting an exited container again succeeded")
		}
	})

	t.Run("a missing command is a start error", func(t *testing.T) {
		c := ContainerConfig{ID: "nocmd", Image: e.image, Command: []string{"/no/such/binary"}, LogPath: filepath.Join(e.dir, "logs", "nocmd.log")}
		if err := e.rt.CreateContainer(ctx, c); err != nil {
			t.Fatal(err)
		}
		e.created = append(e.created, c.ID)
		err := e.rt.StartContainer(ctx, c.ID)
		var se *StartError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "/no/such/binary") {
			t.Fatalf("start: %v, want a *StartError naming the command", err)
		}
		// Recorded, so it survives the agent: exited with 128 and the reason, never started.
		st, err := e.rt.ContainerStatus(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != StateExited || st.ExitCode != StartErrorExitCode || !st.StartedAt.IsZero() || st.FinishedAt.IsZero() ||
			!strings.Contains(st.StartError, "/no/such/binary") {
			t.Fatalf("status after a failed start = %+v", st)
		}
	})

	t.Run("OOM kill", func(t *testing.T) {
		e.run(ContainerConfig{ID: "oom", Args: []string{"oom"}, MemoryLimit: 20 << 20})
		// The first status that shows the exit shows the OOM kill too: a task that has
		// stopped is reaped (its OOM kill read from the cgroup) before its status is given.
		st := e.waitState("oom", StateExited, 30*time.Second)
		if !st.OOMKilled || st.ExitCode != 137 {
			t.Fatalf("status = %+v, want OOMKilled with exit code 137; log:\n%s", st, readFile(filepath.Join(e.dir, "logs", "oom.log")))
		}
	})

	t.Run("stop delivers SIGTERM", func(t *testing.T) {
		out := t.TempDir()
		e.run(ContainerConfig{ID: "term", Args: []string{"sigterm", "/out/term"},
			Mounts: []Mount{{Source: out, Destination: "/out"}}})
		e.waitLog("term", "ready", 10*time.Second)
		start := time.Now()
		if err := e.rt.StopContainer(ctx, "term", 20*time.Second); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if got := readFile(filepath.Join(out, "term")); got != "SIGTERM received\n" {
			t.Fatalf("the program recorded %q", got)
		}
		st, err := e.rt.ContainerStatus(ctx, "term")
		if err != nil || st.State != StateExited || st.ExitCode != 0 {
			t.Fatalf("status = %+v, %v", st, err)
		}
		if took > 10*time.Second {
			t.Fatalf("stop took %s: the grace period was waited out", took)
		}
		t.Logf("stop (SIGTERM honoured) took %s", took.Round(time.Millisecond))
		if err := e.rt.StopContainer(ctx, "term", time.Second); err != nil {
			t.Fatalf("stopping an exited container: %v", err)
		}
	})

	t.Run("stop escalates to SIGKILL", func(t *testing.T) {
		e.run(ContainerConfig{ID: "stubborn", Args: []string{"ignoreterm"}, Command: []string{"/app"}})
		e.waitState("stubborn", StateRunning, 10*time.Second)
		start := time.Now()
		if err := e.rt.StopContainer(ctx, "stubborn", time.Second); err != nil {
			t.Fatal(err)
		}
		st, err := e.rt.ContainerStatus(ctx, "stubborn")
		if err != nil || st.State != StateExited || st.ExitCode != 137 {
			t.Fatalf("status = %+v, %v", st, err)
		}
		if d := time.Since(start); d < time.Second {
			t.Fatalf("stopped after %s, before the grace period", d)
		}
	})

	t.Run("exec", func(t *testing.T) {
		e.run(ContainerConfig{ID: "sleeper", Args: []string{"sleep"}, Env: []string{"GREETING=hi"}, Hostname: "box"})
		e.waitState("sleeper", StateRunning, 10*time.Second)
		var out, errb bytes.Buffer
		start := time.Now()
		code, err := e.rt.Exec(ctx, "sleeper", []string{"/app", "exit", "5"}, nil, &out, &errb, false)
		t.Logf("exec round trip %s", time.Since(start).Round(time.Millisecond))
		if err != nil || code != 5 || out.String() != "exiting with 5\n" {
			t.Fatalf("exec = %d, %v, %q %q", code, err, out.String(), errb.String())
		}
		out.Reset()
		code, err = e.rt.Exec(ctx, "sleeper", []string{"/app", "cat"}, strings.NewReader("from stdin\n"), &out, &errb, false)
		if err != nil || code != 0 || out.String() != "from stdin\n" {
			t.Fatalf("exec cat = %d, %v, %q", code, err, out.String())
		}
		out.Reset()
		code, err = e.rt.Exec(ctx, "sleeper", []string{"/app", "exit", "0"}, nil, &out, nil, true)
		if err != nil || code != 0 || out.String() != "exiting with 0\r\n" {
			t.Fatalf("exec with tty = %d, %v, %q", code, err, out.String())
		}
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start = time.Now()
		if _, err := e.rt.Exec(cctx, "sleeper", []string{"/app", "sleep"}, nil, &out, nil, false); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
			t.Fatalf("exec past its context: %v after %s", err, time.Since(start))
		}
		if _, err := e.rt.Exec(ctx, "exit3", []string{"/app"}, nil, &out, &errb, false); err == nil {
			t.Fatal("exec in an exited container succeeded")
		}
	})

	t.Run("security context and mounts", func(t *testing.T) {
		hosts := filepath.Join(t.TempDir(), "hosts")
		if err := os.WriteFile(hosts, []byte("10.244.0.5 web\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		gid := int64(3000)
		e.run(ContainerConfig{ID: "info", Args: []string{"info"},
			User: &User{UID: 1000, GID: &gid}, Hostname: "box", WorkingDir: "/tmp", Env: []string{"GREETING=hi"},
			CapDrop: []string{"ALL"}, CapAdd: []string{"NET_ADMIN"}, ReadOnlyRootfs: true,
			Mounts: []Mount{{Source: hosts, Destination: "/etc/hosts", ReadOnly: true},
				{Type: "tmpfs", Destination: "/scratch", Options: []string{"mode=1777", "size=1m"}}},
		})
		st := e.waitState("info", StateExited, 20*time.Second)
		if st.ExitCode != 0 {
			t.Fatalf("status = %+v", st)
		}
		raw := e.waitLog("info", "tmpfs-write", 10*time.Second)
		var out bytes.Buffer
		if err := ReadLogs(ctx, filepath.Join(e.dir, "logs", "info.log"), LogOptions{Tail: -1}, &out, &out); err != nil {
			t.Fatal(err)
		}
		// CAP_NET_ADMIN is bit 12 (the bounding set: a non-root process has no effective caps,
		// as in Kubernetes without ambient capabilities).
		for _, want := range []string{"uid 1000\n", "gid 3000\n", "hostname box\n", "cwd /tmp\n", "greeting hi\n",
			"capbnd 0000000000001000\n", `hosts "10.244.0.5 web\n" <nil>` + "\n", "rootfs-write open /written: read-only file system\n", "tmpfs-write <nil>\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("container output lacks %q:\n%s", want, raw)
			}
		}
	})

	t.Run("privileged", func(t *testing.T) {
		e.run(ContainerConfig{ID: "priv", Args: []string{"info"}, Privileged: true,
			Mounts: []Mount{{Type: "tmpfs", Destination: "/scratch"}}})
		if st := e.waitState("priv", StateExited, 20*time.Second); st.ExitCode != 0 {
			t.Fatalf("status = %+v", st)
		}
		raw := e.waitLog("priv", "tmpfs-write", 10*time.Second)
		if !strings.Contains(raw, "uid 0") || strings.Contains(raw, "capbnd 0000000000") || !strings.Contains(raw, "rootfs-write <nil>") {
			t.Fatalf("privileged container output:\n%s", raw)
		}
	})

	t.Run("cgroup limits", func(t *testing.T) {
		e.run(ContainerConfig{ID: "limits", Args: []string{"sleep"}, CPUShares: 512, CPUQuota: 50000, MemoryLimit: 64 << 20})
		e.waitState("limits", StateRunning, 10*time.Second)
		for file, want := range map[string]string{
			"cpu/" + e.cgroup + "/limits/cpu.shares":               "512",
			"cpu/" + e.cgroup + "/limits/cpu.cfs_quota_us":         "50000",
			"cpu/" + e.cgroup + "/limits/cpu.cfs_period_us":        "100000",
			"memory/" + e.cgroup + "/limits/memory.limit_in_bytes": "67108864",
		} {
			if got := strings.TrimSpace(readFile("/sys/fs/cgroup/" + file)); got != want {
				t.Errorf("%s = %q, want %q", file, got, want)
			}
		}
		if err := e.rt.StopContainer(ctx, "limits", 0); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("network namespace", func(t *testing.T) {
		ns := "flt-rt-" + randomHex(3)
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add: %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		if out, err := exec.Command("ip", "-n", ns, "link", "add", "flttest0", "type", "veth", "peer", "name", "flttest1").CombinedOutput(); err != nil {
			t.Fatalf("add dummy link: %v %s", err, out)
		}
		e.run(ContainerConfig{ID: "netns", Args: []string{"ifaces"}, NetNSPath: "/run/netns/" + ns})
		st := e.waitState("netns", StateExited, 20*time.Second)
		if st.ExitCode != 0 {
			t.Fatalf("status = %+v", st)
		}
		e.waitLog("netns", "iface flttest0", 10*time.Second)
	})

	t.Run("containerd restart keeps containers and status", func(t *testing.T) {
		e.run(ContainerConfig{ID: "victim", Args: []string{"sleep"}})
		victim := e.waitState("victim", StateRunning, 10*time.Second)
		before := e.waitState("sleeper", StateRunning, time.Second)
		oldPid := readFile(filepath.Join(e.cfg.Dir, "containerd.pid"))
		// Nothing sent to the agent's process group (Ctrl-C, a supervisor's kill) reaches
		// containerd, the shims or the containers.
		for _, pid := range []int{atoi(oldPid), int(before.Pid), ppid(int(before.Pid))} {
			if pg, err := syscall.Getpgid(pid); err != nil || pg == syscall.Getpgrp() {
				t.Errorf("process %d is in the agent's process group (%d, %v)", pid, pg, err)
			}
		}
		if err := e.rt.Close(); err != nil {
			t.Fatal(err)
		}
		e.rt = nil
		if syscall.Kill(int(before.Pid), 0) != nil {
			t.Fatal("the container died with containerd")
		}
		// An exit while containerd is down must still be reported after it is back.
		if err := syscall.Kill(int(victim.Pid), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rt, err := Start(ctx, e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.rt = rt
		t.Logf("containerd restarted in %s", time.Since(start).Round(time.Millisecond))
		if readFile(filepath.Join(e.cfg.Dir, "containerd.pid")) == oldPid {
			t.Fatal("containerd was not restarted")
		}
		after := e.waitState("sleeper", StateRunning, 5*time.Second)
		if after.Pid != before.Pid || !after.StartedAt.Equal(before.StartedAt) {
			t.Fatalf("after restart %+v, before %+v", after, before)
		}
		v := e.waitState("victim", StateExited, 10*time.Second)
		if v.ExitCode != 137 {
			t.Fatalf("victim = %+v, want exit 137", v)
		}
		if st, err := e.rt.ContainerStatus(ctx, "exit3"); err != nil || st.ExitCode != 3 || st.State != StateExited {
			t.Fatalf("exit3 after restart = %+v, %v", st, err)
		}
		if st, err := e.rt.ContainerStatus(ctx, "oom"); err != nil || !st.OOMKilled {
			t.Fatalf("oom after restart = %+v, %v", st, err)
		}
		var out bytes.Buffer
		if code, err := e.rt.Exec(ctx, "sleeper", []string{"/app", "exit", "0"}, nil, &out, &out, false); err != nil || code != 0 {
			t.Fatalf("exec after restart = %d, %v", code, err)
		}
	})

	t.Run("agent restart adopts the running containerd", func(t *testing.T) {
		before := e.waitState("sleeper", StateRunning, time.Second)
		pid := readFile(filepath.Join(e.cfg.Dir, "containerd.pid"))
		// What a crashed agent leaves: containerd running, nobody supervising it.
		e.rt.cancel()
		<-e.rt.done
		e.rt.client.Close()
		e.rt = nil
		rt, err := Start(ctx, e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.rt = rt
		if got := readFile(filepath.Join(e.cfg.Dir, "containerd.pid")); got != pid {
			t.Fatalf("containerd pid %s, want the adopted %s", got, pid)
		}
		if after := e.waitState("sleeper", StateRunning, time.Second); after.Pid != before.Pid {
			t.Fatalf("container pid changed: %d -> %d", before.Pid, after.Pid)
		}
	})

	// As `flotilla image list --data-dir d` run from d's parent does.
	t.Run("a relative socket path connects", func(t *testing.T) {
		t.Chdir(filepath.Dir(e.cfg.Dir))
		cfg := e.cfg
		cfg.Dir, cfg.Socket = "", filepath.Join(filepath.Base(e.cfg.Dir), "containerd.sock")
		other, err := Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if st, err := other.ContainerStatus(ctx, "sleeper"); err != nil || st.State != StateRunning {
			t.Fatalf("sleeper through %s: %+v, %v", cfg.Socket, st, err)
		}
	})

	t.Run("pull from a registry", func(t *testing.T) {
		reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		defer reg.Close()
		host := strings.TrimPrefix(reg.URL, "http://")
		img, err := tarball.ImageFromPath(filepath.Join(e.dir, "testapp.tar"), nil)
		if err != nil {
			t.Fatal(err)
		}
		framework.PushImage(t, nil, reg.URL, "pulled/testapp", "v2", img, "")
		// Plain HTTP only when the registry file says so, loopback or not.
		if _, err := e.rt.PullImage(ctx, host+"/pulled/testapp:v2", PullOptions{}); err == nil || !strings.Contains(err.Error(), "HTTP response to HTTPS client") {
			t.Fatalf("pulling from a plain-http registry not configured as one: %v, want an HTTPS error", err)
		}
		e.rt.cfg.Registries = &RegistryConfig{Mirrors: map[string]RegistryMirror{host: {Endpoints: []string{reg.URL}}}}
		defer func() { e.rt.cfg.Registries = nil }()
		im, err := e.rt.PullImage(ctx, host+"/pulled/testapp:v2", PullOptions{})
		if err != nil {
			t.Fatal(err)
		}
		local, err := e.rt.ImageStatus(ctx, e.image)
		if err != nil {
			t.Fatal(err)
		}
		if im.ID != local.ID || !reflect.DeepEqual(im.Names, []string{host + "/pulled/testapp:v2", "flotilla.local/testapp:latest"}) {
			t.Fatalf("pulled %+v, local %+v", im, local)
		}
		if _, err := e.rt.PullImage(ctx, host+"/pulled/absent:v1", PullOptions{}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Fatalf("pulling a missing image: %v, want a not found error", err)
		}
	})

	t.Run("watch image dir", func(t *testing.T) {
		dir := t.TempDir()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go e.rt.WatchImageDir(wctx, dir)
		if err := PackImage(PackOptions{Binary: filepath.Join(e.dir, "testapp"), Name: "flotilla.local/watched:v1"}, filepath.Join(dir, "watched.tar")); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			if _, err := e.rt.ImageStatus(ctx, "flotilla.local/watched:v1"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the tarball dropped in the image dir was not imported")
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("list and remove", func(t *testing.T) {
		list, err := e.rt.ListContainers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != len(e.created) {
			t.Fatalf("ListContainers has %d, want %d: %+v", len(list), len(e.created), list)
		}
		if err := e.rt.RemoveContainer(ctx, "sleeper"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.rt.ContainerStatus(ctx, "sleeper"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("status after remove: %v, want ErrNotFound", err)
		}
		if err := e.rt.RemoveContainer(ctx, "sleeper"); err != nil {
			t.Fatalf("removing twice: %v", err)
		}
	})
}

// Two simulated hosts on one kernel: each its own containerd, runc root and cgroup parent, and
// the same container ID on both.
func TestTwoHostsOneKernel(t *testing.T) {
	a, b := newEnv(t), newEnv(t)
	ctx := context.Background()
	for _, e := range []*env{a, b} {
		start := time.Now()
		e.run(ContainerConfig{ID: "same", Args: []string{"ignoreterm"}})
		t.Logf("create+start took %s", time.Since(start).Round(time.Millisecond))
	}
	sa := a.waitState("same", StateRunning, 10*time.Second)
	sb := b.waitState("same", StateRunning, 10*time.Second)
	if sa.Pid == sb.Pid {
		t.Fatalf("both hosts report pid %d", sa.Pid)
	}
	for _, e := range []*env{a, b} {
		procs := readFile(filepath.Join("/sys/fs/cgroup/memory", e.cgroup, "same", "cgroup.procs"))
		if strings.TrimSpace(procs) == "" {
			t.Errorf("no process in %s/same", e.cgroup)
		}
	}
	// Teardown of host b while its container runs (and its containerd is supervised).
	defer func() {
		if err := b.rt.Close(); err != nil {
			t.Error(err)
		}
		b.rt = nil
		if err := Teardown(ctx, b.cfg); err != nil {
			t.Fatal(err)
		}
		if syscall.Kill(int(sb.Pid), 0) == nil {
			t.Error("host b's container survived Teardown")
		}
		if pid := strings.TrimSpace(readFile(filepath.Join(b.cfg.Dir, "containerd.pid"))); pid != "" {
			t.Errorf("containerd pid file %s left behind", pid)
		}
		if left, _ := filepath.Glob("/sys/fs/cgroup/*" + b.cgroup); len(left) > 0 {
			t.Errorf("cgroups left behind: %v", left)
		}
	}()
	if err := a.rt.StopContainer(ctx, "same", 0); err != nil {
		t.Fatal(err)
	}
	if st := a.waitState("same", StateExited, 10*time.Second); st.ExitCode != 137 {
		t.Fatalf("host a: %+v", st)
	}
	if st, err := b.rt.ContainerStatus(ctx, "same"); err != nil || st.State != StateRunning || st.Pid != sb.Pid {
		t.Fatalf("stopping host a's container touched host b's: %+v, %v", st, err)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(strings.TrimSpace(s))
	return n
}

// ppid is the parent of a process (for a container's init: its shim).
func ppid(pid int) int {
	st := readFile(fmt.Sprintf("/proc/%d/stat", pid))
	if i := strings.LastIndexByte(st, ')'); i >= 0 {
		if f := strings.Fields(st[i+1:]); len(f) > 2 {
			return atoi(f[1])
		}
	}
	return 0
}
