package runtime

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/core/containers"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestResolveArgs(t *testing.T) {
	ep, cmd := []string{"/app"}, []string{"serve", "--port=80"}
	for _, tc := range []struct {
		name          string
		command, args []string
		want          []string
	}{
		{"image defaults", nil, nil, []string{"/app", "serve", "--port=80"}},
		{"command drops cmd", []string{"/bin/sh", "-c"}, nil, []string{"/bin/sh", "-c"}},
		{"command and args", []string{"/bin/sh"}, []string{"-c", "true"}, []string{"/bin/sh", "-c", "true"}},
		{"args replace cmd", nil, []string{"sleep"}, []string{"/app", "sleep"}},
	} {
		if got := resolveArgs(ep, cmd, tc.command, tc.args); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := resolveArgs(nil, []string{"/bin/true"}, nil, nil); !reflect.DeepEqual(got, []string{"/bin/true"}) {
		t.Errorf("cmd only: %q", got)
	}
}

func TestComputeCaps(t *testing.T) {
	def := []string{"CAP_CHOWN", "CAP_KILL", "CAP_NET_RAW"}
	for _, tc := range []struct {
		name      string
		add, drop []string
		want      []string
	}{
		{"unchanged", nil, nil, []string{"CAP_CHOWN", "CAP_KILL", "CAP_NET_RAW"}},
		{"add short name", []string{"NET_ADMIN"}, nil, []string{"CAP_CHOWN", "CAP_KILL", "CAP_NET_ADMIN", "CAP_NET_RAW"}},
		{"drop long name", nil, []string{"CAP_NET_RAW"}, []string{"CAP_CHOWN", "CAP_KILL"}},
		{"drop all add one", []string{"net_bind_service"}, []string{"ALL"}, []string{"CAP_NET_BIND_SERVICE"}},
		{"drop all", nil, []string{"all"}, []string{}},
		{"add all drop one", []string{"ALL"}, []string{"CHOWN"}, nil},
		{"drop all add all", []string{"all"}, []string{"ALL"}, []string{}},
	} {
		got := computeCaps(def, tc.add, tc.drop)
		if tc.want == nil {
			// Every capability of the host but CAP_CHOWN.
			if slices.Contains(got, "CAP_CHOWN") || len(got) != len(hostCapabilities())-1 {
				t.Errorf("%s: got %q", tc.name, got)
			}
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := computeCaps(nil, []string{"ALL"}, nil); len(got) != len(hostCapabilities()) {
		t.Errorf("add ALL gives %d caps, want the host's %d", len(got), len(hostCapabilities()))
	}
}

func TestMountOptions(t *testing.T) {
	typ, src, opts := mountOptions(Mount{Source: "/h", Destination: "/c", ReadOnly: true})
	if typ != "bind" || src != "/h" || !reflect.DeepEqual(opts, []string{"rbind", "rprivate", "ro"}) {
		t.Errorf("bind ro: %s %s %q", typ, src, opts)
	}
	typ, src, opts = mountOptions(Mount{Type: "tmpfs", Destination: "/c", Options: []string{"size=1m"}})
	if typ != "tmpfs" || src != "tmpfs" || !reflect.DeepEqual(opts, []string{"nosuid", "nodev", "size=1m"}) {
		t.Errorf("tmpfs: %s %s %q", typ, src, opts)
	}
}

func TestNormalizeRef(t *testing.T) {
	for in, want := range map[string]string{
		"nginx":                       "docker.io/library/nginx:latest",
		"nginx:1.27":                  "docker.io/library/nginx:1.27",
		"flotilla.local/hello":        "flotilla.local/hello:latest",
		"127.0.0.1:5000/a/b:v2":       "127.0.0.1:5000/a/b:v2",
		"flotilla.local/hello:latest": "flotilla.local/hello:latest",
	} {
		if got, err := NormalizeRef(in); err != nil || got != want {
			t.Errorf("NormalizeRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := NormalizeRef("Bad Ref"); err == nil {
		t.Error("NormalizeRef accepted an invalid reference")
	}
	if got := ociRefName("latest"); got != "" {
		t.Errorf("a bare tag named an image: %q", got)
	}
}

func TestStatusFrom(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := func(labels map[string]string) containers.Container {
		l := map[string]string{labelImage: "flotilla.local/x:latest", labelImageID: "sha256:abc", "app": "web"}
		for k, v := range labels {
			l[k] = v
		}
		return containers.Container{ID: "c", Labels: l, CreatedAt: t0}
	}
	started := map[string]string{labelStartedAt: t0.Add(time.Second).Format(time.RFC3339Nano)}
	for _, tc := range []struct {
		name  string
		c     containers.Container
		p     *tasktypes.Process
		state State
		code  int32
		oom   bool
	}{
		{"created", base(nil), nil, StateCreated, 0, false},
		{"running", base(started), &tasktypes.Process{Pid: 42, Status: tasktypes.Status_RUNNING}, StateRunning, 0, false},
		{"stopped task", base(started), &tasktypes.Process{Status: tasktypes.Status_STOPPED, ExitStatus: 3, ExitedAt: timestamppb.New(t0.Add(2 * time.Second))}, StateExited, 3, false},
		{"reaped", base(map[string]string{labelStartedAt: started[labelStartedAt], labelFinishedAt: t0.Add(3 * time.Second).Format(time.RFC3339Nano), labelExitCode: "137", labelOOMKilled: "true"}), nil, StateExited, 137, true},
		{"shim lost", base(started), nil, StateUnknown, 0, false},
		{"start error", base(map[string]string{labelFinishedAt: t0.Add(time.Second).Format(time.RFC3339Nano), labelExitCode: "128", labelStartError: "exec: \"/x\": no such file"}), nil, StateExited, 128, false},
	} {
		st := statusFrom(tc.c, tc.p)
		if st.State != tc.state || st.ExitCode != tc.code || st.OOMKilled != tc.oom {
			t.Errorf("%s: %+v", tc.name, st)
		}
		if !reflect.DeepEqual(st.Labels, map[string]string{"app": "web"}) || st.ImageID != "sha256:abc" {
			t.Errorf("%s: labels %v image %q", tc.name, st.Labels, st.ImageID)
		}
		if (st.StartError != "") != (tc.name == "start error") {
			t.Errorf("%s: start error %q", tc.name, st.StartError)
		}
		if tc.state == StateExited && (st.FinishedAt.IsZero() || st.FinishedAt.Before(st.StartedAt)) {
			t.Errorf("%s: finished %v started %v", tc.name, st.FinishedAt, st.StartedAt)
		}
	}
}

func TestCRIWriter(t *testing.T) {
	var buf bytes.Buffer
	w := &criWriter{w: &buf, now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC) }}
	long := strings.Repeat("x", maxLogLine+10)
	w.copyStream("stdout", strings.NewReader("one\ntwo\n"+long+"\nno newline"))
	w.copyStream("stderr", strings.NewReader("err\n"))
	want := "2026-01-02T03:04:05.0000006Z stdout F one\n" +
		"2026-01-02T03:04:05.0000006Z stdout F two\n" +
		"2026-01-02T03:04:05.0000006Z stdout P " + long[:maxLogLine] + "\n" +
		"2026-01-02T03:04:05.0000006Z stdout F " + long[maxLogLine:] + "\n" +
		"2026-01-02T03:04:05.0000006Z stdout F no newline\n" +
		"2026-01-02T03:04:05.0000006Z stderr F err\n"
	if buf.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
	// A partial entry reads back as one line.
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := ReadLogs(context.Background(), p, LogOptions{Tail: -1}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if out.String() != "one\ntwo\n"+long+"\nno newline\n" || errb.String() != "err\n" {
		t.Fatalf("read back: %q / %q", out.String(), errb.String())
	}
}

func TestReadLogs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.log")
	content := "2026-01-01T00:00:01Z stdout F a\n" +
		"2026-01-01T00:00:02Z stderr F b\n" +
		"malformed\n" +
		"2026-01-01T00:00:03.5Z stdout F c\n" +
		"2026-01-01T00:00:04Z stdout F \n"
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		opts         LogOptions
		stdout, errs string
	}{
		{"all", LogOptions{Tail: -1}, "a\nc\n\n", "b\n"},
		{"tail 2", LogOptions{Tail: 2}, "c\n\n", ""},
		{"tail 0", LogOptions{Tail: 0}, "", ""},
		{"tail beyond", LogOptions{Tail: 100}, "a\nc\n\n", "b\n"},
		{"since", LogOptions{Tail: -1, Since: time.Date(2026, 1, 1, 0, 0, 2, 0, time.UTC)}, "c\n\n", "b\n"},
		{"timestamps", LogOptions{Tail: 3, Timestamps: true}, "2026-01-01T00:00:03.5Z c\n2026-01-01T00:00:04Z \n", ""},
		{"limit bytes", LogOptions{Tail: -1, LimitBytes: 3}, "a\n", "b"},
	} {
		var out, errb bytes.Buffer
		if err := ReadLogs(ctx, p, tc.opts, &out, &errb); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if out.String() != tc.stdout || errb.String() != tc.errs {
			t.Errorf("%s: stdout %q stderr %q, want %q %q", tc.name, out.String(), errb.String(), tc.stdout, tc.errs)
		}
	}
	if err := ReadLogs(ctx, filepath.Join(t.TempDir(), "absent"), LogOptions{Tail: -1}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Error("reading a missing log succeeded")
	}
}

// syncBuffer is a bytes.Buffer safe for one writer goroutine and one reader.
type syncBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.buf.String()
}

