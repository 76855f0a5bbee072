//go:build linux

package cmdline

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
)

// queryFlags are the options of the commands that only read the backend
// (status, check): the backend options of a run, the key also from
// LEADER_KEY (inside leaderrun's child it names the key the parent really
// leads), a bound on the whole read, and the unit whose settings to use.
// A backend's RunOnly options are accepted, so that the same backend
// options serve a run and a status, but hidden from help.
func queryFlags() []cli.Flag {
	flags := backendFlags()
	for _, f := range flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "key" {
			sf.EnvVars = append([]string{"LEADER_KEY"}, sf.EnvVars...)
			sf.Usage = "the leadership `KEY`, also given as the argument"
		}
		if runOnlyFlag(f.Names()[0]) {
			hide(f)
		}
	}
	return append(flags,
		&cli.DurationFlag{Name: "timeout", Category: catQuery, EnvVars: []string{"LEADERRUN_TIMEOUT"}, Value: 10 * time.Second,
			Usage: "give up reading the backend after this long (exit 125)"},
		&cli.StringFlag{Name: unitFlag, Category: catQuery,
			Usage: "use the settings of leaderrun@`NAME`.service: " + configDir + "/leaderrun.env, then " + configDir + "/NAME.env; the key defaults to NAME"},
	)
}

// queryKey is the key a status or check names: its one argument, else
// --key typed on the command line, else --unit's name, else the
// environment (LEADER_KEY, LEADERRUN_KEY).
func queryKey(c *cli.Context) (string, error) {
	if c.NArg() > 1 {
		return "", fmt.Errorf("%s takes at most one KEY argument, got %d: %q", c.Command.Name, c.NArg(), c.Args().Slice())
	}
	if arg := c.Args().First(); arg != "" {
		if givenOnCommandLine(c, "key") && c.String("key") != arg {
			return "", fmt.Errorf("the KEY argument %q and --key %q differ; give one", arg, c.String("key"))
		}
		return arg, nil
	}
	if unit := c.String(unitFlag); unit != "" && !givenOnCommandLine(c, "key") {
		return unit, nil
	}
	return c.String("key"), nil
}

// leaderRead is one read of a key's holder: Err is the backend's answer
// (locker.ErrNoLeader, a failure) for the command to judge.
type leaderRead struct {
	Key    string
	Holder locker.Holder
	Err    error
	// LastRun is the key's newest once-per record, when asked for and
	// the backend keeps one.
	LastRun *locker.Run
	// Control is the key's control record, when the backend keeps one
	// and it could be read.
	Control locker.Control
	// TTL is the TTL the holder declared, on a backend that keeps no
	// expiry of its own for it (a lease row: PostgreSQL, DynamoDB), when
	// asked for; 0 when unknown.
	TTL time.Duration
	// Term is the leader's term in the key's run history, when asked for
	// and recorded: what its job said over its notify socket.
	Term *locker.Term
	// Candidates are who waits for the key, when asked for and the
	// backend can tell (CandidatesListed), or why not (CandidatesErr).
	Candidates       []locker.Candidate
	CandidatesListed bool
	CandidatesErr    error
}

// readLeader reads the key's holder once, within --timeout. Its own error
// is a usage error (bad flags, a backend refused at construction).
// With lastRun (status) it also reads the newest once-per record, if any,
// the control record and the candidates waiting.
func readLeader(c *cli.Context, lastRun bool) (leaderRead, error) {
	lk, opts, err := queryLocker(c)
	if err != nil {
		return leaderRead{}, err
	}
	defer lk.Close()
	return readLeaderFrom(context.Background(), c, lk, opts.Name(), lastRun), nil
}

