// Package guard is the dead-man guard: a tiny process, started beside the
// child and outside its process group, that SIGKILLs the child's whole group
// when leaderrun's kill point passes without an extension, or at once when
// leaderrun dies. It is what keeps the safety promise when leaderrun itself
// is frozen, deadlocked or killed (DESIGN §1.3, §1.9).
//
// leaderrun talks to it over a pipe on the guard's stdin, one message a
// line:
//
//	hello <json>           first line: how to reach the backend (opaque here)
//	lease <handle>         the lease to release if leaderrun dies
//	watch <pgid> <mono-ns> a new child group and its kill point
//	extend <mono-ns>       a later kill point after a successful renewal
//	done                   the group is gone and leadership released: exit
//
// Times are absolute CLOCK_MONOTONIC nanoseconds, the same clock in every
// process on the host and immune to wall-clock steps.
package guard

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/signals"
)

const (
	// pollInterval is how often the guard checks that its group still
	// exists. Once a group is empty its id may be reused by an unrelated
	// process, so the guard forgets it as soon as it sees it gone; reuse
	// needs the kernel to cycle through every pid in between, far slower.
	pollInterval = 100 * time.Millisecond
	// gonePoll is how often a guard that killed the group looks whether it
	// is gone, before releasing the lease: it is on the failover path.
	gonePoll = 10 * time.Millisecond
	// goneTimeout bounds the wait for a SIGKILLed group to disappear.
	goneTimeout = 5 * time.Second
	// releaseTimeout bounds releasing the lease after leaderrun died.
	releaseTimeout = 5 * time.Second
)

// Message verbs.
const (
	verbHello  = "hello"
	verbLease  = "lease"
	verbWatch  = "watch"
	verbExtend = "extend"
	verbDone   = "done"
)

// Hello, Lease, Watch, Extend and Done encode the messages leaderrun sends.
func Hello(payload []byte) string { return verbHello + " " + string(payload) + "\n" }

// Lease names the lease the guard releases if leaderrun dies.
func Lease(handle string) string { return verbLease + " " + handle + "\n" }

// Watch hands the guard a new child group and its kill point.
func Watch(pgid int, killAt int64) string {
	return fmt.Sprintf("%s %d %d\n", verbWatch, pgid, killAt)
}

// Extend moves the kill point after a successful renewal.
func Extend(killAt int64) string { return fmt.Sprintf("%s %d\n", verbExtend, killAt) }

// Done tells the guard its job is over.
func Done() string { return verbDone + "\n" }

// MonoNow reads CLOCK_MONOTONIC in nanoseconds.
func MonoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Releaser gives up a lease by its handle; it builds its backend from the
// hello payload.
type Releaser func(ctx context.Context, hello []byte, handle string) error

// Run is the guard's main loop: it reads messages from in until "done" or
// end of input, and returns the process exit code.
func Run(in io.Reader, release Releaser, log hclog.Logger) int {
	g := &state{log: log}
	lines := make(chan string)
	quit := make(chan struct{})
	defer close(quit)
	// The one reader goroutine ends at end of input, which leaderrun
	// closing the pipe after "done" (or dying) provides.
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-quit:
				return
			}
		}
	}()

	kill := time.NewTimer(time.Hour)
	kill.Stop()
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				g.leaderrunDied(release)
				return 0
			}
			if done := g.apply(line, kill); done {
				return 0
			}
		case <-kill.C:
			g.killGroup("kill point passed without a renewal")
		case <-poll.C:
			if g.pgid != 0 && !signals.GroupExists(g.pgid) {
				g.pgid = 0
			}
		}
	}
}

type state struct {
	log    hclog.Logger
	hello  []byte
	handle string
	pgid   int   // 0 when no group is watched
	killAt int64 // CLOCK_MONOTONIC ns
}

// apply applies one message and reports whether the guard is done.
func (g *state) apply(line string, kill *time.Timer) bool {
	verb, rest, _ := strings.Cut(line, " ")
	switch verb {
	case verbHello:
		g.hello = []byte(rest)
	case verbLease:
		g.handle = rest
	case verbWatch:
		f := strings.Fields(rest)
		if len(f) != 2 {
			g.log.Error("bad watch message", "line", line)
			return false
		}
		pgid, err1 := strconv.Atoi(f[0])
		at, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || pgid <= 1 {
			g.log.Error("bad watch message", "line", line)
			return false
		}
		g.pgid, g.killAt = pgid, at
		kill.Reset(time.Duration(at - MonoNow()))
	case verbExtend:
		at, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			g.log.Error("bad extend message", "line", line)
			return false
		}
		if at > g.killAt {
			g.killAt = at
			kill.Reset(time.Duration(at - MonoNow()))
		}
	case verbDone:
		return true
	default:
		g.log.Error("unknown message", "line", line)
	}
	return false
}

// killGroup SIGKILLs the watched group if it still exists.
func (g *state) killGroup(reason string) {
	if g.pgid == 0 || !signals.GroupAlive(g.pgid) {
		return
	}
	if err := signals.Group(g.pgid, syscall.SIGKILL); err != nil {
		g.log.Error("kill child group", "pgid", g.pgid, "error", err)
		return
	}
	g.log.Warn("killed the child's process group", "pgid", g.pgid, "reason", reason)
}

// leaderrunDied: the pipe closed without "done". Kill the group at once,
// wait for it to be gone, then release the lease so a standby need not wait
// for the TTL.
func (g *state) leaderrunDied(release Releaser) {
	g.killGroup("leaderrun died")
	deadline := time.Now().Add(goneTimeout)
	for g.pgid != 0 && signals.GroupAlive(g.pgid) {
		if time.Now().After(deadline) {
			g.log.Error("child group still alive; not releasing, the lease will expire", "pgid", g.pgid)
			return
		}
		time.Sleep(gonePoll)
	}
	if g.handle == "" || release == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := release(ctx, g.hello, g.handle); err != nil {
		g.log.Error("release after leaderrun died failed; the lease will expire", "error", err)
		return
	}
	g.log.Info("released leadership after leaderrun died")
}
