//go:build linux

package cmdline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/supervise"
)

// holdersFlag is --holders of a run and of status.
func holdersFlag(usage string) cli.Flag {
	return &cli.IntFlag{Name: "holders", Category: catLeadership, EnvVars: []string{"LEADERRUN_HOLDERS"}, Value: 1, Usage: usage}
}

// readHolders reads --holders: 1 to locker.MaxHolders.
func readHolders(c *cli.Context) (int, error) {
	n := c.Int("holders")
	if n < 1 || n > locker.MaxHolders {
		return 0, fmt.Errorf("--holders must be from 1 to %d, got %d", locker.MaxHolders, n)
	}
	return n, nil
}

// slotReadTimeout bounds the reads of one --holders agreement check, all
// slots together; a slot not read in time is not a disagreement.
const slotReadTimeout = 5 * time.Second

// winSlot is the slot campaign of a run with --holders N > 1: it builds
// one Locker per slot, refuses to campaign when a live holder of the key
// runs with another N, campaigns for every slot at once, checks the
// agreement again once it won, and returns the winning slot's Locker
// (whose first Acquire returns the won lease). cfg.opts then name the
// slot's key. A non-nil error is the exit to return; nothing is held then.
func winSlot(ctx context.Context, cfg *runConfig, log hclog.Logger) (locker.Locker, error) {
	n, key := cfg.holders, cfg.opts.Key
	lks := make([]locker.Locker, n)
	closeAll := func(except int) {
		for s, lk := range lks {
			if lk != nil && s != except {
				lk.Close()
			}
		}
	}
	for s := range lks {
		o := cfg.opts
		o.Key, o.Holders = locker.SlotKey(key, s), n
		lk, err := cfg.settings.New(o, false, log)
		if err != nil {
			closeAll(-1)
			return nil, usage(cfg.configError(err))
		}
		lks[s] = lk
	}
	read := func(rctx context.Context, s int) (locker.Holder, error) {
		if s < n {
			return lks[s].Leader(rctx)
		}
		o := cfg.opts
		o.Key = locker.SlotKey(key, s)
		lk, err := cfg.settings.New(o, true, newQuietLogger())
		if err != nil {
			return locker.Holder{}, err
		}
		defer lk.Close()
		return lk.Leader(rctx)
	}
	check := func(own int) error {
		cctx, cancel := context.WithTimeout(ctx, slotReadTimeout)
		defer cancel()
		return checkHolders(cctx, key, n, own, read)
	}
	if err := check(-1); err != nil {
		closeAll(-1)
		return nil, usage(err)
	}
	race := make([]locker.Locker, n)
	for s, lk := range lks {
		race[s] = lk
		if cfg.opts.NoWait {
			addr, timeout := cfg.settings.Target(lk)
			race[s] = locker.OneAttempt(lk, locker.SlotKey(key, s), addr, timeout)
		}
	}
	actx, cancel := ctx, context.CancelFunc(func() {})
	if cfg.sup.AcquireTimeout > 0 {
		actx, cancel = context.WithTimeout(ctx, cfg.sup.AcquireTimeout)
	}
	defer cancel()
	log.Debug("campaigning for every slot", "holders", n)
	won, err := raceSlots(actx, race, log)
	if err != nil {
		seen := func() bool {
			sctx, cancel := context.WithTimeout(ctx, slotReadTimeout)
			defer cancel()
			for s := range n {
				if h, err := read(sctx, s); err == nil && h.ID != "" {
					return true
				}
			}
			return false
		}
		defer closeAll(-1)
		target, _ := cfg.settings.Target(lks[0])
		return nil, slotCampaignExit(ctx, cfg, err, seen, target, log)
	}
	if err := check(won.Slot); err != nil {
		releaseNow(won.Lease, log)
		closeAll(-1)
		return nil, usage(err)
	}
	closeAll(won.Slot)
	cfg.slot = won.Slot
	cfg.opts.Key, cfg.opts.Holders = locker.SlotKey(key, won.Slot), n
	log.Info("won a slot", "slot", won.Slot, "holders", n, "epoch", won.Lease.Epoch())
	return &preWon{Locker: race[won.Slot], lease: won.Lease, log: log}, nil
}

// slotCampaignExit is the exit of a slot campaign that won nothing; seen
// reads whether any slot has a holder now.
func slotCampaignExit(ctx context.Context, cfg *runConfig, err error, seen func() bool, target string, log hclog.Logger) error {
	var sc supervise.SignalCause
	switch {
	case errors.As(context.Cause(ctx), &sc):
		log.Info("stopped while waiting for a slot")
		return exitCode(exitcode.SignalBase + int(sc.Signal))
	case errors.Is(err, locker.ErrHeld):
		log.Info("not acquired", "reason", "every slot is held")
		return exitCode(cfg.conflict)
	case errors.Is(err, context.DeadlineExceeded) && seen():
		// --acquire-timeout with the slots held: "held elsewhere".
		log.Info("no slot acquired within --acquire-timeout", "timeout", cfg.sup.AcquireTimeout)
		return exitCode(cfg.conflict)
	case errors.Is(err, context.DeadlineExceeded):
		// No holder could be read: an outage, not a conflict (DESIGN §4).
		log.Warn("no slot acquired within --acquire-timeout, and no holder of any slot was read", "timeout", cfg.sup.AcquireTimeout, "address", target)
		return exitCode(exitcode.Internal)
	case errors.Is(err, locker.ErrRefused):
		log.Error("backend refused", "error", err)
		return exitCode(exitcode.Internal)
	}
	return usage(err)
}

// slotEnv are the child's LEADER_SLOT and LEADER_HOLDERS.
func slotEnv(cfg *runConfig) []envVar {
	return []envVar{{"LEADER_SLOT", strconv.Itoa(cfg.slot)}, {"LEADER_HOLDERS", strconv.Itoa(max(cfg.holders, 1))}}
}

// metricsSlot labels the metrics of a --holders N > 1 run with its slot.
func metricsSlot(cfg *runConfig) string {
	if cfg.holders <= 1 {
		return ""
	}
	return strconv.Itoa(cfg.slot)
}
