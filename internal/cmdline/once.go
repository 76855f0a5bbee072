//go:build linux

package cmdline

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/once"
	"github.com/leaderrun/leaderrun/locker"
)

// onceFlags are the options of once-per mode (distributed cron).
func onceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "once-per", Category: catLeadership, EnvVars: []string{"LEADERRUN_ONCE_PER"},
			Usage: "run the job once per `PERIOD` across hosts; periods are aligned to the Unix epoch in UTC (24h = each UTC day)"},
		&cli.StringFlag{Name: "run-id", Category: catLeadership, EnvVars: []string{"LEADERRUN_RUN_ID"},
			Usage: "name the slot explicitly, as in \"$(date +%F)\" (instead of, or with, --once-per)"},
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
		g.Slot, g.Keep = once.SlotOf(o.period, time.Now()), once.KeepPeriods*o.period
	}
	if o.runID != "" {
		g.Slot = o.runID
	}
	rl, ok := locker.RunLogOf(lk)
	if !ok {
		return nil, fmt.Errorf("--once-per/--run-id: backend %q keeps no run records", cfg.backend.Name)
	}
	g.Log = rl
	return g, nil
}
