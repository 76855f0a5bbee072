// Package signals names signals, lists the ones leaderrun forwards, and
// delivers signals to a whole process group.
package signals

import (
	"errors"
	"fmt"
	"os"
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

// GroupAlive reports whether any process, zombies included, is still in
// process group pgid.
func GroupAlive(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
