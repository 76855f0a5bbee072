//go:build linux

// Package guard is the dead-man guard: a small process, started by
// leaderrun before the first child of each leadership term and outside the
// child's process group, that kills the whole job (its cgroup, or its
// process group and everything marked as its own) when leaderrun's kill
// point passes without an extension, or at once when leaderrun dies; and
// only then releases the lease (DESIGN §1.3, §1.4, §1.9).
//
// protocol.go is the wire format both ends speak; this file is the guard's
// end, parent.go the supervisor's. The package imports only the standard
// library, golang.org/x/sys and package contain, so the leaderrun-guard
// binary stays small: while the job runs, the guard sleeps on its pipe and
// one timer.
package guard

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/contain"
)

const (
	// goneTimeout bounds one round of killing the job and waiting for it
	// to disappear. A job that outlives it is killed again, round after
	// round, and its lease is not released meanwhile.
	goneTimeout = 5 * time.Second
	// retryKill is the pause between two rounds.
	retryKill = 100 * time.Millisecond
	// releaseTimeout bounds releasing the lease.
	releaseTimeout = 5 * time.Second
)

// Logger is the part of a structured logger the guard uses; hclog.Logger
// has it.
type Logger interface {
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

// Releaser gives up a lease by its handle; it builds its backend from the
// hello payload.
type Releaser func(ctx context.Context, hello []byte, handle string) error

// Run is the guard's main loop: it reads messages from in until "done" or
// end of input, answers on reply (may be nil), and returns the process exit
// code.
func Run(in io.Reader, reply io.Writer, release Releaser, log Logger) int {
	g := &state{log: log, reply: reply, release: release, hold: -1, supervisor: supervisorPID()}
	defer g.closeHold()
	lines := make(chan string)
	quit := make(chan struct{})
	defer close(quit)
	// The one reader goroutine ends at end of input, which leaderrun
	// closing the pipe after "done" (or dying) provides.
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64*1024), MaxMessage)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-quit:
				return
			}
		}
	}()

	kill := newAlarm()
	defer kill.stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				g.leaderrunDied()
				return 0
			}
			if done := g.apply(line, kill); done {
				return 0
			}
		case <-kill.c:
			// A report can trail an extension that moved the kill point
			// later: only the clock decides.
			if MonoNow() >= g.killAt {
				g.killPointPassed()
				if g.job != nil {
					// Still alive: keep killing it, whatever comes on
					// the pipe meanwhile (DESIGN §1.9).
					kill.set(MonoNow() + int64(retryKill))
				}
			}
		}
	}
}

// supervisorPID is the leaderrun that started the guard: its parent. Tests
// that run the guard's loop in their own process set it to that process,
// whose parent (the go command) has children that are no job's.
var supervisorPID = os.Getppid

type state struct {
	log      Logger
	reply    io.Writer
	release  Releaser
	hello    []byte
	handle   string
	hold     int            // local lock descriptor, -1 without one
	job      *contain.Job   // nil while no job runs
	gone     []*contain.Job // jobs seen gone whose cgroups tidy removes
	killAt   int64          // CLOCK_MONOTONIC ns
	fired    bool           // the kill point passed: the term is over
	released bool
	// supervisor is the leaderrun that started the guard: its re-parented
	// orphans belong to the job.
	supervisor int
}

// apply applies one message and reports whether the guard is done.
func (g *state) apply(line string, kill *alarm) bool {
	verb, rest, _ := strings.Cut(line, " ")
	switch verb {
	case verbHello:
		g.hello = []byte(rest)
	case verbLease:
		g.handle = rest
	case verbHold:
		fd, err := strconv.Atoi(rest)
		if err != nil || fd < 0 {
			g.log.Error("bad hold message", "line", line)
			return false
		}
		g.hold = fd
	case verbWatch:
		at, j, err := parseWatch(rest)
		if err != nil {
			g.log.Error("bad watch message", "line", line, "error", err)
			return false
		}
		if g.fired {
			// A run leaderrun started before it read "fired": the term is
			// over, so it dies at once.
			at = min(at, MonoNow())
		}
		g.job, g.killAt = contain.Attach(j.Cgroup, j.Pgid, j.Token, j.Since), at
		g.job.AdoptFrom(g.supervisor)
		kill.set(at)
	case verbExtend:
		at, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			g.log.Error("bad extend message", "line", line)
			return false
		}
		if g.fired {
			// A renewal that leaderrun acted on after the kill point
			// passed: too late, the term is over.
			return false
		}
		// Extensions come in the order of the renewals they follow; a
		// shorter granted TTL may move the kill point earlier.
		g.killAt = at
		kill.set(at)
	case verbGone:
		// Forget the job: once empty, its process group id may be reused.
		g.job = nil
	case verbDone:
		return true
	default:
		// Not the line: a line the guard cannot read may be a piece of a
		// hello, and a hello holds secrets.
		g.log.Error("unknown message", "verb", clip(verb, 16), "bytes", len(line))
	}
	return false
}

// killPointPassed: leaderrun missed its own kill point (frozen, deadlocked,
// or exactly on time). The term is over: say so, kill the job, and once it
// is gone release the lease so a standby starts at once. "fired" goes out
// before the kill, so leaderrun, when it runs again, reads it before it can
// see the job's death, and starts nothing more in this term (DESIGN §1.3,
// §1.9). Once fired the guard stays fired: a job leaderrun starts after
// that (it had not read "fired" yet) is killed at once; the lease is
// released only once.
func (g *state) killPointPassed() {
	if !g.fired {
		g.fired = true
		g.say(verbFired)
	}
	if !g.killJob("kill point passed without a renewal") || g.released {
		g.tidy()
		return
	}
	if g.releaseLease("kill point passed") {
		g.say(verbReleased)
	}
	g.tidy()
}

