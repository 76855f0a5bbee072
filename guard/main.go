//go:build linux

package guard

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Main runs this process as the guard, whichever binary it is (the small
// leaderrun-guard, or leaderrun re-executed), and returns its exit code.
func Main(release Releaser, log Logger) int {
	// One thread runs Go code: the guard does little, and fewer threads
	// wake fewer times.
	runtime.GOMAXPROCS(1)
	// comm, as ps and pkill see it (the main thread's, /proc/PID/comm).
	_ = os.WriteFile("/proc/self/comm", []byte(Name), 0)
	// Only "done", end of input or SIGKILL end the guard: a signal meant for
	// leaderrun (pkill, a terminal's ^C) must not disarm it.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	// The release command the guard may run must not inherit the reply pipe
	// or the lock.
	for _, fd := range []int{ReplyFD, HoldFD} {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
	}
	var reply io.Writer
	if _, err := unix.FcntlInt(ReplyFD, unix.F_GETFD, 0); err == nil {
		reply = os.NewFile(ReplyFD, "reply")
	}
	var in io.Reader = pollable(unix.Stdin, "stdin")
	if fl, err := unix.FcntlInt(uintptr(unix.Stdin), unix.F_GETFL, 0); err == nil && fl&unix.O_NONBLOCK != 0 {
		in = rawReader{in.(*os.File)}
	}
	return Run(in, reply, release, log)
}

// pollable opens fd in non-blocking mode, so that a read waiting on it parks
// in the runtime's poller instead of holding a thread in read(2). A blocked
// read(2) keeps the runtime's monitor thread awake after every message (it
// polls every 20µs until it hands the processor off), tens of wake-ups a
// message; parked in the poller, the guard sleeps until a line or a timer.
// The descriptor is the guard's own end of its pipe: leaderrun writes
// through another open file, unaffected.
func pollable(fd int, name string) *os.File {
	_ = unix.SetNonblock(fd, true)
	return os.NewFile(uintptr(fd), name)
}

// ReleaseRequest is what the guard writes on the stdin of the release
// command (`leaderrun __release`): the hello and lease messages.
func ReleaseRequest(hello []byte, handle string) string { return Hello(hello) + Lease(handle) }

// ReadReleaseRequest reads a ReleaseRequest.
func ReadReleaseRequest(r io.Reader) (hello []byte, handle string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), MaxMessage)
	for sc.Scan() {
		verb, rest, _ := strings.Cut(sc.Text(), " ")
		switch verb {
		case verbHello:
			hello = []byte(rest)
		case verbLease:
			handle = rest
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	if hello == nil || handle == "" {
		return nil, "", errors.New("release request without hello or lease")
	}
	return hello, handle, nil
}

// StderrLogger is a minimal Logger for the small guard binary: one line a
// record on stderr, timestamped, in the layout of leaderrun's own logs
// (hclog's text, or its JSON with Format "json"), under the same rules:
// one line per record, durations in seconds as KEY_s.
type StderrLogger struct {
	Level  string
	Format string // "text" (the default) or "json"
	// Out is where the lines go; nil means os.Stderr.
	Out io.Writer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (l StderrLogger) Debug(msg string, args ...any) { l.log("DEBUG", msg, args) }
func (l StderrLogger) Info(msg string, args ...any)  { l.log("INFO", msg, args) }
func (l StderrLogger) Warn(msg string, args ...any)  { l.log("WARN", msg, args) }
func (l StderrLogger) Error(msg string, args ...any) {
	l.log("ERROR", msg, args)
}

// The layouts of hclog's timestamps, text and JSON.
const (
	textTime = "2006-01-02T15:04:05.000Z0700"
	jsonTime = "2006-01-02T15:04:05.000000Z07:00"
)

func (l StderrLogger) log(level, msg string, args []any) {
	// "off" (leaderrun --log-level off) is above every record's level.
	rank := map[string]int{"TRACE": 0, "DEBUG": 1, "INFO": 2, "WARN": 3, "ERROR": 4, "OFF": 5}
	if rank[level] < rank[strings.ToUpper(l.Level)] {
		return
	}
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	out := l.Out
	if out == nil {
		out = os.Stderr
	}
	t := now()
	msg = fold(msg)
	if l.Format == "json" {
		rec := map[string]any{"@level": strings.ToLower(level), "@message": msg, "@module": "leaderrun.guard", "@timestamp": t.Format(jsonTime)}
		for i := 0; i+1 < len(args); i += 2 {
			k, v := field(fmt.Sprint(args[i]), args[i+1])
			rec[k] = v
		}
		b, err := json.Marshal(rec)
		if err != nil {
			b, _ = json.Marshal(map[string]any{"@level": strings.ToLower(level), "@message": msg, "@module": "leaderrun.guard", "@timestamp": t.Format(jsonTime), "log_error": err.Error()})
		}
		_, _ = out.Write(append(b, '\n'))
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-7s leaderrun.guard: %s", t.Format(textTime), "["+level+"]", msg)
	if len(args) > 0 {
		b.WriteString(":")
	}
	for i := 0; i+1 < len(args); i += 2 {
		k, v := field(fmt.Sprint(args[i]), args[i+1])
		val := fmt.Sprint(v)
		if _, ok := v.(float64); ok {
			val = strconv.FormatFloat(v.(float64), 'f', -1, 64)
		}
		if needsQuoting(val) {
			val = strconv.Quote(val)
		}
		fmt.Fprintf(&b, " %s=%s", k, val)
	}
	b.WriteString("\n")
	_, _ = io.WriteString(out, b.String())
}

// field is the guard's copy of leaderrun's rule for a value (package
// logline, which the small guard does not link): a duration as KEY_s in
// seconds, an error or a text of several lines folded onto one.
func field(key string, v any) (string, any) {
	switch x := v.(type) {
	case time.Duration:
		if !strings.HasSuffix(key, "_s") {
			key += "_s"
		}
		return key, x.Round(time.Millisecond).Seconds()
	case error:
		if x != nil {
			return key, fold(x.Error())
		}
	case string:
		return key, fold(x)
	case fmt.Stringer:
		return key, fold(x.String())
	}
	return key, v
}

// fold puts a text of several lines on one, its lines joined by "; ".
func fold(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	var kept []string
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if l = strings.TrimSpace(l); l != "" {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "; ")
}

// needsQuoting: hclog writes a value unquoted only if it is all of '-'
// through '~'.
func needsQuoting(s string) bool {
	for _, r := range s {
		if r < 0x2D || r > 0x7E {
			return true
		}
	}
	return false
}

// rawReader reads a non-blocking descriptor through the runtime's poller
// with raw read(2)s, which the scheduler does not see. A read made as a
// syscall the scheduler sees wakes its monitor thread (to take the
// processor back should the call block), which then sleeps again: three
// wake-ups a message where the read's own is one, and a guard at the
// default timing woke 6 times in 10s instead of 2. On a non-blocking
// descriptor read(2) never blocks, so nothing needs taking back; a
// blocking one is read as before (Main).
type rawReader struct{ f *os.File }

func (r rawReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	rc, err := r.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n uintptr
	var errno unix.Errno
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, _, errno = unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			if errno != unix.EINTR {
				return errno != unix.EAGAIN
			}
		}
	})
	if err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, errno
	}
	if n == 0 {
		return 0, io.EOF
	}
	return int(n), nil
}
