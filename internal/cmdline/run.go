//go:build linux

// Package cmdline is leaderrun's command line: it parses the flags and the
// environment once into a configuration and runs the command that names.
// Nothing below it sees the flag parser; the logic lives in supervise/,
// locker/, contain/ and guard/.
package cmdline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/internal/logline"
	"github.com/leaderrun/leaderrun/internal/ops"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/signals"
	"github.com/leaderrun/leaderrun/supervise"
)

// Main runs leaderrun with the command line args (args[0] is the program
// name) and returns its exit code.
func Main(args []string) int {
	// A closed stderr (a restarted log collector) must not kill leaderrun
	// with SIGPIPE: that would take the child down with it. Handling the
	// signal, rather than ignoring it, keeps the child's default SIGPIPE.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	applyRuntimeSettings()
	return runApp(args)
}

// exitCode carries a chosen exit code out of a cli action.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// runApp runs the command line args (args[0] is the program name) and
// returns the exit code. It reads the process environment, never os.Args.
func runApp(args []string) int {
	args, err := interspersed(args, newApp(nil))
	if err != nil {
		fmt.Fprintf(errorOutput(), "leaderrun: %s\n", oneLine(err))
		return exitcode.Internal
	}
	if err := loadEnvFiles(args); err != nil {
		fmt.Fprintf(errorOutput(), "leaderrun: %s\n", oneLine(err))
		return exitcode.Internal
	}
	app := newApp(args)
	err = app.Run(args)
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	default:
		fmt.Fprintf(errorOutput(), "leaderrun: %s\n", oneLine(flagError(err)))
		return exitcode.Internal
	}
}

func newApp(args []string) *cli.App {
	app := &cli.App{
		Name:      "leaderrun",
		Usage:     "run a command only while this host leads a key",
		UsageText: synopsisRun,
		// The "help" command below keeps urfave/cli from adding --help here.
		Flags:  slices.Concat(backendFlags(), runFlags(), onceFlags(), commonFlags(), []cli.Flag{cli.HelpFlag, versionFlag()}),
		Action: runAction,
		Commands: []*cli.Command{
			guardCommand(),
			releaseCommand(),
			statusCommand(),
			historyCommand(),
			checkCommand(),
			stepDownCommand(),
			pauseCommand(),
			resumeCommand(),
			genCommand(),
			versionCommand(),
			helpCommand(),
		},
		HideHelpCommand:      true,
		HideVersion:          true,
		EnableBashCompletion: true,
		OnUsageError:         func(c *cli.Context, err error, _ bool) error { return usageError(c, err) },
		ExitErrHandler:       func(*cli.Context, error) {},
		Metadata:             map[string]any{argsKey: args},
	}
	app.Flags = withRuleEnv(app.Flags)
	for _, cmd := range app.Commands {
		if !cmd.Hidden {
			cmd.Flags = withRuleEnv(cmd.Flags)
		}
	}
	return app
}

func runAction(c *cli.Context) error {
	switch {
	case c.Bool("version"):
		fmt.Print(versionLine())
		return nil
	case c.NArg() == 0 && !c.IsSet("key"):
		writeShortUsage(os.Stderr, "no --key KEY and no -- COMMAND to run")
		return exitCode(exitcode.Internal)
	case c.NArg() > 0 && !afterDoubleDash(c):
		if err := unknownCommand(c.Args().First(), c.IsSet("key")); err != nil {
			return usage(err)
		}
	}
	cfg, err := parseRun(c)
	if err != nil {
		return usage(err)
	}
	return run(cfg)
}

