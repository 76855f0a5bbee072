//go:build linux

package supervise

import "time"

// StopTimeline is the schedule on which a leader's child must be stopped if
// no renewal extends the lease (DESIGN §1.3):
//
//	TermAt = Deadline - SafetyMargin - KillGrace   stop signal to the group
//	KillAt = Deadline - SafetyMargin               SIGKILL to the group
//
// It is pure arithmetic, and the only place where a deadline becomes stop
// points: the term's timers, the renewal schedule (RenewBy) and the stop
// point published to the job (Config.Timeline) all read it from here.
type StopTimeline struct {
	// Deadline is the send time of the last successful renewal plus
	// min(requested TTL, granted TTL) (DESIGN §1.2).
	Deadline time.Time
	// SafetyMargin is how long before Deadline the group must be dead.
	SafetyMargin time.Duration
	// KillGrace is how long the stop signal is given before SIGKILL.
	KillGrace time.Duration
}

// Timeline is the stop timeline of deadline under c's safety margin and
// kill grace.
func (c Config) Timeline(deadline time.Time) StopTimeline {
	return StopTimeline{Deadline: deadline, SafetyMargin: c.SafetyMargin, KillGrace: c.KillGrace}
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

// RenewBy is the latest moment a renewal that may take timeout to answer
// can be sent and still extend the lease before TermAt: a renewal sent
// later could time out past the stop point.
func (s StopTimeline) RenewBy(timeout time.Duration) time.Time {
	return s.TermAt().Add(-timeout)
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