func TestReadLogsFollow(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.log")
	if err := os.WriteFile(p, []byte("2026-01-01T00:00:01Z stdout F old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{mu: make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() { done <- ReadLogs(ctx, p, LogOptions{Follow: true, Tail: 0}, out, out) }()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A line written in two pieces is printed once, whole.
	time.Sleep(150 * time.Millisecond)
	_, _ = f.WriteString("2026-01-01T00:00:02Z stdout F ne")
	time.Sleep(250 * time.Millisecond)
	_, _ = f.WriteString("w\n")
	deadline := time.Now().Add(5 * time.Second)
	for out.String() != "new\n" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := out.String(); got != "new\n" {
		t.Fatalf("followed %q, want %q", got, "new\n")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("follow did not stop when ctx ended")
	}
}

func TestTailOffset(t *testing.T) {
	data := "a\nbb\nccc\n"
	r := strings.NewReader(data)
	for n, want := range map[int64]string{0: "", 1: "ccc\n", 2: "bb\nccc\n", 3: data, 9: data, -1: data} {
		off, err := tailOffset(r, int64(len(data)), n)
		if err != nil || data[off:] != want {
			t.Errorf("tail %d: %q, %v; want %q", n, data[off:], err, want)
		}
	}
	noNL := "a\nb"
	if off, _ := tailOffset(strings.NewReader(noNL), 3, 1); noNL[off:] != "b" {
		t.Errorf("tail 1 without final newline: %q", noNL[off:])
	}
}

func TestConfigTOML(t *testing.T) {
	s := configTOML("/d/containerd")
	for _, want := range []string{`root = "/d/containerd/root"`, `state = "/d/containerd/state"`,
		`address = "/d/containerd/containerd.sock"`, `"io.containerd.grpc.v1.cri"`} {
		if !strings.Contains(s, want) {
			t.Errorf("config lacks %s:\n%s", want, s)
		}
	}
}
