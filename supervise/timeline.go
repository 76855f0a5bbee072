//go:build linux

package supervise

import "time"

// StopTimeline is the schedule on which a leader's child must be stopped if
// no renewal extends the lease (DESIGN §1.3):
//
//	TermAt = Deadline - SafetyMargin - KillGrace   stop signal to the group
//	KillAt = Deadline - SafetyMargin               SIGKILL to the group
//
// It is pure arithmetic; the supervisor arms timers from it.
type StopTimeline struct {
	// Deadline is the send time of the last successful renewal plus
	// min(requested TTL, granted TTL) (DESIGN §1.2).
	Deadline time.Time
	// SafetyMargin is how long before Deadline the group must be dead.
	SafetyMargin time.Duration
	// KillGrace is how long the stop signal is given before SIGKILL.
	KillGrace time.Duration
}

// NewDeadline computes the lease deadline from the moment a successful
// renewal (or the acquisition) was SENT, never from its response (§1.2).
// etcd may grant more than requested and Consul expires late; only the
// smaller of the two is ours to count on.
func NewDeadline(sent time.Time, requested, granted time.Duration) time.Time {
	ttl := requested
	if granted > 0 && granted < ttl {
		ttl = granted
	}
	return sent.Add(ttl)
}

// TermAt is when the stop signal goes to the child's group.
func (s StopTimeline) TermAt() time.Time {
	return s.Deadline.Add(-s.SafetyMargin - s.KillGrace)
}

// KillAt is when SIGKILL goes to the child's group.
func (s StopTimeline) KillAt() time.Time {
	return s.Deadline.Add(-s.SafetyMargin)
}

// StartedAt is the timeline of a stop that begins at now for a reason other
// than the deadline (leadership reported lost, leaderrun asked to stop, the
// child exited leaving others in its group): the stop signal at once and
// SIGKILL after the kill grace, but never later than the lease allows.
func (s StopTimeline) StartedAt(now time.Time) StopTimeline {
	kill := now.Add(s.KillGrace)
	if limit := s.KillAt(); limit.Before(kill) {
		kill = limit
	}
	if kill.Before(now) {
		kill = now
	}
	return StopTimeline{
		Deadline:     kill.Add(s.SafetyMargin),
		SafetyMargin: s.SafetyMargin,
		KillGrace:    kill.Sub(now),
	}
}