// readLeaderFrom is readLeader on a Locker already built, within
// --timeout and ctx: status --watch reads with one Locker every poll.
func readLeaderFrom(ctx context.Context, c *cli.Context, lk locker.Locker, key string, lastRun bool) leaderRead {
	ctx, cancel := context.WithTimeout(ctx, c.Duration("timeout"))
	defer cancel()
	h, err := lk.Leader(ctx)
	read := leaderRead{Key: key, Holder: h, Err: err}
	if rl, ok := locker.RunLogOf(lk); ok && lastRun {
		if run, err := rl.LatestRun(ctx); err == nil {
			read.LastRun = &run
		}
	}
	if hv, ok := locker.As[locker.HolderVersions](lk); ok && lastRun && err == nil && h.LeaseRemaining == 0 {
		// Only the holder's clock keeps its lease: the TTL it declared
		// is what status can say of it.
		if again, _, ttl, err := hv.HolderVersion(ctx); err == nil && again.Epoch == h.Epoch {
			read.TTL = ttl
		}
	}
	if ctl, ok := locker.ControlsOf(lk); ok && lastRun {
		if c, err := ctl.Control(ctx); err == nil {
			read.Control = c
		}
	}
	if hist, ok := locker.As[locker.History](lk); ok && lastRun && err == nil {
		if terms, err := hist.Terms(ctx, 3); err == nil {
			for _, t := range terms {
				if t.Epoch == h.Epoch && t.End.IsZero() {
					read.Term = &t
					break
				}
			}
		}
	}
	if lastRun {
		read.Candidates, read.CandidatesListed, read.CandidatesErr = readCandidates(ctx, lk)
	}
	return read
}

// queryLocker builds the backend from the command's flags, logging only
// errors so the command's own output stays clean.
func queryLocker(c *cli.Context) (locker.Locker, locker.Options, error) {
	key, err := queryKey(c)
	if err != nil {
		return nil, locker.Options{}, err
	}
	opts, err := lockerOptions(c, key)
	if err != nil {
		return nil, opts, err
	}
	if opts.Slot, err = querySlot(c); err != nil {
		return nil, opts, err
	}
	if c.Duration("timeout") <= 0 {
		return nil, opts, fmt.Errorf("--timeout must be greater than 0, got %v", c.Duration("timeout"))
	}
	lk, err := queryLockerFor(c, opts, c.Command.Name != "pause" && c.Command.Name != "step-down" && c.Command.Name != "resume")
	return lk, opts, err
}

// queryLockerFor builds the backend from the command's flags for opts.
// readOnly (status, check, history) creates nothing; the control commands
// write the control record and may create where it lives, as a run would.
func queryLockerFor(c *cli.Context, opts locker.Options, readOnly bool) (locker.Locker, error) {
	b, settings, err := readBackend(c, opts)
	if err != nil {
		return nil, err
	}
	lk, err := settings.New(opts, readOnly, newQuietLogger())
	return lk, configError(b, err)
}

// hide keeps f out of help, the man page and completions.
func hide(f cli.Flag) {
	switch f := f.(type) {
	case *cli.StringFlag:
		f.Hidden = true
	case *cli.BoolFlag:
		f.Hidden = true
	case *cli.DurationFlag:
		f.Hidden = true
	case *cli.IntFlag:
		f.Hidden = true
	case *cli.Uint64Flag:
		f.Hidden = true
	case *cli.StringSliceFlag:
		f.Hidden = true
	default:
		panic(fmt.Sprintf("hide: --%s is a %T; add its type", f.Names()[0], f))
	}
}

// unreadBackend is err, a failure to read or write the key's records,
// with defaultBackendHint added: every command that reads the backend
// (status, check, history, step-down, pause, resume) says it alike.
func unreadBackend(c *cli.Context, key string, err error) error {
	if err == nil {
		return nil
	}
	if base, _, ok := locker.SplitSlotKey(key); ok {
		key = base
	}
	return fmt.Errorf("%w%s", err, defaultBackendHint(c, key))
}

// defaultBackendHint is what an error reading the backend adds when no
// backend was named anywhere: `leaderrun status billing` typed on a host
// whose instance runs on etcd reads Consul, and a Consul URL alone does
// not say why.
func defaultBackendHint(c *cli.Context, key string) string {
	if c.IsSet("backend") || c.IsSet("unit") || c.IsSet("env-file") || os.Getenv("LEADERRUN_BACKEND") != "" || c.String("backend") != "consul" {
		return ""
	}
	if strings.Contains(key, "/") {
		return " (consul, the default, was read: name the key's backend with --backend)"
	}
	return fmt.Sprintf(" (consul, the default, was read: name the key's backend with --backend, or use --unit %s for the settings of leaderrun@%s)", key, key)
}
