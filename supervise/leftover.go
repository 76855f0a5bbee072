//go:build linux

package supervise

import (
	"github.com/leaderrun/leaderrun/contain"
)

// sweepLeftovers kills, before the term's first child, what jobs of this key left on
// this host when their leaderrun and its guard were killed together
// (DESIGN §1.9), and logs one warning per job. If some of it is still alive
// after contain.SweepTimeout it starts nothing: it ends the term, and
// leaderrun exits 125.
func (s *Supervisor) sweepLeftovers(l *leadership) bool {
	found, err := s.box.Sweep(contain.SweepTimeout)
	for _, j := range found {
		args := []any{"leaderrun_pid", j.Owner, "count", len(j.Pids), "pids", j.Pids, "marker", j.Token}
		if j.Cgroup != "" {
			args = append(args, "cgroup", j.Cgroup)
		}
		s.log.Warn("killed a leftover job of this key: its leaderrun is dead", args...)
	}
	if err != nil {
		s.log.Error("not starting the command beside a leftover job", "error", err)
		s.finish(l, "a leftover job of this key is still alive", false, ExitInternal)
		return false
	}
	return true
}

// noteIntruders logs the processes a job moved into leaderrun's own cgroup;
// they are stopped and killed with the job.
func (s *Supervisor) noteIntruders(l *leadership) {
	if l.job == nil {
		return
	}
	if pids := l.job.Intruders(); len(pids) > 0 {
		s.log.Warn("processes of the job moved into leaderrun's own cgroup; stopping them with the job", "pids", pids)
	}
}
