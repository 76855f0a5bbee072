package jobnotify

import (
	"fmt"
	"time"
)

// Rules are what a term asks of its job.
type Rules struct {
	// ReadyTimeout is --ready-timeout: the job must send READY=1 within
	// it of its start. Zero: READY=1 is recorded, nothing waits for it.
	ReadyTimeout time.Duration
	// Watchdog is --job-watchdog: once started (ready, when ReadyTimeout
	// is set), the job must send WATCHDOG=1 at least this often. Zero: no
	// watchdog, unless the job sets one with WATCHDOG_USEC.
	Watchdog time.Duration
}

// State is what one run of the job has said, and the rules that judge it.
// It is pure: the caller passes the time, reads Deadline to know when to
// look again, and Check to judge.
type State struct {
	rules Rules
	start time.Time

	ready      bool
	readyAt    time.Time
	reloading  bool
	stopping   bool
	stoppingAt time.Time
	status     string
	statusSet  bool

	period   time.Duration // the watchdog period in force
	lastPing time.Time
	extended time.Time // EXTEND_TIMEOUT_USEC: the phase's deadline is at least this
	trigger  bool
}

// New starts the judgement of a run of the job that started at start.
func New(r Rules, start time.Time) *State {
	return &State{rules: r, start: start, period: r.Watchdog, lastPing: start}
}

// Apply takes a message of the job's, received at now.
func (s *State) Apply(m Message, now time.Time) {
	if m.Watchdog > 0 {
		// As systemd: a new period, counted from now.
		s.period, s.lastPing = m.Watchdog, now
	}
	if m.Ready {
		if !s.ready {
			s.ready, s.readyAt = true, now
			// The watchdog counts from readiness when readiness was
			// awaited: the start-up had its own bound.
			if s.rules.ReadyTimeout > 0 {
				s.lastPing = now
			}
			s.extended = time.Time{}
		}
		s.reloading = false
	}
	if m.Reloading {
		s.reloading = true
	}
	if m.Stopping && !s.stopping {
		s.stopping, s.stoppingAt = true, now
		s.extended = time.Time{}
	}
	if m.Ping {
		s.lastPing = now
	}
	if m.Trigger {
		s.trigger = true
	}
	if m.Status != nil {
		s.status, s.statusSet = *m.Status, true
	}
	if m.Extend > 0 {
		// Each message extends once, from its arrival, as systemd does.
		if t := now.Add(m.Extend); t.After(s.extended) {
			s.extended = t
		}
	}
}

// Ready reports whether the job sent READY=1, and when.
func (s *State) Ready() (bool, time.Time) { return s.ready, s.readyAt }

// Stopping reports whether the job said STOPPING=1.
func (s *State) Stopping() bool { return s.stopping }

// Reloading reports whether the job said RELOADING=1 and not READY=1 since.
func (s *State) Reloading() bool { return s.reloading }

// Status is the job's last STATUS= text; ok is false if it sent none.
func (s *State) Status() (text string, ok bool) { return s.status, s.statusSet }

// Deadline is when the job fails unless it says something first; zero
// when nothing is awaited (no rule applies, or it failed already).
func (s *State) Deadline() time.Time {
	var d time.Time
	switch {
	case s.trigger:
		return time.Time{}
	case s.stopping:
		// Not a zombie while it stops, for one watchdog period (or as
		// long as it extends): then it is one.
		if s.period <= 0 {
			return time.Time{}
		}
		d = s.stoppingAt.Add(s.period)
	case !s.ready && s.rules.ReadyTimeout > 0:
		d = s.start.Add(s.rules.ReadyTimeout)
	case s.period > 0:
		d = s.lastPing.Add(s.period)
	default:
		return time.Time{}
	}
	if s.extended.After(d) {
		d = s.extended
	}
	return d
}

// Check judges the job at now: "" while it keeps its rules, else why it
// failed, for the log and the term's record.
func (s *State) Check(now time.Time) string {
	if s.trigger {
		return "the job sent WATCHDOG=trigger"
	}
	d := s.Deadline()
	if d.IsZero() || now.Before(d) {
		return ""
	}
	switch {
	case s.stopping:
		return fmt.Sprintf("the job said STOPPING=1 %s ago and still runs", now.Sub(s.stoppingAt).Round(time.Millisecond))
	case !s.ready && s.rules.ReadyTimeout > 0:
		return fmt.Sprintf("the job sent no READY=1 within %s of its start (--ready-timeout)", now.Sub(s.start).Round(time.Millisecond))
	default:
		return fmt.Sprintf("the job sent no WATCHDOG=1 for %s (watchdog period %s): it hangs", now.Sub(s.lastPing).Round(time.Millisecond), s.period)
	}
}

// WatchdogEnv is what the job's environment says of the watchdog:
// WATCHDOG_USEC, or nothing when there is no watchdog. WATCHDOG_PID is
// left out: systemd sets it between fork and exec, which Go's ForkExec
// cannot, and without it sd_watchdog_enabled(3) (and go-systemd's
// SdWatchdogEnabled) tells every process of the job to ping, which counts
// the same.
func WatchdogEnv(r Rules) []string {
	if r.Watchdog <= 0 {
		return nil
	}
	return []string{fmt.Sprintf("WATCHDOG_USEC=%d", r.Watchdog.Microseconds())}
}
