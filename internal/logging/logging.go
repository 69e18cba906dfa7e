// Package logging makes logrus the only voice of the flotilla binary.
//
// The agent embeds libraries that each bring their own logger: klog (client-go,
// k8s.io/apiserver, utilruntime.HandleError), zap (etcd), Go's log package
// (memberlist, net/http) and grpclog (etcd, containerd). Left alone they write
// three different formats to stderr, which makes the output impossible to
// filter or parse. Setup points all of them at the logrus standard logger, so
// one --log-level and one --log-format govern every line, and every line
// carries a "component" field saying where it came from.
package logging

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/grpclog"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// ComponentKey is the field naming the source of every line.
const ComponentKey = "component"

// Config selects how much is logged, how it looks and where it goes.
type Config struct {
	// Level is debug, info, warn (or warning), error or trace; empty means info.
	Level string
	// Format is text or json; empty means text.
	Format string
	// Out receives the log lines; nil means os.Stderr.
	Out io.Writer
}

// DefaultConfig returns info-level text logging to stderr.
func DefaultConfig() Config {
	return Config{Level: "info", Format: "text", Out: os.Stderr}
}

// ParseLevel turns a --log-level value into a logrus level.
func ParseLevel(s string) (logrus.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "info":
		return logrus.InfoLevel, nil
	case "debug":
		return logrus.DebugLevel, nil
	case "warn", "warning":
		return logrus.WarnLevel, nil
	case "error":
		return logrus.ErrorLevel, nil
	case "trace":
		return logrus.TraceLevel, nil
	}
	return 0, fmt.Errorf("--log-level %q: use debug, info, warn or error", s)
}

func parseFormat(s string) (string, error) {
	switch f := strings.ToLower(strings.TrimSpace(s)); f {
	case "", "text":
		return "text", nil
	case "json":
		return f, nil
	}
	return "", fmt.Errorf("--log-format %q: use text or json", s)
}

// Validate reports the first setting Setup would reject.
func (c Config) Validate() error {
	if _, err := ParseLevel(c.Level); err != nil {
		return err
	}
	_, err := parseFormat(c.Format)
	return err
}

// Setup configures the logrus standard logger and routes klog, utilruntime,
// Go's log package and grpclog into it. It changes process-wide state that the
// libraries read without locks, so call it once, early in main, before etcd,
// the API server or any gRPC connection starts. On error nothing is changed.
func Setup(cfg Config) error {
	level, err := ParseLevel(cfg.Level)
	if err != nil {
		return err
	}
	format, err := parseFormat(cfg.Format)
	if err != nil {
		return err
	}
	if err := setupKlog(level); err != nil {
		return err
	}

	out := cfg.Out
	if out == nil {
		out = os.Stderr
	}

	std := logrus.StandardLogger()
	std.SetOutput(out)
	std.SetLevel(level)
	if format == "json" {
		std.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	} else {
		std.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "2006-01-02T15:04:05.000Z07:00"})
	}

	// Upstream's first handler logs through klog.FromContext, which may be a
	// logger other than ours; the second only rate-limits and is kept in spirit.
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{
		logUnhandledError,
		newErrorBackoff(time.Millisecond).onError,
	}

	// Timestamps come from logrus; a second one from log.LstdFlags is noise.
	log.SetFlags(0)
	log.SetOutput(&stdWriter{component: "stdlog"})

	grpclog.SetLoggerV2(grpcLogger{})
	return nil
}

// Entry returns a logrus entry of the standard logger tagged with component.
func Entry(component string) *logrus.Entry {
	return logrus.WithField(ComponentKey, component)
}

// StdLogger returns a *log.Logger whose lines go to logrus. A leading
// [TRACE], [DEBUG], [INFO], [WARN], [ERR] or [ERROR] (memberlist, hashicorp
// libraries) picks the level and is removed; other lines are logged at info.
func StdLogger(component string) *log.Logger {
	return log.New(&stdWriter{component: component}, "", 0)
}

// newEntry avoids the copy logrus.WithFields makes; fields must be fresh.
func newEntry(fields logrus.Fields) *logrus.Entry {
	e := logrus.NewEntry(logrus.StandardLogger())
	e.Data = fields
	return e
}

// addKV adds logr-style alternating keys and values to fields.
func addKV(fields logrus.Fields, kv []any) {
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			k = fmt.Sprint(kv[i])
		}
		var v any = "(MISSING)"
		if i+1 < len(kv) {
			v = kv[i+1]
		}
		fields[k] = fieldValue(v)
	}
}

// fieldValue makes v safe for both formatters: logrus's JSON formatter drops
// the whole line (and complains on stderr) if one value fails to marshal, and
// a String method on a nil pointer must not take the caller down.
func fieldValue(v any) (out any) {
	defer func() {
		if r := recover(); r != nil {
			out = fmt.Sprintf("<panic: %v>", r)
		}
	}()
	switch x := v.(type) {
	case nil, string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, time.Time:
		return v
	case time.Duration:
		return x.String()
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	case logr.Marshaler:
		v = x.MarshalLog()
	}
	if _, err := json.Marshal(v); err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return v
}

