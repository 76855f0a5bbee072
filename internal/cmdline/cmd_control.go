//go:build linux

package cmdline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/locker"
)

// The control commands (DESIGN §1.16): step-down, pause and resume write
// the key's control record on the backend with the run's backend options;
// every leaderrun of the key reads it and gives up or holds back. None of
// them can make anyone lead.

// defaultControlTimeout is how long step-down and pause wait for the
// holder to act when --timeout is not given.
const defaultControlTimeout = 30 * time.Second

// controlFlags are the query options with --timeout bounding the whole
// command, and the extra flags.
func controlFlags(timeoutUsage string, extra ...cli.Flag) []cli.Flag {
	flags := queryFlags()
	for _, f := range flags {
		if df, ok := f.(*cli.DurationFlag); ok && df.Name == "timeout" {
			df.Value, df.Usage = defaultControlTimeout, timeoutUsage
		}
	}
	return slices.Concat(flags, extra, commonFlags())
}

func stepDownCommand() *cli.Command {
	return &cli.Command{
		Name:      "step-down",
		Usage:     "make the leader of a key stop its job, release and wait again, so another candidate leads",
		UsageText: synopsisStepDown,
		Description: "Asks the current term of KEY to hand over: its leaderrun stops the job as on SIGTERM, " +
			"releases, and goes back to waiting. With --to ID only candidate ID may take the key until " +
			"--timeout passes (at most 1h: a longer hold is a pause; resume ends it sooner). Exits 0 once another term has begun, printing its holder and epoch, " +
			"and at once, saying so, when ID already leads; 1 when " +
			"no other candidate took the key within --timeout (an older leaderrun ignores the request); " +
			"125 on bad input, an unknown key or a key nobody leads.",
		Flags: controlFlags("how long to wait for another candidate to lead, and to keep the key for it (at most 1h)",
			&cli.StringFlag{Name: "to", Category: catQuery, Usage: "only the candidate whose --id is `ID` may take the key next"},
			slotFlag()),
		Before:       divertDoubleDash,
		OnUsageError: divertUsageError,
		Action:       stepDownAction,
	}
}

func pauseCommand() *cli.Command {
	return &cli.Command{
		Name:      "pause",
		Usage:     "stop a key's job everywhere and keep every candidate from starting it until resume",
		UsageText: synopsisPause,
		Description: "Pauses KEY: its leaders stop their jobs and release, and no candidate campaigns until " +
			"`leaderrun resume KEY`; candidates keep running and waiting. status shows who paused it, " +
			"since when and why. Exits 0 once nobody leads the key or any of its slots (--holders: as many as its control record or a holder names, at least --holders N), 1 when a leader still holds one after " +
			"--timeout (an older leaderrun ignores the pause), 125 on bad input.",
		Flags: controlFlags("how long to wait for the leaders to stop",
			&cli.StringFlag{Name: "reason", Category: catQuery, Usage: "why the key is paused, shown by status (required)"},
			holdersFlag("the key runs with --holders `N`: wait for all N slots to be free")),
		Before:       divertDoubleDash,
		OnUsageError: divertUsageError,
		Action:       pauseAction,
	}
}

func resumeCommand() *cli.Command {
	return &cli.Command{
		Name:      "resume",
		Usage:     "end a pause or a step-down's reservation: candidates campaign for the key again",
		UsageText: synopsisResume,
		Description: "Clears the pause of KEY and a step-down still under way (one that keeps the key for " +
			"step-down --to's candidate, or keeps out the holder that stepped down), saying what it " +
			"cleared. Exits 0 (also when there was nothing to clear), 125 on bad input.",
		Flags:        controlFlags("give up writing to the backend after this long"),
		Before:       divertDoubleDash,
		OnUsageError: divertUsageError,
		Action:       resumeAction,
	}
}

// controlTarget is what a control command works on.
type controlTarget struct {
	lk   locker.Locker
	ctl  locker.Controls
	opts locker.Options
	key  string // the key the operator named
}

// openControl builds the backend and finds its control record.
func openControl(c *cli.Context) (*controlTarget, error) {
	lk, opts, err := queryLocker(c)
	if err != nil {
		return nil, err
	}
	ctl, ok := locker.ControlsOf(lk)
	if !ok {
		lk.Close()
		return nil, fmt.Errorf("--backend %s keeps no control record", c.String("backend"))
	}
	return &controlTarget{lk: lk, ctl: ctl, opts: opts, key: opts.Key}, nil
}

