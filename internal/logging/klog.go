package logging

import (
	"flag"
	"strconv"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

var (
	klogFlagsOnce sync.Once
	klogFlags     *flag.FlagSet
)

// setupKlog sends klog to logrus and sets klog's -v from the logrus level.
// klog filters its global V() calls on -v before our sink sees them, so -v has
// to be raised for debug and trace or those lines never arrive.
func setupKlog(level logrus.Level) error {
	klogFlagsOnce.Do(func() {
		klogFlags = flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(klogFlags)
	})
	v := 0
	switch {
	case level >= logrus.TraceLevel:
		v = 10
	case level >= logrus.DebugLevel:
		v = 3
	}
	if err := klogFlags.Set("v", strconv.Itoa(v)); err != nil {
		return err
	}
	// klog's -logtostderr is left at its default (true) on purpose: once a
	// logger is set, klog writes nowhere else, while -logtostderr=false would
	// make klog.Fatal dump stacks on stderr and, should the logger ever be
	// cleared, open log files in the temp directory.
	klog.SetLoggerWithOptions(logr.New(&klogSink{}),
		// Contextual loggers (klog.FromContext, klog.Background) then call our
		// sink directly instead of looping back through klog.
		klog.ContextualLogger(true),
		// Printf-style calls (Infof, Warningf, Errorf) would otherwise reach
		// the sink as plain Info or Error and lose the warning severity.
		klog.WriteKlogBuffer(writeKlogBuffer))
	// A new configuration starts without history; what the old one held back
	// is reported first, to the old output.
	klogRepeats.reset()
	return nil
}

// klogLevel maps klog/logr verbosity to a logrus level.
func klogLevel(v int) logrus.Level {
	switch {
	case v <= 0:
		return logrus.InfoLevel
	case v <= 3:
		return logrus.DebugLevel
	}
	return logrus.TraceLevel
}

// klogSink is the logr.LogSink behind klog's structured calls (InfoS, ErrorS,
// klog.FromContext(ctx).Info, ...).
type klogSink struct {
	name   string // joined WithName parts; the component when set
	fields logrus.Fields
}

var _ logr.LogSink = (*klogSink)(nil)

func (s *klogSink) Init(logr.RuntimeInfo) {}

func (s *klogSink) Enabled(level int) bool {
	return logrus.IsLevelEnabled(klogLevel(level))
}

// Info and Error drop repeats of a line (same level, component, message and
// error, whatever the other values) beyond what klogRepeats lets through.
func (s *klogSink) Info(level int, msg string, kv ...any) {
	lvl := klogLevel(level)
	if !logrus.IsLevelEnabled(lvl) || !klogRepeats.allow(repeatKey{level: lvl, component: s.component(), msg: msg}) {
		return
	}
	s.entry(nil, kv).Log(lvl, msg)
}

func (s *klogSink) Error(err error, msg string, kv ...any) {
	if !logrus.IsLevelEnabled(logrus.ErrorLevel) {
		return
	}
	var errText any
	if err != nil {
		errText = fieldValue(err)
	}
	text, _ := errText.(string)
	if !klogRepeats.allow(repeatKey{level: logrus.ErrorLevel, component: s.component(), msg: msg, err: text}) {
		return
	}
	s.entry(errText, kv).Log(logrus.ErrorLevel, msg)
}

func (s *klogSink) WithValues(kv ...any) logr.LogSink {
	fields := make(logrus.Fields, len(s.fields)+len(kv)/2)
	for k, v := range s.fields {
		fields[k] = v
	}
	addKV(fields, kv)
	return &klogSink{name: s.name, fields: fields}
}

func (s *klogSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return &klogSink{name: name, fields: s.fields}
}

func (s *klogSink) component() string {
	if s.name != "" {
		return s.name
	}
	return "klog"
}

// entry builds the line's fields; errText is the error's fieldValue, nil for
// none.
func (s *klogSink) entry(errText any, kv []any) *logrus.Entry {
	fields := make(logrus.Fields, len(s.fields)+len(kv)/2+2)
	for k, v := range s.fields {
		fields[k] = v
	}
	addKV(fields, kv)
	if errText != nil {
		fields[logrus.ErrorKey] = errText
	}
	fields[ComponentKey] = s.component()
	return newEntry(fields)
}

// writeKlogBuffer receives klog's printf-style lines with klog's header
// ("W0102 15:04:05.000000   123 file.go:42] msg"), whose first letter is the
// severity. The header itself is dropped: logrus writes its own timestamp.
// The buffer does not say which V(n) let a line through, so V(n).Infof lines
// come out at info; klog has already filtered them on -v, which Setup derives
// from the logrus level. Repeats of a line (level and text after the header)
// are limited by klogRepeats: the API server's "watch chan error: %v" comes
// this way, once per watch.
func writeKlogBuffer(data []byte) {
	msg := strings.TrimRight(string(data), "\n")
	level := logrus.InfoLevel
	if len(msg) > 6 && msg[5] == ' ' && isDigits(msg[1:5]) {
		known := true
		switch msg[0] {
		case 'I':
		case 'W':
			level = logrus.WarnLevel
		case 'E':
			level = logrus.ErrorLevel
		case 'F':
			// Logged, not acted on: klog exits by itself after a Fatal.
			level = logrus.FatalLevel
		default:
			known = false
		}
		if i := strings.Index(msg, "] "); known && i > 0 {
			msg = msg[i+2:]
		}
	}
	if !logrus.IsLevelEnabled(level) || !klogRepeats.allow(repeatKey{level: level, component: "klog", msg: msg}) {
		return
	}
	Entry("klog").Log(level, msg)
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
