package logging

import (
	"github.com/sirupsen/logrus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Zap returns a zap.Logger that writes into logrus, tagged with component.
// Lines are dropped before encoding when logrus would not print their level.
func Zap(component string) *zap.Logger {
	return ZapAtLeast(component, logrus.TraceLevel)
}

// ZapAtLeast is Zap for chatty libraries: lines less severe than least are kept
// only while logrus is at debug or trace. For etcd use
// ZapAtLeast("etcd", logrus.WarnLevel): at the default info level etcd shows
// warnings and errors, at debug also its info lines.
func ZapAtLeast(component string, least logrus.Level) *zap.Logger {
	return zap.New(&zapCore{component: component, least: least})
}

// zapCore is a zapcore.Core whose only output is the logrus standard logger.
type zapCore struct {
	component string
	least     logrus.Level
	fields    []zapcore.Field // from With, encoded at write time
}

var _ zapcore.Core = (*zapCore)(nil)

func zapLevel(l zapcore.Level) logrus.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return logrus.DebugLevel
	case l == zapcore.InfoLevel:
		return logrus.InfoLevel
	case l == zapcore.WarnLevel:
		return logrus.WarnLevel
	}
	return logrus.ErrorLevel
}

// Enabled reads the logrus level on every call, so a level changed after
// the logger was built still applies.
func (c *zapCore) Enabled(l zapcore.Level) bool {
	lv := zapLevel(l)
	if !logrus.IsLevelEnabled(lv) {
		return false
	}
	return lv <= c.least || logrus.IsLevelEnabled(logrus.DebugLevel)
}

func (c *zapCore) With(fields []zapcore.Field) zapcore.Core {
	all := make([]zapcore.Field, 0, len(c.fields)+len(fields))
	all = append(append(all, c.fields...), fields...)
	return &zapCore{component: c.component, least: c.least, fields: all}
}

func (c *zapCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

func (c *zapCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	out := make(logrus.Fields, len(enc.Fields)+3)
	for k, v := range enc.Fields {
		out[k] = fieldValue(v)
	}
	if ent.LoggerName != "" {
		out["logger"] = ent.LoggerName
	}
	if ent.Stack != "" {
		out["stacktrace"] = ent.Stack
	}
	out[ComponentKey] = c.component
	// Log, not Fatal or Panic: zap itself exits or panics after writing.
	e := newEntry(out)
	e.Time = ent.Time
	e.Log(zapLevel(ent.Level), ent.Message)
	return nil
}

func (c *zapCore) Sync() error { return nil }