// updateControl reads the record, applies change and writes it back,
// again from the read while another write comes first.
func updateControl(ctx context.Context, ctl locker.Controls, change func(*locker.Control) error) error {
	for {
		c, err := ctl.Control(ctx)
		var bad *locker.BadControlError
		if errors.As(err, &bad) {
			// A record nothing can read holds every candidate back; the
			// operator's write replaces it.
			fmt.Fprintf(errorOutput(), "leaderrun: replacing a control record that does not parse: %s\n", oneLine(err))
			c, err = locker.Control{Version: bad.Version}, nil
		}
		if err != nil {
			return err
		}
		if err := change(&c); errors.Is(err, errUnchanged) && bad == nil {
			return nil
		} else if err != nil && !errors.Is(err, errUnchanged) {
			return err
		}
		if _, err = ctl.SetControl(ctx, c); !errors.Is(err, locker.ErrConflict) {
			return err
		}
	}
}

// errUnchanged tells updateControl that the record needs no write.
var errUnchanged = errors.New("unchanged")

// operator names who runs the command: user@host.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// controlPoll is how often the control commands read who leads.
const controlPoll = 100 * time.Millisecond

func stepDownAction(c *cli.Context) error {
	if d := c.Duration("timeout"); d > locker.MaxReservation {
		return usage(fmt.Errorf("--timeout of step-down must be at most %s (it is how long the key is kept for the next holder; to keep it from every candidate longer, pause it), got %s",
			roundDuration(locker.MaxReservation), roundDuration(d)))
	}
	t, err := openControl(c)
	if err != nil {
		return usage(err)
	}
	defer t.lk.Close()
	to := c.String("to")
	if c.IsSet("to") && to == "" {
		return usage(errors.New("--to must name a candidate's --id"))
	}
	timeout := c.Duration("timeout")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h, err := t.lk.Leader(ctx)
	var nu *locker.NeverUsedError
	switch {
	case errors.As(err, &nu):
		return usage(fmt.Errorf("step-down: %w", nu))
	case errors.Is(err, locker.ErrNoLeader):
		return usage(fmt.Errorf("step-down: nobody leads key %q: there is nothing to step down", t.opts.Name()))
	case err != nil:
		return usage(unreadBackend(c, t.key, fmt.Errorf("step-down: read the leader of %q: %w", t.opts.Name(), err)))
	case to != "" && h.ID == to:
		// Nothing to do, as starting a unit that runs already: not an error.
		fmt.Printf("%s already leads %s with epoch %d\n", printable(to), printable(t.opts.Name()), h.Epoch)
		return nil
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	req := &locker.StepDown{Key: t.opts.Name(), Epoch: h.Epoch, To: to, By: operator(), At: now, Until: now.Add(timeout)}
	var paused error
	err = updateControl(ctx, t.ctl, func(rec *locker.Control) error {
		if rec.Pause != nil {
			paused = fmt.Errorf("key %q is paused by %s: resume it first", t.key, rec.Pause.By)
			return paused
		}
		rec.StepDown = req
		return nil
	})
	switch {
	case err != nil && errors.Is(err, paused):
		return usage(fmt.Errorf("step-down: %w", err))
	case err != nil:
		return usage(unreadBackend(c, t.key, fmt.Errorf("step-down: %w", err)))
	}
	fmt.Fprintf(errorOutput(), "leaderrun: asked %s (epoch %d) to step down from %q\n", printable(h.ID), h.Epoch, t.opts.Name())
	for {
		next, err := t.lk.Leader(ctx)
		// With --to, another holder's term is one that won meanwhile and
		// gives the key back before anything starts: not the answer.
		if err == nil && next.Epoch > h.Epoch && (to == "" || next.ID == to) {
			if next.ID == h.ID && to == "" {
				fmt.Fprintf(errorOutput(), "leaderrun: no other candidate took key %q within %s; %s leads it again (epoch %d)\n",
					t.opts.Name(), roundDuration(timeout), printable(next.ID), next.Epoch)
				return exitCode(exitcode.ControlNotDone)
			}
			fmt.Printf("%s leads %s with epoch %d\n", printable(next.ID), printable(t.opts.Name()), next.Epoch)
			return nil
		}
		select {
		case <-ctx.Done():
			return stepDownTimedOut(t, h, to, timeout)
		case <-time.After(controlPoll):
		}
	}
}

// stepDownTimedOut says why a step-down did not hand over in time.
func stepDownTimedOut(t *controlTarget, h locker.Holder, to string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now, err := t.lk.Leader(ctx)
	var why string
	switch {
	case err == nil && now.Epoch == h.Epoch:
		why = fmt.Sprintf("%s (epoch %d) still leads: it did not act on the request (is it an older leaderrun?)", h.ID, h.Epoch)
	case to != "":
		why = fmt.Sprintf("candidate %s did not take it (is it waiting, with --id %s?)", to, to)
	default:
		why = "no other candidate took it"
	}
	fmt.Fprintf(errorOutput(), "leaderrun: step-down of %q not done within %s: %s\n", t.opts.Name(), roundDuration(timeout), printable(why))
	return exitCode(exitcode.ControlNotDone)
}

func pauseAction(c *cli.Context) error {
	reason := strings.TrimSpace(c.String("reason"))
	if reason == "" {
		return usage(errors.New("--reason is required: say why the key is paused (status shows it)"))
	}
	n, err := readHolders(c)
	if err != nil {
		return usage(err)
	}
	t, err := openControl(c)
	if err != nil {
		return usage(err)
	}
	defer t.lk.Close()
	timeout := c.Duration("timeout")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if h, err := t.lk.Leader(ctx); err == nil && h.Holders > n {
		n = h.Holders // the key's holders say how many slots it has
	}
	p := &locker.Pause{By: operator(), Since: time.Now().UTC().Truncate(time.Millisecond), Reason: reason}
	err = updateControl(ctx, t.ctl, func(rec *locker.Control) error {
		if rec.Pause != nil {
			p.Since = rec.Pause.Since // paused already: keep since when
		}
		rec.Pause = p
		// The record's bound says how many slots a candidate of the key
		// ran with (DESIGN §1.15): slot 0 may be free while another runs.
		n = max(n, rec.Holders)
		return nil
	})
	if err != nil {
		return usage(unreadBackend(c, t.key, fmt.Errorf("pause: %w", err)))
	}
	fmt.Fprintf(errorOutput(), "leaderrun: paused %q: %s\n", t.key, printable(reason))
	var slots []locker.Locker
	defer func() {
		for _, lk := range slots {
			lk.Close()
		}
	}()
	// More slots than --holders says, when the control record or a
	// holder says so: pause returns only once none of them has a holder.
	addSlots := func(n int) error {
		for s := len(slots); s < min(n, locker.MaxHolders); s++ {
			o := t.opts
			o.Slot = s
			lk, err := queryLockerFor(c, o, true)
			if err != nil {
				return err
			}
			slots = append(slots, lk)
		}
		return nil
	}
	if err := addSlots(n); err != nil {
		return usage(err)
	}
	for {
		held := ""
		for s := 0; s < len(slots); s++ {
			h, err := slots[s].Leader(ctx)
			if err == nil && h.Holders > len(slots) {
				if err := addSlots(h.Holders); err != nil {
					return usage(err)
				}
			}
			if err == nil {
				held = fmt.Sprintf("%s (epoch %d) still leads %s", h.ID, h.Epoch, locker.SlotKey(t.key, s))
				break
			}
			if !errors.Is(err, locker.ErrNoLeader) {
				// Not read is not free: a holder may still run its job.
				held = fmt.Sprintf("who leads %s could not be read (%v)", locker.SlotKey(t.key, s), oneLine(err))
				break
			}
		}
		if held == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			if !strings.HasPrefix(held, "who leads") {
				held += " (is it an older leaderrun?)"
			}
			fmt.Fprintf(errorOutput(), "leaderrun: key %q is paused, but within %s %s\n", t.key, roundDuration(timeout), printable(held))
			return exitCode(exitcode.ControlNotDone)
		case <-time.After(controlPoll):
		}
	}
}