// say writes one reply to leaderrun.
func (g *state) say(verb string) {
	if g.reply != nil {
		_, _ = io.WriteString(g.reply, verb+"\n")
	}
}

// leaderrunDied: the pipe closed without "done". Kill the job at once, wait
// for it to be gone, then release the lease so a standby need not wait for
// the TTL.
//
// The guard does not exit while any of the job lives: it keeps killing it.
// Exiting would close the local lock it holds, which hands the key to a
// standby while the job still runs; on other backends it would leave the
// job to outlive its lease.
func (g *state) leaderrunDied() {
	g.debug("leaderrun died")
	if g.job != nil {
		// The supervisor is gone: its pid may be anyone's now.
		g.job.AdoptFrom(0)
	}
	for !g.killJob("leaderrun died") {
		time.Sleep(retryKill)
	}
	if !g.released {
		g.releaseLease("leaderrun died")
	}
	g.tidy()
}

// killJob kills the watched job and reports whether it is gone.
func (g *state) killJob(reason string) bool {
	if g.job == nil {
		return true
	}
	j := g.job
	if in := j.Intruders(); len(in) > 0 {
		g.log.Warn("killing processes of the job that moved into leaderrun's own cgroup", "processes", contain.ProcessList(contain.Named(in)))
	}
	if j.Alive() {
		procs := g.name(j)
		if err := j.Kill(); err != nil {
			g.log.Error("kill the job", "error", err)
		}
		// In group mode one Kill sweeps for a bounded time; sweep again
		// while anything of the job lives (DESIGN §1.4).
		for end := time.Now().Add(goneTimeout); j.Cgroup() == "" && time.Now().Before(end) && j.Alive(); {
			_ = j.Kill()
		}
		args := []any{"pgid", j.Pgid(), "cgroup", j.Cgroup(), "reason", reason}
		if procs != "" {
			args = append(args, "processes", procs)
		}
		g.log.Warn("killed the job", args...)
	}
	if !j.WaitGone(goneTimeout) {
		g.log.Error("the job is still alive; killing it again, not releasing", "pgid", j.Pgid(), "cgroup", j.Cgroup())
		return false
	}
	g.job = nil
	g.debug("the job is gone", "cgroup", j.Cgroup())
	g.gone = append(g.gone, j)
	return true
}

// tidy removes the cgroups of the jobs seen gone. It runs after the
// release: the standby's child need not wait for an rmdir, and an empty
// cgroup holds nothing back.
func (g *state) tidy() {
	for _, j := range g.gone {
		_ = j.Remove()
		if cg := j.Cgroup(); cg != "" {
			// leaderrun's own parent cgroup of its jobs, if it made one and
			// died before removing it. A live leaderrun (frozen, cut off)
			// needs it for its next leadership.
			parent := filepath.Dir(cg)
			if pid, sameNS, ok := contain.OwnerPID(filepath.Base(parent)); ok && sameNS && !contain.ProcessAlive(pid) {
				contain.RemoveTree(parent)
			}
		}
	}
	g.gone = nil
}

// nameAhead is how far before the kill point the guard still names the
// processes of a group-mode job before it kills them: naming them there
// costs a scan of /proc (milliseconds, more on a host of thousands of
// processes) that must not eat into the safety margin.
const nameAhead = int64(time.Second)

// name lists the job's processes, pid and command, for the line that says
// they were killed; "" where listing them would delay the kill: a group
// mode job at or near its kill point. A cgroup lists them in one read.
func (g *state) name(j *contain.Job) string {
	if j.Cgroup() == "" && MonoNow() > g.killAt-nameAhead {
		return ""
	}
	return contain.ProcessList(j.Processes())
}

// releaseLease gives the lease back: the local lock by unlocking the held
// descriptor, which is all there is to it (no releaser runs), other
// backends through the releaser.
func (g *state) releaseLease(why string) bool {
	g.released = true
	g.debug("releasing leadership", "after", why)
	if g.hold >= 0 {
		// Unlocking the shared open file drops the flock for leaderrun's
		// descriptor too; a leaderrun that runs again finds its
		// descriptor holding nothing (locker/local's Renew) and starts
		// nothing. A frozen leaderrun still has the file open, so no close
		// tells the waiting candidates: touching its times does
		// (locker/local watches for either).
		if err := unix.Flock(g.hold, unix.LOCK_UN); err != nil {
			g.log.Error("cannot unlock the lock file; it stays locked until leaderrun closes it", "error", err, "after", why)
			g.closeHold()
			return false
		}
		now := unix.NsecToTimeval(time.Now().UnixNano())
		_ = unix.Futimes(g.hold, []unix.Timeval{now, now})
		g.closeHold()
		g.log.Info("released leadership", "after", why)
		return true
	}
	if g.handle == "" || g.release == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := g.release(ctx, g.hello, g.handle); err != nil {
		g.log.Error("release failed; the lease will expire", "error", err, "after", why)
		return false
	}
	g.log.Info("released leadership", "after", why)
	return true
}

// debug logs at DEBUG where the logger has that level: the steps of a
// failover the benchmark times (tests/bench, breakdown.go).
func (g *state) debug(msg string, args ...any) {
	if d, ok := g.log.(interface{ Debug(string, ...any) }); ok {
		d.Debug(msg, args...)
	}
}

func (g *state) closeHold() {
	if g.hold >= 0 {
		_ = unix.Close(g.hold)
		g.hold = -1
	}
}

// clip is s cut to at most n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
