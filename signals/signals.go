// Package signals names signals, lists the ones leaderrun forwards, and
// delivers signals to a whole process group.
package signals

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Forwarded are the signals that leaderrun passes on to the child's process
// group unchanged (DESIGN §3). SIGTERM and SIGINT are not among them: they
// start a graceful stop instead.
var Forwarded = []os.Signal{
	syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGQUIT, syscall.SIGWINCH,
}

// Stop are the signals that ask leaderrun itself to stop gracefully.
var Stop = []os.Signal{syscall.SIGTERM, syscall.SIGINT}

// Parse reads a signal given as a name with or without the SIG prefix, in
// any case ("TERM", "sigterm", "SIGTERM"), or as a number ("15").
func Parse(s string) (syscall.Signal, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("must name a signal")
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("%d is not a signal number (1-64)", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("%q is not a known signal name", s)
}

// Name returns the conventional name of a signal, such as "SIGTERM".
func Name(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return "signal " + strconv.Itoa(int(sig))
}

// Group delivers sig to every process in process group pgid. A group that
// no longer exists is not an error: the goal, a group that got the signal or
// is gone, is met.
func Group(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		// kill(-1) and kill(0) mean "everyone" and "our own group": never.
		return fmt.Errorf("refusing to signal process group %d", pgid)
	}
	err := syscall.Kill(-pgid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("send %s to process group %d: %w", Name(sig), pgid, err)
	}
	return nil
}

// GroupExists reports whether any process, zombies included, is still in
// process group pgid. While it does, the kernel will not hand the group id to
// anyone else.
func GroupExists(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// GroupAlive reports whether a process of group pgid can still run: a
// member that is not a zombie. A zombie has released everything it held and
// can do nothing more, yet it stays in its group until its parent reaps it,
// which an init process may do seconds later; waiting for that would only
// slow a failover down.
func GroupAlive(pgid int) bool {
	if !GroupExists(pgid) {
		return false
	}
	dir, err := os.Open("/proc")
	if err != nil {
		return true // cannot tell: assume the worst
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return true
	}
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		if st, ok := readStat(name); ok && st.PGID == pgid && st.running() {
			return true
		}
	}
	return false
}

// Stat is what leaderrun needs from /proc/PID/stat.
type Stat struct {
	// State is the kernel's one-letter state: R, S, D, T, Z (zombie), X...
	State byte
	PPID  int
	PGID  int
}

func (s Stat) running() bool { return s.State != 'Z' && s.State != 'X' }

// ReadStat reads a process's state, parent and process group.
func ReadStat(pid int) (Stat, bool) { return readStat(strconv.Itoa(pid)) }

// ProcessAlive reports whether pid is a process that can still run: it
// exists and is not a zombie.
func ProcessAlive(pid int) bool {
	st, ok := ReadStat(pid)
	return ok && st.running()
}

func readStat(pid string) (Stat, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return Stat{}, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses,
	// so fields are counted from the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return Stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return Stat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return Stat{}, false
	}
	return Stat{State: f[0][0], PPID: ppid, PGID: pgid}, true
}

// NotIgnored is sigs without the signals that were ignored when this
// process started (nohup): catching one would un-ignore it, for leaderrun
// and for the child, which must inherit the ignored disposition (DESIGN
// §1.11).
func NotIgnored(sigs []os.Signal) []os.Signal {
	var out []os.Signal
	for _, s := range sigs {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}