// logUnhandledError is the utilruntime.ErrorHandler that logs through logrus.
func logUnhandledError(_ context.Context, err error, msg string, kv ...any) {
	fields := make(logrus.Fields, len(kv)/2+2)
	addKV(fields, kv)
	if err != nil {
		fields[logrus.ErrorKey] = fieldValue(err)
	}
	fields[ComponentKey] = "utilruntime"
	newEntry(fields).Error(msg)
}

// errorBackoff holds back goroutines that report errors more often than once
// per minPeriod, as the handler upstream installs intends, so a crash loop
// slows down instead of flooding the log.
type errorBackoff struct {
	minPeriod time.Duration
	mu        sync.Mutex
	next      time.Time // earliest time the next report may pass
}

func newErrorBackoff(minPeriod time.Duration) *errorBackoff {
	return &errorBackoff{minPeriod: minPeriod}
}

func (b *errorBackoff) onError(context.Context, error, string, ...any) {
	b.mu.Lock()
	now := time.Now()
	wait := b.next.Sub(now)
	if wait < 0 {
		wait = 0
	}
	b.next = now.Add(wait + b.minPeriod)
	b.mu.Unlock()
	// Sleep without the lock so only the reporting goroutine waits.
	time.Sleep(wait)
}

// stdWriter receives one line per Write from a *log.Logger.
type stdWriter struct{ component string }

var stdPrefixes = map[string]logrus.Level{
	"[TRACE]":   logrus.TraceLevel,
	"[DEBUG]":   logrus.DebugLevel,
	"[INFO]":    logrus.InfoLevel,
	"[WARN]":    logrus.WarnLevel,
	"[WARNING]": logrus.WarnLevel,
	"[ERR]":     logrus.ErrorLevel,
	"[ERROR]":   logrus.ErrorLevel,
}

func (w *stdWriter) Write(p []byte) (int, error) {
	msg := strings.TrimRight(string(p), "\r\n")
	level := logrus.InfoLevel
	if strings.HasPrefix(msg, "[") {
		if i := strings.IndexByte(msg, ']'); i > 0 {
			if l, ok := stdPrefixes[msg[:i+1]]; ok {
				level, msg = l, strings.TrimLeft(msg[i+1:], " ")
			}
		}
	}
	Entry(w.component).Log(level, msg)
	return len(p), nil
}

// grpcLogger is the grpclog.LoggerV2 (and DepthLoggerV2) writing to logrus.
// gRPC's info lines describe every connection state change, and its warnings
// every failed dial of a connection it keeps retrying (etcd clients while a
// member restarts): both are logged at debug. What a user must act on reaches
// them through etcd's and the API server's own errors.
type grpcLogger struct{}

var _ grpclog.DepthLoggerV2 = grpcLogger{}

func grpcLog() *logrus.Entry { return Entry("grpc") }

func (grpcLogger) Info(a ...any)               { grpcLog().Log(logrus.DebugLevel, a...) }
func (grpcLogger) Infoln(a ...any)             { grpcLog().Logln(logrus.DebugLevel, a...) }
func (grpcLogger) Infof(f string, a ...any)    { grpcLog().Logf(logrus.DebugLevel, f, a...) }
func (grpcLogger) Warning(a ...any)            { grpcLog().Log(logrus.DebugLevel, a...) }
func (grpcLogger) Warningln(a ...any)          { grpcLog().Logln(logrus.DebugLevel, a...) }
func (grpcLogger) Warningf(f string, a ...any) { grpcLog().Logf(logrus.DebugLevel, f, a...) }
func (grpcLogger) Error(a ...any)              { grpcLog().Log(logrus.ErrorLevel, a...) }
func (grpcLogger) Errorln(a ...any)            { grpcLog().Logln(logrus.ErrorLevel, a...) }
func (grpcLogger) Errorf(f string, a ...any)   { grpcLog().Logf(logrus.ErrorLevel, f, a...) }

// The Fatal methods only log: grpclog itself exits afterwards.
func (grpcLogger) Fatal(a ...any)            { grpcLog().Log(logrus.FatalLevel, a...) }
func (grpcLogger) Fatalln(a ...any)          { grpcLog().Logln(logrus.FatalLevel, a...) }
func (grpcLogger) Fatalf(f string, a ...any) { grpcLog().Logf(logrus.FatalLevel, f, a...) }

func (grpcLogger) InfoDepth(_ int, a ...any)    { grpcLog().Logln(logrus.DebugLevel, a...) }
func (grpcLogger) WarningDepth(_ int, a ...any) { grpcLog().Logln(logrus.DebugLevel, a...) }
func (grpcLogger) ErrorDepth(_ int, a ...any)   { grpcLog().Logln(logrus.ErrorLevel, a...) }
func (grpcLogger) FatalDepth(_ int, a ...any)   { grpcLog().Logln(logrus.FatalLevel, a...) }

// V guards gRPC's verbose info lines: level 0 at debug, anything above at trace.
func (grpcLogger) V(l int) bool {
	if l <= 0 {
		return logrus.IsLevelEnabled(logrus.DebugLevel)
	}
	return logrus.IsLevelEnabled(logrus.TraceLevel)
}
