//go:build linux

package cmdline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/locker"
)

// checkCommand is `leaderrun check`: does this epoch still lead the key?
// Inside leaderrun's child it needs no flags at all (DESIGN §3).
func checkCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "exit 0 if epoch N still leads the key, 1 if not, 125 on error",
		UsageText: synopsisCheck,
		Description: "Reads the current holder of KEY with a linearizable read (one round trip) and " +
			"exits 0 if its epoch is N, 1 if not (stderr names the current holder and epoch, " +
			"or says \"no leader\"), 125 if the backend cannot be read. Run from leaderrun's " +
			"child it takes KEY, N and the backend settings from LEADER_KEY, LEADER_EPOCH, LEADER_SLOT, " +
			"LEADERRUN_BACKEND, LEADERRUN_PREFIX and the backend's address variables: " +
			"`leaderrun check || exit 1` before each critical step.",
		Flags: slices.Concat(queryFlags(),
			[]cli.Flag{epochFlag(), slotFlag()},
			remainingFlags(),
			commonFlags()),
		Before:       divertDoubleDash,
		OnUsageError: divertUsageError,
		Action:       checkAction,
	}
}

// epochFlag is check's --epoch.
func epochFlag() cli.Flag {
	return &cli.Uint64Flag{Name: "epoch", Category: catQuery, EnvVars: []string{"LEADER_EPOCH"}, Usage: "the epoch `N` that should lead"}
}

func checkAction(c *cli.Context) error {
	if !c.IsSet("epoch") {
		return usage(errors.New("--epoch is required (leaderrun sets LEADER_EPOCH in its child)"))
	}
	epoch := c.Uint64("epoch")
	read, err := readLeader(c, false)
	if err != nil {
		return usage(err)
	}
	err = checkEpoch(read.Key, epoch, read.Holder, read.Err)
	switch {
	case errors.Is(err, errNotLeader):
		fmt.Fprintf(errorOutput(), "leaderrun: %s%s\n", oneLine(err), printable(otherSlots(c, read, epoch)))
		return exitCode(exitcode.CheckNotLeader)
	case err != nil:
		return usage(unreadBackend(c, read.Key, fmt.Errorf("check key %q: %w", read.Key, err)))
	}
	return checkRemaining(c, read.Key, epoch, read.Holder)
}

// otherSlots is what a check that found epoch not leading slot 0 of a key
// run with --holders N adds when epoch holds another slot: its slot, and
// --slot to check it. The key's slots are known as status knows them
// (statusReport.withSlots): its control record's bound, its slot 0's
// holder's N. "" when --slot was given, the key has no slots, none has
// epoch, or they cannot be read: the answer is "not leader" of slot 0
// either way.
func otherSlots(c *cli.Context, read leaderRead, epoch uint64) string {
	if c.IsSet("slot") {
		return ""
	}
	opts, err := lockerOptions(c, read.Key)
	if err != nil {
		return ""
	}
	b, settings, err := readBackend(c, opts)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Duration("timeout"))
	defer cancel()
	ctl, _ := readControlRecord(ctx, settings.New, opts)
	n := ctl.Holders
	if read.Err == nil {
		n = max(n, read.Holder.Holders)
	}
	if n <= 1 {
		return ""
	}
	slots, _, err := readSlots(c, settings.New, b, opts, min(n, locker.MaxHolders))
	if err != nil {
		return ""
	}
	var held []int
	for _, s := range slots {
		if s.Slot > 0 && s.Leader != nil && s.Leader.Epoch == epoch {
			held = append(held, s.Slot)
		}
	}
	switch len(held) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(" (the key runs with --holders %d: epoch %d holds slot %d; check it with --slot %d, as LEADER_SLOT says in its job)", n, epoch, held[0], held[0])
	}
	return fmt.Sprintf(" (the key runs with --holders %d: epoch %d holds slots %s; check one with --slot S, as LEADER_SLOT says in its job)", n, epoch, strings.Trim(fmt.Sprint(held), "[]"))
}

// errNotLeader is returned by checkEpoch when the epoch no longer holds the
// key; its message names the current holder and epoch, or "no leader".
var errNotLeader = errors.New("not leader")

// checkEpoch decides `leaderrun check` from the result of Locker.Leader:
// nil when epoch still holds key, an error wrapping errNotLeader when it
// does not, and the backend's error as is when it could not be read.
func checkEpoch(key string, epoch uint64, h locker.Holder, err error) error {
	var nu *locker.NeverUsedError
	switch {
	case errors.As(err, &nu):
		return fmt.Errorf("%w: epoch %d does not hold key %q: no leader, the key was never used at %s", errNotLeader, epoch, key, nu.Where)
	case errors.Is(err, locker.ErrNoLeader):
		return fmt.Errorf("%w: epoch %d does not hold key %q: no leader", errNotLeader, epoch, key)
	case err != nil:
		return err
	case h.Epoch != epoch:
		who := h.ID
		if h.Hostname != "" && h.PID != 0 {
			who = fmt.Sprintf("%s (host %s, pid %d)", h.ID, h.Hostname, h.PID)
		}
		return fmt.Errorf("%w: epoch %d does not hold key %q: held by %s with epoch %d", errNotLeader, epoch, key, who, h.Epoch)
	}
	return nil
}
