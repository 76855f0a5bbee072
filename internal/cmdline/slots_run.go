//go:build linux

package cmdline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
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

// slotReadTimeout bounds one read of the control record, and the reads
// of every slot that say whether a slot campaign that won nothing saw a
// holder.
const slotReadTimeout = 5 * time.Second

// readSlot reads the holder of slot s of the key with a Locker of its
// own, built to read only.
func readSlot(ctx context.Context, cfg *runConfig, s int) (slotRecord, error) {
	o := cfg.opts
	o.Slot = s
	lk, err := cfg.settings.New(o, true, newQuietLogger())
	if err != nil {
		return slotRecord{}, err
	}
	defer lk.Close()
	return slotReaderOf(ctx, lk)
}

// winSlot is the slot campaign of a run with --holders N > 1: it builds
// one Locker per slot, refuses to campaign when a live holder of the key
// runs with another N, campaigns for every slot at once, checks the
// agreement again once it won, and returns the winning slot's Locker
// (whose first Acquire returns the won lease). cfg.opts.Slot is then
// the slot won. It races only the slots the key's control record does not
// hold it back from (held: the term it last stepped down from), and races
// again as that changes. A non-nil error is the exit to return; nothing
// is held then.
func winSlot(ctx context.Context, cfg *runConfig, log hclog.Logger, held slotHold) (locker.Locker, error) {
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
		o.Slot, o.Holders = s, n
		lk, err := cfg.settings.New(o, false, log)
		if err != nil {
			closeAll(-1)
			return nil, usage(cfg.configError(err))
		}
		lks[s] = lk
	}
	read := func(rctx context.Context, s int) (slotRecord, error) {
		if s < n {
			return slotReaderOf(rctx, lks[s])
		}
		return readSlot(rctx, cfg, s)
	}
	ctl, _ := locker.ControlsOf(lks[0])
	agree := newAgreement(key, n, ctl, read, log)
	check := func(own int) error {
		if own < 0 {
			return agree.before(ctx)
		}
		return agree.won(ctx, own)
	}
	if err := check(-1); err != nil {
		closeAll(-1)
		if ctx.Err() != nil {
			return nil, slotCampaignExit(ctx, cfg, ctx.Err(), func() bool { return false }, "", log)
		}
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
	won, err := raceFree(actx, race, ctl, slotFilter{key: key, id: cfg.opts.ID, held: held}, cfg.opts.NoWait, log)
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
		if ctx.Err() != nil {
			return nil, slotCampaignExit(ctx, cfg, ctx.Err(), func() bool { return false }, "", log)
		}
		return nil, usage(err)
	}
	closeAll(won.Slot)
	cfg.opts.Slot, cfg.opts.Holders = won.Slot, n
	log.Info("won a slot", "slot", won.Slot, "holders", n, "epoch", won.Lease.Epoch())
	return &preWon{Locker: race[won.Slot], lease: won.Lease, log: log}, nil
}

// slotHold is the slot term a candidate last stepped down from: the slot
// key it held and its epoch (0: none).
type slotHold struct {
	name  string
	epoch uint64
}

// slotFilter says which slots of key the control record lets candidate
// id campaign for (DESIGN §1.16): none while paused, and not a slot
// reserved for another candidate nor the one it stepped down from, until
// another term took it or the request ended.
type slotFilter struct {
	key, id string
	held    slotHold
}

// free lists the slots of n that c lets the candidate campaign for at now,
// and until when at the latest that holds (zero: until c changes).
func (f slotFilter) free(c locker.Control, n int, now time.Time) (free []int, until time.Time) {
	for s := range n {
		name := locker.SlotKey(f.key, s)
		var e uint64
		if name == f.held.name {
			e = f.held.epoch
		}
		if !c.Holds(name, f.id, e, now) {
			free = append(free, s)
		} else if c.Pause == nil && c.StepDown != nil {
			until = c.StepDown.Until
		}
	}
	return free, until
}

// errHeldBackAll is a --no-wait campaign held back from every slot.
var errHeldBackAll = fmt.Errorf("held back from every slot: %w", locker.ErrHeld)

