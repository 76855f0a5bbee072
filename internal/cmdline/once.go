//go:build linux

package cmdline

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/once"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/consul"
	"github.com/leaderrun/leaderrun/locker/local"
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

// onceGate builds the once-per gate from the flags, or nil when once-per
// mode is off. The slot is fixed now, when this invocation starts, not
// when it wins leadership.
func onceGate(c *cli.Context, opts locker.Options, lk locker.Locker, skipCode int, log hclog.Logger) (*once.Gate, error) {
	period, runID, record := c.Duration("once-per"), c.String("run-id"), c.String("once-record")
	if record != once.RecordSuccess && record != once.RecordStart {
		return nil, fmt.Errorf("--once-record must be success or start, got %q", record)
	}
	if !c.IsSet("once-per") && !c.IsSet("run-id") {
		if c.IsSet("once-record") {
			return nil, errors.New("--once-record needs --once-per or --run-id")
		}
		return nil, nil
	}
	g := &once.Gate{Options: opts, Record: record, SkipCode: skipCode, Logger: log.Named("once"), Keep: once.RunIDKeep}
	if c.IsSet("once-per") {
		if err := once.ValidatePeriod(period); err != nil {
			return nil, fmt.Errorf("--once-per %w", err)
		}
		g.Slot, g.Keep = once.SlotOf(period, time.Now()), once.KeepPeriods*period
	}
	if c.IsSet("run-id") {
		if err := locker.ValidateSlot(runID); err != nil {
			return nil, fmt.Errorf("--run-id %w", err)
		}
		g.Slot = runID
	}
	rl, ok := locker.RunLogOf(lk)
	if !ok {
		return nil, fmt.Errorf("--once-per/--run-id: backend %q keeps no run records", c.String("backend"))
	}
	g.Log = rl
	return g, nil
}

// attemptTarget is what a --no-wait attempt talks to, for its error line,
// and how long it may take: the backend's dial timeout. A backend that knows
// its own target says so (ZooKeeper, Kubernetes).
func attemptTarget(c *cli.Context, lk locker.Locker) (string, time.Duration) {
	if t, ok := lk.(interface {
		Target() (string, time.Duration)
	}); ok {
		return t.Target()
	}
	switch c.String("backend") {
	case "etcd":
		return c.String("etcd-endpoints"), c.Duration("etcd-dial-timeout")
	case "consul":
		addr := c.String("consul-addr")
		if addr == "" {
			addr = "127.0.0.1:8500"
		}
		return addr, consul.DialTimeout
	default:
		dir := c.String("lock-dir")
		if dir == "" {
			dir = local.DefaultDir()
		}
		return dir, 0
	}
}