// run carries out a parsed run: it builds the backend, the guard, the
// containment and the supervisor, and runs the command while it leads.
func run(cfg *runConfig) error {
	log, err := cfg.logs.logger()
	if err != nil {
		return usage(err)
	}
	sup := cfg.sup
	// Bad options are reported as such before the command is looked up.
	if err := sup.ValidateOptions(); err != nil {
		return usage(cfg.configError(err))
	}
	path, err := supervise.ResolveCommand(cfg.command[0])
	if err != nil {
		var se *supervise.StartError
		errors.As(err, &se)
		fmt.Fprintf(errorOutput(), "leaderrun: %s\n", err)
		return exitCode(se.Code)
	}
	var lk locker.Locker
	probe := lk // what /healthz and READY=1 read
	if cfg.holders > 1 {
		// The slot campaign is served like any campaign: READY=1, /healthz
		// and /metrics do not wait for a slot. Slot 0's key answers for the
		// key.
		o := cfg.opts
		o.Holders = cfg.holders
		if probe, err = cfg.settings.New(o, true, newQuietLogger()); err != nil {
			return usage(cfg.configError(err))
		}
		defer probe.Close()
	} else if lk, err = cfg.settings.New(cfg.opts, false, log); err != nil {
		return usage(cfg.configError(err))
	} else {
		probe = lk
	}
	obs, err := ops.Start(ops.Config{
		Key: cfg.opts.Key, ID: cfg.opts.ID, Slotted: cfg.holders > 1, Holders: cfg.holders, TTL: sup.TTL, HTTPAddr: cfg.httpAddr, RenewInterval: sup.RenewInterval,
		Rejoin: sup.OnLost == supervise.LostRejoin, Backend: probe, Logger: log,
	})
	if err != nil {
		if lk != nil {
			lk.Close()
		}
		return usage(cfg.configError(err))
	}
	defer obs.Close()
	if err := supervise.BecomeSubreaper(); err != nil {
		log.Warn("cannot become a child subreaper; orphans go to init", "error", err)
	}
	trimResidentLater()
	if cfg.holders <= 1 {
		var ctx context.Context
		var caught catchUpResult
		if cu := catchUpOf(cfg, time.Now()); cu != nil {
			// One stop signal ends both terms.
			c, stop := stopOnSignal()
			defer stop()
			ctx = c
			if keyNeverUsed(ctx, lk) {
				log.Debug("no catch-up: the key was never used, so no period before this one was meant to run", "slot", cu.once.catchUp)
			} else if caught, err = runCatchUp(ctx, cu, path, obs, log); err != nil || ctx.Err() != nil {
				if err == nil {
					err = exitCode(caught.code)
				}
				lk.Close()
				return err
			}
		}
		// Refused when holders of more slots hold the key (DESIGN §1.15).
		agree := withAgreement(cfg, lk, log)
		code, _, err := runTerm(ctx, cfg, agree, path, obs, log)
		if err != nil {
			return err
		}
		if agree.refused != nil {
			return usage(agree.refused)
		}
		if code == 0 && caught.ran && caught.code != 0 {
			// The command ran here and failed: exit 0 would hide it.
			log.Warn("exiting with the failed catch-up's code: this period's run is done, the missed one is not", "slot", caught.slot, "exit_code", caught.code)
			code = caught.code
		}
		return exitCode(code)
	}
	// A stop signal while campaigning for the slots ends the campaign.
	ctx, stop := stopOnSignal()
	defer stop()
	// One health check for the whole run: a supervisor per slot won reads
	// it, and no slot is raced while it fails.
	hctx, stopHealth := context.WithCancel(ctx)
	health := supervise.StartHealth(hctx, cfg.sup.Control.Health, log)
	defer func() { stopHealth(); health.Wait() }()
	cfg.sup.Control.Shared = health
	// Jobs that hung count across the slots' terms (a supervisor each).
	cfg.sup.Zombies = &supervise.ZombieHold{}
	var held slotHold
	for {
		if why, until := cfg.sup.Zombies.Hold(time.Now()); why != "" {
			log.Info("not campaigning", "reason", why)
			t := time.NewTimer(time.Until(until))
			select {
			case <-ctx.Done():
				t.Stop()
				log.Info("stopped while waiting for leadership")
				var sc supervise.SignalCause
				if errors.As(context.Cause(ctx), &sc) {
					return exitCode(exitcode.SignalBase + int(sc.Signal))
				}
				return exitCode(exitcode.Internal)
			case <-t.C:
			}
			log.Info("campaigning again", "was", why)
		}
		if !health.Ready(ctx) {
			log.Info("stopped while waiting for a passing health check")
			var sc supervise.SignalCause
			if errors.As(context.Cause(ctx), &sc) {
				return exitCode(exitcode.SignalBase + int(sc.Signal))
			}
			return exitCode(exitcode.Internal)
		}
		// Every campaign races all N slots (DESIGN §1.15), holding back
		// from what the control record keeps this candidate out of.
		lk, err = winSlot(ctx, cfg, log, held)
		if err != nil {
			return err
		}
		obs.SetSlot(cfg.opts.Name(), metricsSlot(cfg))
		code, s, err := runTerm(ctx, cfg, lk, path, obs, log)
		if err != nil {
			return err
		}
		if code != supervise.ExitRerace {
			return exitCode(code)
		}
		if e := s.SteppedDown(); e != 0 {
			held = slotHold{name: cfg.opts.Name(), epoch: e}
		}
		log.Debug("campaigning for every slot again", "was", cfg.opts.Name())
	}
}

