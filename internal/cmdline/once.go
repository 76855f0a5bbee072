//go:build linux

package cmdline

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/once"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/supervise"
)

// onceFlags are the options of once-per mode (distributed cron).
func onceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.GenericFlag{Name: "once-per", Category: catLeadership, EnvVars: []string{"LEADERRUN_ONCE_PER"}, Value: new(periodValue),
			Usage: "run the job once per `PERIOD` across hosts (" + periodFormat + "); periods are aligned to the Unix epoch in UTC (1d = each UTC day)"},
		&cli.StringFlag{Name: "run-id", Category: catLeadership, EnvVars: []string{"LEADERRUN_RUN_ID"},
			Usage: "name the slot explicitly, as in \"$(date +%F)\" (instead of, or with, --once-per)"},
		&cli.GenericFlag{Name: "catch-up", Category: catLeadership, EnvVars: []string{"LEADERRUN_CATCH_UP"}, Value: new(periodValue),
			Usage: "with --once-per, run the period before once if no host ran it and this candidate starts within `GRACE` (at most the period) after its end"},
		&cli.StringFlag{Name: "once-record", Category: catLeadership, EnvVars: []string{"LEADERRUN_ONCE_RECORD"}, Value: once.RecordSuccess,
			Usage: "record the slot on success (at-least-once: a failed run is retried) or at start (at-most-once)"},
	}
}

// onceGate builds the once-per gate, or nil when once-per mode is off.
// The slot is fixed now, when this invocation starts, not when it wins
// leadership.
func onceGate(cfg *runConfig, lk locker.Locker, log hclog.Logger) (*once.Gate, error) {
	o := cfg.once
	if o == nil {
		return nil, nil
	}
	g := &once.Gate{Options: cfg.opts, Record: o.record, SkipCode: cfg.skip, Logger: log.Named("once"), Keep: once.RunIDKeep}
	if o.period > 0 {
		g.Slot, g.Keep = once.SlotOf(o.period, o.startedOr(time.Now())), once.KeepPeriods*o.period
	}
	if o.runID != "" {
		g.Slot = o.runID
	}
	if o.catchUp != "" {
		// A term of its own before the current period's (runCatchUp).
		g.Slot, g.CatchUp, g.Until = o.catchUp, true, o.until
		g.PeriodEnd = o.until.Add(-o.grace)
		g.History, _ = locker.As[locker.History](lk)
		g.HistoryKeep = cfg.sup.History.Keep
	}
	rl, ok := locker.RunLogOf(lk)
	if !ok {
		return nil, fmt.Errorf("--once-per/--run-id: backend %q keeps no run records", cfg.backend.Name)
	}
	g.Log = rl
	return g, nil
}

// periodFormat says how a --once-per PERIOD is written.
const periodFormat = "as 30m, 6h, 1d, 2w or 1d12h: d is 24h, w 7d"

// periodValue is --once-per's value: a Go duration that may also count
// days (d, 24h) and weeks (w, 7d), as people who write crontabs do. 1d is
// exactly 24h: the slots are counted in UTC, where no day is longer.
type periodValue struct{ d time.Duration }

// periodPart is one number and its unit; a period is one or more of
// them. Compiled on first use: only --once-per reads it.
var periodPart = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h|d|w)`)
})

// Set parses a period: "1d12h" is 36h, "2w" 336h.
func (p *periodValue) Set(s string) error {
	parts := periodPart().FindAllStringSubmatchIndex(s, -1)
	end := 0
	var total time.Duration
	for _, m := range parts {
		if m[0] != end {
			break
		}
		end = m[1]
		num, unit := s[m[2]:m[3]], s[m[4]:m[5]]
		var d time.Duration
		switch unit {
		case "d", "w":
			n, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return errBadPeriod
			}
			day := 24 * time.Hour
			if unit == "w" {
				day *= 7
			}
			d = time.Duration(n * float64(day))
		default:
			var err error
			if d, err = time.ParseDuration(num + unit); err != nil {
				return errBadPeriod
			}
		}
		total += d
	}
	if len(parts) == 0 || end != len(s) {
		return errBadPeriod
	}
	p.d = total
	return nil
}

// errBadPeriod is what Set returns; badValue words it with the flag.
var errBadPeriod = errors.New("not a period")

// String is the period as Go writes a duration, "" when unset (so that
// help shows no default).
func (p *periodValue) String() string {
	if p == nil || p.d == 0 {
		return ""
	}
	s := p.d.String() // "24h0m0s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Get is the period as a time.Duration (flag.Getter).
func (p *periodValue) Get() any { return p.d }

// oncePeriod is --once-per's value.
func oncePeriod(c *cli.Context) time.Duration { return periodOf(c, "once-per") }

// periodOf is the value of a flag that takes a period.
func periodOf(c *cli.Context, name string) time.Duration {
	if p, ok := c.Generic(name).(*periodValue); ok {
		return p.d
	}
	return 0
}

// startedOr is when the run started, when a catch-up term may come first
// (catchUpOf), or else now: after a catch-up term that lasted past its
// period's end, the current period is still the one leaderrun started in.
func (o *onceSettings) startedOr(now time.Time) time.Time {
	if !o.started.IsZero() {
		return o.started
	}
	return now
}

// catchUpOf is the configuration of the catch-up term of a run that
// starts at now, or nil when there is none: --catch-up is off, or now is
// past the grace after the last period's end. Whether that period ran is
// read under the lease (once.Gate). With --catch-up, it fixes the current
// period at now, as it is fixed without it (onceGate): the catch-up term
// may last past that period's end.
func catchUpOf(cfg *runConfig, now time.Time) *runConfig {
	o := cfg.once
	if o == nil || o.grace <= 0 {
		return nil
	}
	o.started = now
	slot, until, ok := once.CatchUpSlot(o.period, o.grace, now)
	if !ok {
		return nil
	}
	c := *cfg
	co := *o
	co.catchUp, co.until = slot, until
	c.once = &co
	// One attempt: the grace is read once per term, under the lease, so
	// restarts in the term would retry the missed period past its grace
	// and, while it fails, hold the key from the current period's run on
	// every host. A failed catch-up is left to the next candidate within
	// the grace.
	c.sup.Restart = supervise.RestartNever
	return &c
}
