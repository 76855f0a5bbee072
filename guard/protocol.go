//go:build linux

package guard

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The guard protocol, both ends. leaderrun (the supervisor) writes lines on
// the guard's stdin; the guard answers on its fd 3.
//
// Supervisor to guard, one message a line:
//
//	hello <json>                          first line: how to reach the backend (opaque here)
//	lease <handle>                        the lease to release once the job is gone
//	hold <fd>                             the guard's descriptor of the local lock: keep it
//	                                      until the job is gone (DESIGN §1.9)
//	watch <mono-ns> <pgid> <since> <token|-> <cgroup|->
//	                                      a new run of the job and its kill point
//	extend <mono-ns>                      the kill point after a successful renewal that
//	                                      moved it: the lease's, deadline - safety margin
//	gone                                  the job is gone: nothing to kill until the next watch
//	                                      (the kill point still holds)
//	done                                  leadership released: exit
//
// Guard to supervisor:
//
//	fired                                 the kill point passed: the term is over. Written
//	                                      BEFORE the guard kills the job, so a supervisor that
//	                                      saw the job die and then reads the pipe finds it.
//	                                      From then on the guard ignores extend, kills any job
//	                                      a later watch names at once, and releases the lease
//	                                      once the job is gone (DESIGN §1.9)
//	released                              the guard killed the job at the kill point, saw it
//	                                      gone and released the lease (always after fired)
//
// Times are absolute CLOCK_MONOTONIC nanoseconds, the same clock in every
// process on the host and immune to wall-clock steps. End of input without
// "done" means the supervisor died.

// MaxMessage bounds one message, a line with its newline: the hello,
// which carries what the guard needs to release the lease (a Kubernetes
// CA bundle or client key among it), is the one that can be large. The
// guard's reader grows to it as needed; leaderrun refuses to start a
// guard with a larger one rather than send it a line it cannot read.
const MaxMessage = 16 << 20

// Message verbs.
const (
	verbHello    = "hello"
	verbLease    = "lease"
	verbHold     = "hold"
	verbWatch    = "watch"
	verbExtend   = "extend"
	verbGone     = "gone"
	verbDone     = "done"
	verbFired    = "fired"
	verbReleased = "released"
)

// Fds in the guard process.
const (
	// ReplyFD is where the guard writes its answers.
	ReplyFD = 3
	// HoldFD is the duplicate of the local lock descriptor, when there is one.
	HoldFD = 4
)

// Name is the guard's process name (comm and argv[0]), distinct from
// leaderrun's so that `pkill -x leaderrun` leaves it to do its work.
const Name = "leaderrun-guard"

// Job names the job the guard kills: its cgroup directory, or else its
// process group and marker (package contain).
type Job struct {
	Pgid   int
	Since  uint64 // start time of its first process, clock ticks after boot
	Token  string
	Cgroup string
}

// Hello carries the backend settings the guard needs to release the lease.
func Hello(payload []byte) string { return verbHello + " " + string(payload) + "\n" }

// Lease names the lease the guard releases once the job is gone.
func Lease(handle string) string { return verbLease + " " + handle + "\n" }

// Hold tells the guard which of its descriptors is the lock to keep.
func Hold(fd int) string { return verbHold + " " + strconv.Itoa(fd) + "\n" }

// Watch hands the guard a new run of the job and its kill point.
func Watch(killAt int64, j Job) string {
	cg := j.Cgroup
	if cg == "" {
		cg = "-"
	}
	tok := j.Token
	if tok == "" {
		tok = "-"
	}
	return fmt.Sprintf("%s %d %d %d %s %s\n", verbWatch, killAt, j.Pgid, j.Since, tok, cg)
}

// Extend moves the kill point after a successful renewal.
func Extend(killAt int64) string { return verbExtend + " " + strconv.FormatInt(killAt, 10) + "\n" }

// Gone tells the guard the job is gone: there is nothing to kill.
func Gone() string { return verbGone + "\n" }

// Done tells the guard leadership is over.
func Done() string { return verbDone + "\n" }

// parseWatch reads the arguments of a watch message.
func parseWatch(rest string) (killAt int64, j Job, err error) {
	f := strings.Fields(rest)
	if len(f) != 5 {
		return 0, Job{}, fmt.Errorf("want 5 fields, got %d", len(f))
	}
	killAt, err = strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, Job{}, err
	}
	if j.Pgid, err = strconv.Atoi(f[1]); err != nil || j.Pgid <= 1 {
		return 0, Job{}, fmt.Errorf("bad process group %q", f[1])
	}
	if j.Since, err = strconv.ParseUint(f[2], 10, 64); err != nil {
		return 0, Job{}, fmt.Errorf("bad start time %q", f[2])
	}
	if f[3] != "-" {
		j.Token = f[3]
	}
	if f[4] != "-" {
		j.Cgroup = f[4]
	}
	return killAt, j, nil
}

// MonoNow reads CLOCK_MONOTONIC in nanoseconds.
func MonoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// MonoAt converts t, a point on the supervisor's clock, into absolute
// CLOCK_MONOTONIC nanoseconds. CLOCK_MONOTONIC is read BEFORE the
// supervisor's clock: the time between the two readings then makes the
// converted kill point earlier, never later (DESIGN §1.3).
func MonoAt(t time.Time, now func() time.Time) int64 {
	mono := MonoNow()
	return mono + int64(t.Sub(now()))
}
