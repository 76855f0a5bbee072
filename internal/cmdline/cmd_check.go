//go:build linux

package cmdline

import (
	"errors"
	"fmt"
	"slices"

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
		fmt.Fprintf(errorOutput(), "leaderrun: %s\n", oneLine(err))
		return exitCode(exitcode.CheckNotLeader)
	case err != nil:
		return usage(unreadBackend(c, read.Key, fmt.Errorf("check key %q: %w", read.Key, err)))
	}
	return checkRemaining(c, read.Key, epoch, read.Holder)
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
