//go:build linux

package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/grpclog"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

// captureStderr points file descriptor 2 and os.Stderr at a file until the
// returned function is called, which returns what was written. Redirecting
// the descriptor, not just the variable, also catches writers that kept the
// original *os.File (grpclog's default logger does).
func captureStderr(t *testing.T) func() string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	saved, err := unix.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Dup2(int(f.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	oldStderr := os.Stderr
	os.Stderr = f
	var once sync.Once
	restore := func() {
		once.Do(func() {
			os.Stderr = oldStderr
			_ = unix.Dup2(saved, 2)
			_ = unix.Close(saved)
		})
	}
	t.Cleanup(restore)
	return func() string {
		restore()
		data, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
}

// jsonLines decodes every line of out, failing the test on any line that is
// not one JSON object with level, msg, time and component.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("line is not one JSON object: %v\n%s", err, line)
			continue
		}
		for _, k := range []string{"level", "msg", "time", ComponentKey} {
			if s, _ := rec[k].(string); s == "" {
				t.Errorf("line has no %q: %s", k, line)
			}
		}
		if ts, _ := rec["time"].(string); ts != "" {
			if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
				t.Errorf("time %q is not RFC 3339: %v", ts, err)
			}
		}
		recs = append(recs, rec)
	}
	return recs
}

type want struct{ level, component string }

// checkExactly fails unless recs hold each message of w once, with the level
// and component given, and nothing else.
func checkExactly(t *testing.T, recs []map[string]any, w map[string]want) map[string]map[string]any {
	t.Helper()
	byMsg := map[string]map[string]any{}
	for _, rec := range recs {
		msg := rec["msg"].(string)
		exp, ok := w[msg]
		if !ok {
			t.Errorf("unexpected line: %v", rec)
			continue
		}
		if _, dup := byMsg[msg]; dup {
			t.Errorf("line logged twice: %v", rec)
		}
		byMsg[msg] = rec
		if rec["level"] != exp.level || rec[ComponentKey] != exp.component {
			t.Errorf("%q: got level %v component %v, want %s %s", msg, rec["level"], rec[ComponentKey], exp.level, exp.component)
		}
	}
	for msg := range w {
		if _, ok := byMsg[msg]; !ok {
			t.Errorf("missing line %q", msg)
		}
	}
	return byMsg
}

func checkField(t *testing.T, byMsg map[string]map[string]any, msg, key string, value any) {
	t.Helper()
	if rec, ok := byMsg[msg]; ok && rec[key] != value {
		t.Errorf("%q: field %s = %#v, want %#v", msg, key, rec[key], value)
	}
}