// raceFree is raceSlots over the slots the control record (ctl, nil when
// the backend keeps none) lets this candidate campaign for. A change of
// the record, or the end of a hold, that changes which slots those are
// cancels the race and starts it again over the new ones; while no slot
// is free it waits. A record it cannot read races every slot: the read
// after the win gives a slot back that it must not hold (§1.16).
func raceFree(ctx context.Context, race []locker.Locker, ctl locker.Controls, f slotFilter, noWait bool, log hclog.Logger) (slotWon, error) {
	if ctl == nil {
		return raceSlots(ctx, race, log)
	}
	said := ""
	for {
		rctx, cancel := context.WithTimeout(ctx, slotReadTimeout)
		c, err := ctl.Control(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return slotWon{}, ctx.Err()
			}
			log.Debug("cannot read the control record; campaigning for every slot", "error", err)
			return raceSlots(ctx, race, log)
		}
		free, until := f.free(c, len(race), time.Now())
		if why := fmt.Sprint(len(race)-len(free), " of ", len(race)); len(free) < len(race) && why != said {
			log.Info("holding back from slots", "held_back", why, "reason", holdReason(c))
			said = why
		} else if len(free) == len(race) && said != "" {
			log.Info("campaigning for every slot again")
			said = ""
		}
		if len(free) == 0 && noWait {
			return slotWon{}, errHeldBackAll
		}
		wctx, restart := context.WithCancel(ctx)
		var restarted atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			var untilC <-chan time.Time
			if !until.IsZero() {
				t := time.NewTimer(time.Until(until))
				defer t.Stop()
				untilC = t.C
			}
			changed := make(chan locker.Control, 1)
			watched := make(chan struct{})
			defer func() { <-watched }() // wctx has ended by then
			go func() {
				defer close(watched)
				version := c.Version
				for wctx.Err() == nil {
					nc, err := ctl.WaitControl(wctx, version)
					if err != nil {
						sleepCtx(wctx, time.Second)
						continue
					}
					version = nc.Version
					if now, _ := f.free(nc, len(race), time.Now()); !slices.Equal(now, free) {
						changed <- nc
						return
					}
				}
			}()
			select {
			case <-wctx.Done():
				return
			case <-untilC:
			case <-changed:
			}
			restarted.Store(true)
			restart()
		}()
		var won slotWon
		if len(free) == 0 {
			<-wctx.Done()
			err = wctx.Err()
		} else {
			sub := make([]locker.Locker, len(free))
			for i, s := range free {
				sub[i] = race[s]
			}
			won, err = raceSlots(wctx, sub, log)
			if err == nil {
				won.Slot = free[won.Slot]
			}
		}
		again := restarted.Load()
		restart()
		<-done
		if err != nil && again && ctx.Err() == nil {
			continue
		}
		return won, err
	}
}

// holdReason says what the control record holds back.
func holdReason(c locker.Control) string {
	switch {
	case c.Pause != nil:
		return fmt.Sprintf("paused by %s: %s", c.Pause.By, c.Pause.Reason)
	case c.StepDown != nil && c.StepDown.To != "":
		return fmt.Sprintf("slot key %s is handed over to %s", c.StepDown.Key, c.StepDown.To)
	case c.StepDown != nil:
		return fmt.Sprintf("stepped down from slot key %s; another takes it first", c.StepDown.Key)
	}
	return ""
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
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
	case locker.Unreached(err):
		log.Error("backend could not be reached", "error", err)
		return exitCode(exitcode.Internal)
	case errors.Is(err, locker.ErrRefused):
		log.Error("backend refused", "error", err)
		return exitCode(exitcode.Internal)
	}
	return usage(err)
}

// withAgreement wraps the Locker of a run of one holder in agreeing: the
// key's other slots are read after a win when the control record says a
// candidate of more slots has been there (DESIGN §1.15).
func withAgreement(cfg *runConfig, lk locker.Locker, log hclog.Logger) *agreeing {
	ctl, _ := locker.ControlsOf(lk)
	key := cfg.opts.Key
	read := func(ctx context.Context, s int) (slotRecord, error) { return readSlot(ctx, cfg, s) }
	return &agreeing{Locker: lk, log: log, agree: newAgreement(key, 1, ctl, read, log)}
}

// slotEnv are the child's LEADER_SLOT and LEADER_HOLDERS.
func slotEnv(cfg *runConfig) []envVar {
	return []envVar{{Name: "LEADER_SLOT", Value: strconv.Itoa(cfg.opts.Slot)}, {Name: "LEADER_HOLDERS", Value: strconv.Itoa(max(cfg.holders, 1))}}
}

// metricsSlot labels the metrics of a --holders N > 1 run with its slot.
func metricsSlot(cfg *runConfig) string {
	if cfg.holders <= 1 {
		return ""
	}
	return strconv.Itoa(cfg.opts.Slot)
}