// runCatchUp runs the catch-up term of cfg (catchUpOf) on a Locker of its
// own, before the current period's: it campaigns, and under the lease
// runs the command for the missed slot if no host ran it yet and the grace
// is not over (once.Gate). Whatever it did, the current period's term
// follows: its code is leaderrun's exit code. Only a stop signal (ctx
// ended) or an error ends the run here.
func runCatchUp(ctx context.Context, cfg *runConfig, path string, obs *ops.Observer, log hclog.Logger) (catchUpResult, error) {
	lk, err := cfg.settings.New(cfg.opts, false, log)
	if err != nil {
		return catchUpResult{}, usage(cfg.configError(err))
	}
	log.Debug("looking whether the last period needs its catch-up", "slot", cfg.once.catchUp, "grace_ends", cfg.once.until.UTC().Format(time.RFC3339))
	r := catchUpResult{slot: cfg.once.catchUp}
	cfg.sup.Events = ops.Chain(cfg.sup.Events, supervise.Events{ChildStarted: func(int) { r.ran = true }})
	agree := withAgreement(cfg, lk, log)
	r.code, _, err = runTerm(ctx, cfg, agree, path, obs, log)
	if err != nil {
		return catchUpResult{}, err
	}
	if agree.refused != nil {
		return catchUpResult{}, usage(agree.refused)
	}
	log.Debug("catch-up term over; now the current period", "code", r.code, "ran", r.ran)
	return r, nil
}

// catchUpResult is how a catch-up term ended: its code, and whether the
// command ran in it (a code from a skipped or held-elsewhere term is no
// run of the command).
type catchUpResult struct {
	slot string
	code int
	ran  bool
}

// keyNeverUsed reports whether the backend finds no trace that any
// candidate ever campaigned for the key (locker.ErrNeverUsed): then no
// period before this one was meant to run, and there is nothing to catch
// up. Any other answer, an error or a timeout included, leaves the
// decision to the catch-up term's gate, as before: skipping a catch-up can
// only mean fewer runs, never two.
func keyNeverUsed(ctx context.Context, lk locker.Locker) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := lk.Leader(ctx)
	return errors.Is(err, locker.ErrNeverUsed)
}

// runTerm runs the supervisor on lk, the Locker of the key or of the slot
// won (cfg.opts.Name() names it), with everything that depends on that key:
// the once-per gate, the guard, the containment, the deadline file and
// the child's environment. It returns the supervisor's outcome
// (supervise.ExitRerace: campaign for every slot again), or the error to
// exit with; lk is closed once it returns. ctx nil: a context that a stop
// signal cancels is made here.
func runTerm(ctx context.Context, cfg *runConfig, lk locker.Locker, path string, obs *ops.Observer, log hclog.Logger) (int, *supervise.Supervisor, error) {
	sup := cfg.sup
	defer lk.Close()
	if cfg.opts.NoWait && cfg.holders <= 1 {
		addr, timeout := cfg.settings.Target(lk)
		lk = locker.OneAttempt(lk, cfg.opts.Name(), addr, timeout)
	}
	gate, err := onceGate(cfg, lk, log)
	if err != nil {
		return 0, nil, usage(err)
	}
	if gate != nil {
		sup.Term = gate.Hooks()
		sup.RunID = gate.Slot // LEADER_RUN_ID: the same on every retry of the slot
		sup.History.Slot, sup.History.CatchUp = gate.Slot, gate.CatchUp
		if cfg.once.runID == "" {
			sup.History.Period = cfg.once.period // a missed period shows in the history
		}
	}

	sup.Locker = lk
	sup.Control.Name = cfg.opts.Name() // the slot's key, once won
	sup.Rerace = cfg.holders > 1
	sup.Target, _ = cfg.settings.Target(lk)
	sup.Logger = log
	sup.Guard = runGuard(cfg, lk, log)
	deadlines, err := openDeadlineFile(&sup)
	if err != nil {
		return 0, nil, usage(err)
	}
	defer deadlines.Close()
	sup.Command = supervise.Command{Path: path, Args: cfg.command, Env: append(childEnv(cfg), deadlines.env())}
	forward := make(chan os.Signal, 8)
	// Signals ignored when leaderrun started stay ignored, for leaderrun and
	// its child (DESIGN §1.11).
	signal.Notify(forward, signals.NotIgnored(signals.Forwarded)...)
	defer signal.Stop(forward)
	sup.Forward = forward

	sup.Events = ops.Chain(sup.Events, obs.Events())
	sup.Events = ops.Chain(sup.Events, deadlines.events())
	// A 124 that ends a campaign is "held elsewhere"; a child's own 124 is not.
	var campaigning bool
	sup.Events = ops.Chain(sup.Events, supervise.Events{
		Campaigning: func() { campaigning = true },
		Acquired:    func(uint64, time.Time) { campaigning = false },
	})
	box, err := openContainment(cfg, log)
	if err != nil {
		return 0, nil, usage(err)
	}
	defer box.Close()
	sup.Contain = box

	s, err := supervise.New(sup)
	if err != nil {
		return 0, nil, usage(cfg.configError(err))
	}
	if ctx == nil {
		var stop func()
		ctx, stop = stopOnSignal()
		defer stop()
	}
	code := s.Run(ctx)
	if code == supervise.ExitNotHeld && campaigning {
		code = cfg.conflict
	}
	return code, s, nil
}

