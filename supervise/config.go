//go:build linux

package supervise

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/guard"
	"github.com/leaderrun/leaderrun/locker"
)

// RestartPolicy says whether a child that exits on its own is started again
// while leadership lasts.
type RestartPolicy string

// Restart policies (DESIGN §2).
const (
	RestartNever     RestartPolicy = "never"
	RestartOnFailure RestartPolicy = "on-failure"
	RestartAlways    RestartPolicy = "always"
)

// LostPolicy says what happens after leadership is lost and the child stopped.
type LostPolicy string

// Lost policies (DESIGN §2).
const (
	LostExit   LostPolicy = "exit"
	LostRejoin LostPolicy = "rejoin"
)

// MaxRestartDelay caps the doubling restart backoff.
const MaxRestartDelay = 30 * time.Second

// Config is everything the supervisor needs. Durations are wall lengths
// measured on the monotonic clock.
type Config struct {
	// Locker is the backend to campaign on.
	Locker locker.Locker
	// Target names the backend's address for log lines (what --no-wait
	// names): an --acquire-timeout that passes without a holder seen says
	// which address could not be reached. Empty says nothing.
	Target string
	// Command is the child to run while leader. Command.Env is completed
	// with LEADER_EPOCH and LEADER_RUN_ID at each start.
	Command Command
	// RunID, when set, is the LEADER_RUN_ID of every start of the child:
	// once-per mode gives its slot, so every retry of a slot carries the
	// same id. Empty gives each start an id of its own (NewRunID).
	RunID string
	// TTL is the lease length requested from the backend.
	TTL time.Duration
	// RenewInterval is the time between the start of two renewals.
	RenewInterval time.Duration
	// KillGrace is how long the stop signal is given before SIGKILL.
	KillGrace time.Duration
	// SafetyMargin is how long before the lease deadline the child's group
	// must be dead.
	SafetyMargin time.Duration
	// StopSignal is sent to the child's group first.
	StopSignal syscall.Signal
	// AcquireTimeout bounds each campaign; zero waits forever.
	AcquireTimeout time.Duration
	// Restart and RestartDelay: what to do when the child exits on its own
	// while we lead, and the first backoff delay (doubling to
	// MaxRestartDelay).
	Restart      RestartPolicy
	RestartDelay time.Duration
	// OnLost: exit 123, or campaign again, after leadership was lost.
	OnLost LostPolicy
	// Forward carries signals to pass on to the child's group.
	Forward <-chan os.Signal
	// Notify: what is asked of the job over its notify socket (notify.go).
	Notify NotifyConfig
	// Zombies, when set, counts the terms whose job hung across the
	// supervisors of one run (--holders); nil: this supervisor's own.
	Zombies *ZombieHold
	// Events are optional callbacks for observers (metrics, systemd).
	Events Events
	// Logger receives one line per state change, each record on one line and
	// every duration as KEY_s in seconds (package logline); nil discards.
	Logger hclog.Logger
	// Clock is the time source; nil means RealClock.
	Clock Clock
	// Term, when set, frames each leadership term (once-per mode).
	Term TermHooks
	// History is what each term writes to the key's run history.
	History HistoryConfig
	// Guard starts the dead-man guard of each leadership term. A term whose
	// guard cannot start runs no child (DESIGN §1.9). Nil runs without a
	// guard: only for an operator who opted out (--no-guard).
	Guard *guard.Spec
	// Contain is where jobs run (DESIGN §1.4); nil means group mode.
	Contain *contain.Box
	// Control is the operator's say: the key's control record (read when
	// the backend keeps one), --priority and --health-cmd (§1.16).
	Control ControlConfig
	// Rerace, for one slot of a --holders N > 1 run (DESIGN §1.15): where
	// the candidate would campaign again (after a handover, a won term
	// given back before any child started, a loss with OnLost rejoin, a
	// guard that could not start), Run returns ExitRerace instead, with
	// nothing held and nothing running, so that the caller campaigns for
	// every slot again; SteppedDown then says which term it stepped down
	// from.
	Rerace bool
}

