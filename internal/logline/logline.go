// Package logline keeps leaderrun's log records to one shape: one line per
// record, in text and JSON alike, and every duration in seconds with the
// unit in the field's name (lease_left_s=14.998, not lease_left=15000000000
// nanoseconds in JSON).
//
// Wrap applies both rules to every record of a logger, whoever logs it (the
// supervisor, a backend, the observer), so a call site passes a
// time.Duration and a multi-line error as they are.
package logline

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Seconds is d in seconds, to the millisecond: the value of every duration
// field in leaderrun's logs.
func Seconds(d time.Duration) float64 {
	return d.Round(time.Millisecond).Seconds()
}

// Fold puts a text of several lines (an errors.Join of several attempts, a
// server's multi-line answer) on one: its non-blank lines, trimmed, joined
// by "; ". A text of one line is returned as it is.
func Fold(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	kept := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "; ")
}

// Field is one key and value of a record as Wrap logs it: a duration
// becomes KEY_s in seconds (a key that already ends in _s keeps its name),
// an error or a string of several lines is folded onto one.
func Field(key string, v any) (string, any) {
	switch x := v.(type) {
	case time.Duration:
		if !strings.HasSuffix(key, "_s") {
			key += "_s"
		}
		return key, Seconds(x)
	case error:
		if x == nil {
			return key, v
		}
		if s := x.Error(); strings.ContainsAny(s, "\r\n") {
			return key, Fold(s)
		}
	case string:
		return key, Fold(x)
	case fmt.Stringer:
		if s := x.String(); strings.ContainsAny(s, "\r\n") {
			return key, Fold(s)
		}
	}
	return key, v
}

// Fields applies Field to a list of key and value pairs.
func Fields(args []any) []any {
	out := make([]any, len(args))
	copy(out, args)
	for i := 0; i+1 < len(out); i += 2 {
		if k, ok := out[i].(string); ok {
			out[i], out[i+1] = Field(k, out[i+1])
		}
	}
	return out
}

// Wrap returns l with Field applied to every record's values and Fold to
// its message, in the loggers it derives too (With, Named).
func Wrap(l hclog.Logger) hclog.Logger {
	if w, ok := l.(wrapped); ok {
		return w
	}
	return wrapped{l}
}

type wrapped struct{ hclog.Logger }

func (w wrapped) Log(level hclog.Level, msg string, args ...any) {
	w.Logger.Log(level, Fold(msg), Fields(args)...)
}
func (w wrapped) Trace(msg string, args ...any) { w.Logger.Trace(Fold(msg), Fields(args)...) }
func (w wrapped) Debug(msg string, args ...any) { w.Logger.Debug(Fold(msg), Fields(args)...) }
func (w wrapped) Info(msg string, args ...any)  { w.Logger.Info(Fold(msg), Fields(args)...) }
func (w wrapped) Warn(msg string, args ...any)  { w.Logger.Warn(Fold(msg), Fields(args)...) }
func (w wrapped) Error(msg string, args ...any) { w.Logger.Error(Fold(msg), Fields(args)...) }

func (w wrapped) With(args ...any) hclog.Logger { return wrapped{w.Logger.With(Fields(args)...)} }
func (w wrapped) Named(name string) hclog.Logger {
	return wrapped{w.Logger.Named(name)}
}
func (w wrapped) ResetNamed(name string) hclog.Logger {
	return wrapped{w.Logger.ResetNamed(name)}
}