func TestJSONRoutesEverySource(t *testing.T) {
	stderr := captureStderr(t)
	var buf bytes.Buffer
	if err := Setup(Config{Level: "info", Format: "json", Out: &buf}); err != nil {
		t.Fatal(err)
	}

	Entry("test").Info("logrus line")
	Entry("test").Debug("logrus debug hidden")

	klog.InfoS("klog structured", "pod", klog.KRef("default", "web"), "count", 3)
	klog.Infof("klog printf %d", 7)
	// A value encoding/json rejects must not cost the line (logrus would drop
	// it and complain on stderr); a trailing key without value is kept.
	klog.InfoS("klog odd values", "ch", make(chan int), "wait", 2*time.Second, "dangling")
	klog.Warningf("klog warning %s", "w")
	klog.ErrorS(errors.New("boom"), "klog error", "node", "n1")
	klog.Errorf("klog errorf %d", 2)
	klog.V(4).InfoS("klog v4 hidden")
	klog.V(2).Infof("klog v2 printf hidden")
	klog.Background().WithName("ctrl").WithValues("ctrlkey", "x").Info("klog named")
	klog.Background().V(1).Info("klog contextual v1 hidden")

	utilruntime.HandleError(errors.New("handled"))
	utilruntime.HandleErrorWithContext(context.Background(), errors.New("ctx boom"), "runtime with context", "key", "value")

	z := Zap("zaptest").With(zap.String("member", "m1"))
	z.Debug("zap debug hidden")
	z.Info("zap info", zap.Int("n", 1))
	z.Warn("zap warn")
	z.Error("zap error", zap.Error(errors.New("zap boom")))
	etcd := ZapAtLeast("etcd", logrus.WarnLevel)
	etcd.Info("etcd info hidden")
	etcd.Warn("etcd warn")
	etcd.Named("raft").Warn("raft warn")

	log.Printf("std log line")
	ml := StdLogger("memberlist")
	ml.Printf("[DEBUG] memberlist: debug hidden")
	ml.Printf("[INFO] memberlist: info line")
	ml.Printf("[WARN] memberlist: warn line")
	ml.Printf("[ERR] memberlist: err line")
	ml.Printf("no prefix line")

	grpclog.Info("grpc info hidden")
	grpclog.Warning("grpc warning hidden")
	grpclog.Errorf("grpc error %d", 1)
	core := grpclog.Component("core")
	core.Infof("grpc component info hidden")
	core.Warningf("grpc component warning hidden")

	recs := jsonLines(t, buf.String())
	byMsg := checkExactly(t, recs, map[string]want{
		"logrus line":           {"info", "test"},
		"klog structured":       {"info", "klog"},
		"klog printf 7":         {"info", "klog"},
		"klog odd values":       {"info", "klog"},
		"klog warning w":        {"warning", "klog"},
		"klog error":            {"error", "klog"},
		"klog errorf 2":         {"error", "klog"},
		"klog named":            {"info", "ctrl"},
		"Unhandled Error":       {"error", "utilruntime"},
		"runtime with context":  {"error", "utilruntime"},
		"zap info":              {"info", "zaptest"},
		"zap warn":              {"warning", "zaptest"},
		"zap error":             {"error", "zaptest"},
		"etcd warn":             {"warning", "etcd"},
		"raft warn":             {"warning", "etcd"},
		"std log line":          {"info", "stdlog"},
		"memberlist: info line": {"info", "memberlist"},
		"memberlist: warn line": {"warning", "memberlist"},
		"memberlist: err line":  {"error", "memberlist"},
		"no prefix line":        {"info", "memberlist"},
		"grpc error 1":          {"error", "grpc"},
	})
	checkField(t, byMsg, "klog structured", "pod", "default/web")
	checkField(t, byMsg, "klog structured", "count", float64(3))
	checkField(t, byMsg, "klog odd values", "wait", "2s")
	checkField(t, byMsg, "klog odd values", "dangling", "(MISSING)")
	if ch, _ := byMsg["klog odd values"]["ch"].(string); !strings.HasPrefix(ch, "0x") {
		t.Errorf("channel value logged as %#v, want its address", byMsg["klog odd values"]["ch"])
	}
	checkField(t, byMsg, "klog error", "error", "boom")
	checkField(t, byMsg, "klog error", "node", "n1")
	checkField(t, byMsg, "klog named", "ctrlkey", "x")
	checkField(t, byMsg, "Unhandled Error", "error", "handled")
	checkField(t, byMsg, "runtime with context", "error", "ctx boom")
	checkField(t, byMsg, "runtime with context", "key", "value")
	checkField(t, byMsg, "zap info", "member", "m1")
	checkField(t, byMsg, "zap info", "n", float64(1))
	checkField(t, byMsg, "zap error", "error", "zap boom")
	checkField(t, byMsg, "raft warn", "logger", "raft")

	if got := stderr(); got != "" {
		t.Errorf("bypassed logrus and reached stderr:\n%s", got)
	}
}

func TestDebugAndTraceShowVerboseSources(t *testing.T) {
	stderr := captureStderr(t)
	var buf bytes.Buffer
	if err := Setup(Config{Level: "debug", Format: "json", Out: &buf}); err != nil {
		t.Fatal(err)
	}
	klog.V(2).InfoS("klog v2 structured")
	klog.Background().V(3).Info("klog contextual v3")
	klog.V(4).InfoS("klog v4 hidden")
	klog.Background().V(4).Info("klog contextual v4 hidden")
	etcd := ZapAtLeast("etcd", logrus.WarnLevel)
	etcd.Info("etcd info")
	etcd.Debug("etcd debug")
	StdLogger("memberlist").Print("[DEBUG] memberlist: debug line")
	grpclog.Info("grpc info")
	grpclog.Warning("grpc warning")
	if !grpclog.V(0) || grpclog.V(2) {
		t.Errorf("at debug grpclog.V(0) = %v, V(2) = %v; want true, false", grpclog.V(0), grpclog.V(2))
	}
	checkExactly(t, jsonLines(t, buf.String()), map[string]want{
		"klog v2 structured":     {"debug", "klog"},
		"klog contextual v3":     {"debug", "klog"},
		"etcd info":              {"info", "etcd"},
		"etcd debug":             {"debug", "etcd"},
		"memberlist: debug line": {"debug", "memberlist"},
		"grpc info":              {"debug", "grpc"},
		"grpc warning":           {"debug", "grpc"},
	})

	buf.Reset()
	if err := Setup(Config{Level: "trace", Format: "json", Out: &buf}); err != nil {
		t.Fatal(err)
	}
	klog.V(4).InfoS("klog v4 structured")
	klog.V(6).Infof("klog v6 printf")
	if !grpclog.V(2) {
		t.Error("at trace grpclog.V(2) = false")
	}
	recs := jsonLines(t, buf.String())
	byMsg := map[string]string{}
	for _, rec := range recs {
		byMsg[rec["msg"].(string)], _ = rec["level"].(string)
	}
	if byMsg["klog v4 structured"] != "trace" {
		t.Errorf("klog.V(4).InfoS at trace: level %q, want trace; output:\n%s", byMsg["klog v4 structured"], buf.String())
	}
	if _, ok := byMsg["klog v6 printf"]; !ok {
		t.Errorf("klog.V(6).Infof missing at trace; output:\n%s", buf.String())
	}

	if got := stderr(); got != "" {
		t.Errorf("bypassed logrus and reached stderr:\n%s", got)
	}
}

