//go:build linux

package cmdline

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// Under systemd, stderr is a stream into the journal and JOURNAL_STREAM
// names it (device:inode). journald then reads a "<N>" at the start of a
// line as that line's syslog priority (sd-daemon(3)), so `journalctl -p
// warning` finds leaderrun's WARN and ERROR lines. Anywhere else the output
// is left as it is.

// Syslog priorities, as sd-daemon.h spells them.
const (
	sdErr     = 3
	sdWarning = 4
	sdInfo    = 6
	sdDebug   = 7
)

// logOutput is where leaderrun's logs go: stderr, with journal priorities
// when stderr is the journal stream systemd set up.
func logOutput() io.Writer {
	if toJournal(os.Getenv("JOURNAL_STREAM"), os.Stderr) {
		return &journalWriter{w: os.Stderr}
	}
	return os.Stderr
}

// warnOutput is errorOutput for a warning: the journal records it at
// warning level.
func warnOutput() io.Writer {
	if w, ok := logOutput().(*journalWriter); ok {
		return levelFixed{w, hclog.Warn}
	}
	return os.Stderr
}

// errorOutput is where a one-line fatal error goes: like logOutput, with
// every line marked an error for the journal.
func errorOutput() io.Writer {
	if w, ok := logOutput().(*journalWriter); ok {
		return levelFixed{w, hclog.Error}
	}
	return os.Stderr
}

// toJournal reports whether f is the stream JOURNAL_STREAM names. The
// variable is inherited, so a redirected stderr of a process started from a
// unit must not be taken for the journal.
func toJournal(stream string, f *os.File) bool {
	if stream == "" {
		return false
	}
	var dev, ino uint64
	if n, err := fmt.Sscanf(stream, "%d:%d", &dev, &ino); n != 2 || err != nil {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == dev && st.Ino == ino
}

// journalWriter prefixes every line of a log record with the journal
// priority of the record's level. hclog hands it whole records through
// LevelWrite; plain writes count as info.
type journalWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (j *journalWriter) Write(p []byte) (int, error) { return j.LevelWrite(hclog.Info, p) }

// LevelWrite implements hclog.LevelWriter.
func (j *journalWriter) LevelWrite(level hclog.Level, p []byte) (int, error) {
	prefix := fmt.Appendf(nil, "<%d>", priority(level))
	var out bytes.Buffer
	for rest := p; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i+1], rest[i+1:]
		} else {
			rest = nil
		}
		out.Write(prefix)
		out.Write(line)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.w.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// levelFixed writes everything at one level.
type levelFixed struct {
	j     *journalWriter
	level hclog.Level
}

func (l levelFixed) Write(p []byte) (int, error) { return l.j.LevelWrite(l.level, p) }

func priority(level hclog.Level) int {
	switch {
	case level >= hclog.Error:
		return sdErr
	case level == hclog.Warn:
		return sdWarning
	case level == hclog.Info:
		return sdInfo
	default:
		return sdDebug
	}
}