// stopOnSignal returns a context cancelled, with the signal as its cause,
// by the first SIGTERM or SIGINT.
func stopOnSignal() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, signals.NotIgnored(signals.Stop)...)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			cancel(supervise.SignalCause{Signal: sig.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() { signal.Stop(ch); close(done); cancel(nil) }
}

// newQuietLogger logs only errors, for one-shot helpers.
func newQuietLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "leaderrun", Level: hclog.Error, Output: logOutput()})
}

// stopSignal parses --stop-signal and refuses signals that would not end
// the job: the stop signal is the polite request, SIGKILL follows on its
// own after --kill-grace.
func stopSignal(s string) (syscall.Signal, error) {
	sig, err := signals.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("--stop-signal %w", err)
	}
	switch sig {
	case syscall.SIGKILL:
		return 0, errors.New("--stop-signal must not be KILL: SIGKILL follows the stop signal after --kill-grace; shorten that instead")
	case syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGCONT:
		return 0, fmt.Errorf("--stop-signal must end the job, and %s only stops or continues it", signals.Name(sig))
	}
	return sig, nil
}

// roundDuration prints d to the millisecond and without zero units:
// 1.667s rather than 1.666666666s, 24h rather than 24h0m0s.
func roundDuration(d time.Duration) string {
	s := d.Round(time.Millisecond).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// childEnv is leaderrun's environment without the systemd notification
// variables (the child must not notify for us, DESIGN §5), plus what the
// child and `leaderrun check` need. Secrets given by flag are never added.
func childEnv(cfg *runConfig) []string {
	vars := []envVar{
		{Name: "LEADER_KEY", Value: cfg.opts.Key},
		{Name: "LEADER_ID", Value: cfg.opts.ID},
		{Name: "LEADERRUN_BACKEND", Value: cfg.backend.Name},
		{Name: "LEADERRUN_PREFIX", Value: cfg.opts.Prefix},
	}
	vars = append(vars, slotEnv(cfg)...)
	// The missed slot a catch-up runs for (LEADER_RUN_ID names it too);
	// empty, and so unset, in every other run.
	var catchUp string
	if cfg.once != nil {
		catchUp = cfg.once.catchUp
	}
	vars = append(vars, envVar{Name: "LEADER_CATCH_UP", Value: catchUp})
	vars = append(vars, cfg.settings.ChildEnv()...)
	var added []string
	// The settings files are read already, and their settings are in the
	// environment; a `leaderrun check` in the child reading them again
	// would undo what the command line set.
	replaced := map[string]bool{"NOTIFY_SOCKET": true, "LEADER_EPOCH": true, "LEADER_RUN_ID": true, deadlineEnv: true, "LEADERRUN_ENV_FILE": true}
	for _, v := range vars {
		if _, had := os.LookupEnv(v.Name); v.Inherited && !had {
			continue
		}
		// An empty value takes the inherited variable out: a DSN that
		// held nothing but secrets leaves none for the child.
		replaced[v.Name] = true
		if v.Value != "" {
			added = append(added, v.Name+"="+v.Value)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !replaced[name] && !strings.HasPrefix(name, "WATCHDOG_") {
			env = append(env, kv)
		}
	}
	return append(env, added...)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// usage reports a bad input on one line and exits 125 (DESIGN §4).
func usage(err error) error {
	fmt.Fprintf(errorOutput(), "leaderrun: %s\n", oneLine(err))
	return exitCode(exitcode.Internal)
}

// oneLine is err's message on one line, with what a terminal must not be
// sent escaped: a message may quote a record from the backend.
func oneLine(err error) string {
	return logline.Printable(strings.Join(strings.Fields(err.Error()), " "))
}
