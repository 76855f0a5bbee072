//go:build linux

package ops

import (
	"fmt"
	"strings"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// Role is what a running leaderrun is doing for its key.
type Role string

// Roles reported by /status and STATUS=.
const (
	// RoleCampaigning: waiting to lead (also before the first attempt and
	// after a lost leadership with --on-lost rejoin).
	RoleCampaigning Role = "campaigning"
	// RoleLeader: leads the key; the child runs or is about to.
	RoleLeader Role = "leader"
	// RoleStopping: the stop sequence began; the term ends once the child's
	// process group is gone and the lease is given back.
	RoleStopping Role = "stopping"
)

// releaseAllowance is how long the supervisor's last turn of a term may
// legitimately block: giving the lease back has its own 5s timeout
// (supervise.releaseTimeout), after the group is gone.
const releaseAllowance = 5 * time.Second

// state is everything the observer knows, built only from supervise.Events.
type state struct {
	role     Role
	holding  bool      // from Acquired until Released
	epoch    uint64    // of the leadership held; 0 while not holding
	deadline time.Time // the supervisor's lease deadline, monotonic (DESIGN §1.2)
	childPID int       // 0 when no child runs
	reason   string    // why the stop sequence began
	lost     bool      // the stop sequence began because leadership was lost
	handover bool      // the stop sequence hands the key over; the candidate waits again
	ready    bool      // the backend answered, or leadership was won
	// heldBack says why the campaign is held back (DESIGN §1.16), and
	// paused by whom when a pause is why; empty while campaigning freely.
	heldBack string
	paused   *locker.Pause
	// What the running job said over its notify socket: when it sent
	// READY=1 (zero: not yet), and its last STATUS= text.
	jobReadyAt time.Time
	jobStatus  string
}

// Health is the verdict shared by /healthz and the systemd watchdog.
type Health struct {
	// OK is true while the control loop is healthy.
	OK bool
	// Problems says what is wrong, one short phrase each; empty when OK.
	Problems []string
}

// String is "ok" or the problems joined by "; ".
func (h Health) String() string {
	if h.OK {
		return "ok"
	}
	return strings.Join(h.Problems, "; ")
}

// health judges the state at now. lastTick is the last turn of the
// supervisor's event loop and stallAfter how long the loop may stay silent.
//
//   - campaigning: healthy. The supervisor waits inside the backend client
//     and holds nothing that could outlive its lease.
//   - leader: unhealthy once the lease is past its local deadline (the
//     child would be running unprotected) or the loop has not turned for
//     stallAfter (it could not act on the deadline).
//   - stopping: unhealthy only if the loop is silent for stallAfter plus
//     the release timeout; the stop timeline kills the group before the
//     deadline, and the term's last turn may block in the release call.
func (st *state) health(now, lastTick time.Time, stallAfter time.Duration) Health {
	var problems []string
	silent := now.Sub(lastTick)
	switch {
	case st.role == RoleLeader:
		if !now.Before(st.deadline) {
			problems = append(problems, fmt.Sprintf("lease past its deadline by %s", now.Sub(st.deadline).Round(time.Millisecond)))
		}
		if silent > stallAfter {
			problems = append(problems, fmt.Sprintf("event loop stuck for %s", silent.Round(time.Millisecond)))
		}
	case st.role == RoleStopping && st.holding:
		if silent > stallAfter+releaseAllowance {
			problems = append(problems, fmt.Sprintf("event loop stuck for %s while stopping", silent.Round(time.Millisecond)))
		}
	}
	return Health{OK: len(problems) == 0, Problems: problems}
}

// leaseRemaining is how long until the local deadline while holding, on the
// monotonic clock; negative once past it, zero while not holding.
func (st *state) leaseRemaining(now time.Time) time.Duration {
	if !st.holding {
		return 0
	}
	return st.deadline.Sub(now)
}

// statusLine is the one-line STATUS= text for systemd.
func (st *state) statusLine(key string) string {
	switch st.role {
	case RoleLeader:
		if st.childPID != 0 && st.jobStatus != "" {
			return fmt.Sprintf("leader of %s, epoch %d, child pid %d: %s", key, st.epoch, st.childPID, st.jobStatus)
		}
		if st.childPID != 0 {
			return fmt.Sprintf("leader of %s, epoch %d, child pid %d", key, st.epoch, st.childPID)
		}
		return fmt.Sprintf("leader of %s, epoch %d", key, st.epoch)
	case RoleStopping:
		if !st.holding {
			return fmt.Sprintf("stopped (%s); released %s", st.reason, key)
		}
		return fmt.Sprintf("stopping (%s), epoch %d", st.reason, st.epoch)
	default:
		if st.heldBack != "" {
			return "not campaigning for " + key + ": " + st.heldBack
		}
		return "campaigning for " + key
	}
}
