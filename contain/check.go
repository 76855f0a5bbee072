//go:build linux

package contain

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// Health checks (--health-cmd, DESIGN §1.16) are contained like jobs, each
// in a Job of its own that NewCheck makes: in cgroup mode a cgroup,
// check.TOKEN, beside the job cgroups; in group mode the check's process
// group, its descendants and the processes carrying its marker. Its
// marker is LEADERRUN_JOB, as a job's, with a token of its own whose
// second field starts with "c":
//
//	PID.cN.MONO.START.PIDNS.KEY
//
// (sealed in the environment as a job's is, seal.go)
//
// so that
//
//   - a check adopts no orphan of leaderrun but those carrying its own
//     marker: the others are the job's, and a check's kill never reaches
//     them;
//   - a job adopts no orphan of leaderrun carrying the marker of one of
//     that leaderrun's running checks, from NewCheck to Remove (in the
//     guard's view, of any check of that leaderrun): a daemon a check
//     started, re-parented to leaderrun once the check's shell exited, is
//     the check's, killed with it, and never counted as the job's, alive
//     or leftover;
//   - what a check of a leaderrun killed together with its guard left
//     running is found by the next leaderrun of the key by its marker, as
//     a leftover job is (leftover.go), and killed as one.
//
// A check's process that clears its environment, leaves the check's
// process group and is re-parented to leaderrun before any scan of the
// check saw it escapes the check in group mode; it counts as the running
// job's, and dies with it.

// checkField starts the second field of a check's token.
const checkField = "c"

// newCheckToken is the marker value of this box's check number n.
func (b *Box) newCheckToken(n uint64) string {
	s := self()
	return sealed(fmt.Sprintf("%d.%s%d.%d.%d.%s.%s", s.pid, checkField, n, monoNow(), s.start, s.ns, keyHash(b.opts.Key)))
}

// NewCheck prepares the place for one run of a health check, as NewJob
// does for the child: start it with the Job's SysProcAttr and Env, tell
// it Started, and once it is over Kill it until WaitGone, then Remove.
func (b *Box) NewCheck() (*Job, error) {
	j, err := b.newJob(true)
	if err == nil {
		liveChecks.Store(j.token, true)
	}
	return j, err
}

// IsCheck reports whether j is a health check (NewCheck).
func (j *Job) IsCheck() bool { return j.check }

// IsCheckToken reports whether tok is the marker value of a health check.
func IsCheckToken(tok string) bool {
	_, ok := checkToken(tok)
	return ok
}

// checkToken reads a check's token; false for any other.
func checkToken(tok string) (owner, bool) {
	o, ok := parseToken(tok)
	if !ok {
		return o, false
	}
	f := strings.SplitN(tok, ".", 3)
	return o, strings.HasPrefix(f[1], checkField)
}

// liveChecks are the tokens of this process's checks from NewCheck until
// Remove: in leaderrun's own view only their orphans are not the job's.
var liveChecks sync.Map

// checkOf returns a test for the processes carrying the marker of a health
// check of the leaderrun with pid root (in this PID namespace): when root
// is this process, one of its checks from NewCheck until Remove. Nil when
// root is none or cannot be read.
func checkOf(root int) func(pid int) bool {
	if root <= 1 {
		return nil
	}
	if root == os.Getpid() {
		return func(pid int) bool {
			for _, tok := range markers(pid) {
				if _, ok := liveChecks.Load(tok); ok {
					return true
				}
			}
			return false
		}
	}
	start, ns := StartTime(root), self().ns
	if start == 0 || ns == "unknown" {
		return nil
	}
	return func(pid int) bool {
		for _, tok := range markers(pid) {
			if o, ok := checkToken(tok); ok && o.pid == root && o.start == start && o.ns == ns {
				return true
			}
		}
		return false
	}
}