// Events are called from the supervisor's goroutine as things happen. They
// must return quickly. Any of them may be nil.
type Events struct {
	// Campaigning: waiting to lead.
	Campaigning func()
	// Acquired: leadership won with this epoch and deadline.
	Acquired func(epoch uint64, deadline time.Time)
	// Renewed: a renewal succeeded and moved the deadline.
	Renewed func(deadline time.Time)
	// RenewFailed: one renewal attempt failed.
	RenewFailed func(err error)
	// ChildStarted and ChildExited frame each run of the child.
	ChildStarted func(pid int)
	ChildExited  func(code int)
	// ChildSignalled: a signal was sent to the child's process group.
	ChildSignalled func(sig syscall.Signal)
	// Stopping: the stop sequence began; lost says leadership was lost.
	Stopping func(reason string, lost bool)
	// HandingOver: the stop sequence that begins next (Stopping follows)
	// ends the term, not leaderrun: a handover for the operator (step-down,
	// pause, preemption, §1.16), or a term given back for want of a
	// dead-man guard. Once the job is gone and the key released, the
	// candidate campaigns again.
	HandingOver func()
	// Released: leadership is given back (or lost) and the group is gone.
	Released func()
	// HeldBack: a campaign is held back for why (the key is paused, with
	// pause saying by whom; handed over to another candidate; the health
	// check fails), or may go on (why empty).
	HeldBack func(why string, pause *locker.Pause)
	// JobReady: the running job sent READY=1, at that time.
	JobReady func(at time.Time)
	// JobStatus: the running job sent a new STATUS= text.
	JobStatus func(text string)
	// Tick: the leader's event loop took another turn. While leading or
	// stopping it turns at least every HeartbeatInterval, so an observer
	// that sees no Tick for much longer knows the loop is stuck;
	// /healthz and the systemd watchdog use it. Not called while campaigning.
	Tick func()
}

// Validate checks the whole configuration: the options, a backend and a
// command.
func (c *Config) Validate() error {
	if err := c.ValidateOptions(); err != nil {
		return err
	}
	if c.Locker == nil {
		return errors.New("no backend configured")
	}
	if c.Command.Path == "" || len(c.Command.Args) == 0 {
		return errors.New("a command to run is required after --")
	}
	return nil
}

// ValidateOptions checks the operator's options, among them the timing rule
// of DESIGN §1.10, and says which flag breaks which rule. Backend-specific
// limits are the backend's to check. Errors are *locker.ConfigError naming
// Config fields; the command line maps them to its flags.
func (c *Config) ValidateOptions() error {
	positive := []struct {
		flag string
		d    time.Duration
	}{
		{"TTL", c.TTL}, {"RenewInterval", c.RenewInterval}, {"KillGrace", c.KillGrace},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return optionError(p.flag, "must be greater than 0, got %v", p.d)
		}
	}
	if c.SafetyMargin <= 0 {
		// Zero would let the lease end at the very moment of SIGKILL, with
		// no time for the job to be gone before another host may start.
		return optionError("SafetyMargin", "must be greater than 0, got %v", c.SafetyMargin)
	}
	if c.AcquireTimeout < 0 {
		return optionError("AcquireTimeout", "must not be negative, got %v", c.AcquireTimeout)
	}
	if c.RestartDelay <= 0 {
		return optionError("RestartDelay", "must be greater than 0, got %v", c.RestartDelay)
	}
	if sum := c.RenewInterval + c.KillGrace + c.SafetyMargin; sum >= c.TTL {
		return optionError("TTL", "RenewInterval (%v) + KillGrace (%v) + SafetyMargin (%v) = %v must be less than TTL (%v)",
			c.RenewInterval, c.KillGrace, c.SafetyMargin, sum, c.TTL)
	}
	switch c.Restart {
	case RestartNever, RestartOnFailure, RestartAlways:
	default:
		return optionError("Restart", "must be never, on-failure or always, got %q", c.Restart)
	}
	switch c.OnLost {
	case LostExit, LostRejoin:
	default:
		return optionError("OnLost", "must be exit or rejoin, got %q", c.OnLost)
	}
	if c.StopSignal <= 0 {
		return optionError("StopSignal", "must name a signal")
	}
	if c.Control.PreemptAfter < 0 {
		return optionError("PreemptAfter", "must not be negative, got %v", c.Control.PreemptAfter)
	}
	if h := c.Control.Health; h != nil {
		switch {
		case h.Interval <= 0:
			return optionError("HealthInterval", "must be greater than 0, got %v", h.Interval)
		case h.Timeout <= 0:
			return optionError("HealthTimeout", "must be greater than 0, got %v", h.Timeout)
		case h.Failures < 1:
			return optionError("HealthFailures", "must be at least 1, got %d", h.Failures)
		}
	}
	n := c.Notify
	switch {
	case n.ReadyTimeout < 0:
		return optionError("ReadyTimeout", "must not be negative, got %v", n.ReadyTimeout)
	case n.Watchdog < 0:
		return optionError("JobWatchdog", "must not be negative, got %v", n.Watchdog)
	case n.Watchdog > 0 && n.Watchdog < MinJobWatchdog:
		return optionError("JobWatchdog", "must be 0 (off) or at least %v, got %v", MinJobWatchdog, n.Watchdog)
	}
	return nil
}

// MinJobWatchdog is the shortest job watchdog period: a job is asked to
// ping at about half of it, as under systemd.
const MinJobWatchdog = 100 * time.Millisecond

// optionError is a refused option as a *locker.ConfigError. Durations in
// the rule are rounded to the millisecond (1.667s, not 1.666666666s).
func optionError(field, rule string, args ...any) error {
	for i, a := range args {
		if d, ok := a.(time.Duration); ok {
			args[i] = d.Round(time.Millisecond)
		}
	}
	return &locker.ConfigError{Field: field, Rule: fmt.Sprintf(rule, args...)}
}