func TestTextFormat(t *testing.T) {
	stderr := captureStderr(t)
	var buf bytes.Buffer
	if err := Setup(Config{Level: "warning", Format: "TEXT", Out: &buf}); err != nil {
		t.Fatal(err)
	}
	klog.InfoS("info hidden at warn")
	klog.ErrorS(errors.New("disk full"), "text error", "k", "v")
	Entry("test").Warn("careful")

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %d:\n%s", len(lines), buf.String())
	}
	stamp := regexp.MustCompile(`^time="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)" `)
	for _, line := range lines {
		if !stamp.MatchString(line) {
			t.Errorf("no full timestamp: %s", line)
		}
	}
	for _, part := range []string{`level=error`, `msg="text error"`, `component=klog`, `error="disk full"`, `k=v`} {
		if !strings.Contains(lines[0], part) {
			t.Errorf("first line lacks %s: %s", part, lines[0])
		}
	}
	for _, part := range []string{`level=warning`, `msg=careful`, `component=test`} {
		if !strings.Contains(lines[1], part) {
			t.Errorf("second line lacks %s: %s", part, lines[1])
		}
	}
	if got := stderr(); got != "" {
		t.Errorf("bypassed logrus and reached stderr:\n%s", got)
	}
}

func TestBadInput(t *testing.T) {
	for in, lvl := range map[string]logrus.Level{
		"debug": logrus.DebugLevel, "info": logrus.InfoLevel, "": logrus.InfoLevel,
		"warn": logrus.WarnLevel, " WARNING ": logrus.WarnLevel, "error": logrus.ErrorLevel,
		"trace": logrus.TraceLevel,
	} {
		if got, err := ParseLevel(in); err != nil || got != lvl {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, lvl)
		}
	}
	if d := DefaultConfig(); d.Validate() != nil || d.Level != "info" || d.Format != "text" || d.Out != os.Stderr {
		t.Errorf("DefaultConfig() = %+v", d)
	}

	logrus.SetLevel(logrus.WarnLevel)
	var buf bytes.Buffer
	for _, tc := range []struct {
		cfg Config
		msg string
	}{
		{Config{Level: "loud", Format: "json"}, `--log-level "loud": use debug, info, warn or error`},
		{Config{Level: "fatal"}, `--log-level "fatal": use debug, info, warn or error`},
		{Config{Level: "info", Format: "xml"}, `--log-format "xml": use text or json`},
	} {
		if err := tc.cfg.Validate(); err == nil || err.Error() != tc.msg {
			t.Errorf("Validate(%+v) = %v, want %s", tc.cfg, err, tc.msg)
		}
		tc.cfg.Out = &buf
		if err := Setup(tc.cfg); err == nil || err.Error() != tc.msg {
			t.Errorf("Setup(%+v) = %v, want %s", tc.cfg, err, tc.msg)
		}
	}
	if logrus.GetLevel() != logrus.WarnLevel || logrus.StandardLogger().Out == io.Writer(&buf) {
		t.Error("a rejected Setup changed the logger")
	}
}

func TestUnhandledErrorsAreRateLimited(t *testing.T) {
	if err := Setup(Config{Level: "info", Format: "json", Out: io.Discard}); err != nil {
		t.Fatal(err)
	}
	const n = 50
	start := time.Now()
	for i := 0; i < n; i++ {
		utilruntime.HandleError(errors.New("loop"))
	}
	// Each report after the first waits until a millisecond has passed.
	if d := time.Since(start); d < (n-5)*time.Millisecond {
		t.Errorf("%d errors logged in %s: a crash loop would flood the log", n, d)
	}
}