func resumeAction(c *cli.Context) error {
	t, err := openControl(c)
	if err != nil {
		return usage(err)
	}
	defer t.lk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), c.Duration("timeout"))
	defer cancel()
	// What was cleared, as the record said it when the write succeeded.
	var pause *locker.Pause
	var sd *locker.StepDown
	var void bool
	err = updateControl(ctx, t.ctl, func(rec *locker.Control) error {
		now := time.Now()
		pause, sd, void = rec.Pause, nil, false
		if rec.StepDown.Reserves(now) {
			sd, void = rec.StepDown, rec.StepDown.Void(now)
		}
		if pause == nil && sd == nil {
			return errUnchanged
		}
		rec.Pause = nil
		if sd != nil {
			rec.StepDown = nil
		}
		return nil
	})
	if err != nil {
		return usage(unreadBackend(c, t.key, fmt.Errorf("resume: %w", err)))
	}
	if pause == nil && sd == nil {
		fmt.Fprintf(errorOutput(), "leaderrun: key %q was not paused and no step-down keeps it\n", t.key)
		return nil
	}
	if pause != nil {
		fmt.Fprintf(errorOutput(), "leaderrun: resumed %q, paused by %s since %s: %s\n",
			t.key, printable(pause.By), pause.Since.Format(time.RFC3339), printable(pause.Reason))
	}
	if sd != nil {
		what := "step-down of epoch " + stepDownText(sd)
		if void {
			what += " (void: further ahead than any leaderrun writes one)"
		}
		fmt.Fprintf(errorOutput(), "leaderrun: cleared the %s\n", printable(what))
	}
	return nil
}
