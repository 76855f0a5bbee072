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
	return runApp(args)
}

// exitCode carries a chosen exit code out of a cli action.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// runApp runs the command line args (args[0] is the program name) and
// returns the exit code. It reads the process environment, never os.Args.
func runApp(args []string) int {
	if err := loadEnvFiles(args); err != nil {
		fmt.Fprintf(errorOutput(), "leaderrun: %s\n", oneLine(err))
		return exitcode.Internal
	}
	app := newApp(args)
	err := app.Run(args)
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
	return &cli.App{
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
			checkCommand(),
			genCommand(),
			versionCommand(),
			helpCommand(),
		},
		HideHelpCommand:      true,
		HideVersion:          true,
		EnableBashCompletion: true,
		OnUsageError:         func(_ *cli.Context, err error, _ bool) error { return usage(flagError(err)) },
		ExitErrHandler:       func(*cli.Context, error) {},
		Metadata:             map[string]any{argsKey: args},
	}
}

func runAction(c *cli.Context) error {
	switch {
	case c.Bool("version"):
		fmt.Print(versionLine())
		return nil
	case c.NArg() == 0 && !c.IsSet("key"):
		writeShortUsage(os.Stderr, "no --key KEY and no -- COMMAND to run")
		return exitCode(exitcode.Internal)
	}
	log, err := newLogger(c)
	if err != nil {
		return usage(err)
	}
	opts, err := lockerOptions(c, c.String("key"))
	if err != nil {
		return usage(err)
	}
	if c.NArg() == 0 {
		return usage(errors.New("a command to run is required after --"))
	}
	cfg, err := supervisorConfig(c, opts.TTL)
	if err != nil {
		return usage(err)
	}
	// Bad options are reported as such before the command is looked up.
	if err := cfg.ValidateOptions(); err != nil {
		return usage(configError(c.String("backend"), err))
	}
	path, err := supervise.ResolveCommand(c.Args().First())
	if err != nil {
		var se *supervise.StartError
		errors.As(err, &se)
		fmt.Fprintf(errorOutput(), "leaderrun: %s\n", err)
		return exitCode(se.Code)
	}
	lk, err := newLocker(c, opts, log)
	if err != nil {
		return usage(configError(c.String("backend"), err))
	}
	defer lk.Close()
	conflict, err := conflictExit(c)
	if err != nil {
		return usage(err)
	}
	if opts.NoWait {
		addr, timeout := attemptTarget(c, lk)
		lk = locker.OneAttempt(lk, opts.Key, addr, timeout)
	}
	// A slot that already ran is done, not a conflict: exit 0 unless
	// --conflict-exit says otherwise.
	skipCode := 0
	if c.IsSet("conflict-exit") {
		skipCode = conflict
	}
	gate, err := onceGate(c, opts, lk, skipCode, log)
	if err != nil {
		return usage(err)
	}
	if gate != nil {
		cfg.Term = gate.Hooks()
	}

	cfg.Locker = lk
	cfg.Logger = log
	if err := supervise.BecomeSubreaper(); err != nil {
		log.Warn("cannot become a child subreaper; orphans go to init", "error", err)
	}
	cfg.Guard = runGuard(c, specFromCLI(c, opts).withConnection(lk), log)
	cfg.Command = supervise.Command{Path: path, Args: c.Args().Slice(), Env: childEnv(c, opts)}
	forward := make(chan os.Signal, 8)
	// Signals ignored when leaderrun started stay ignored, for leaderrun and
	// its child (DESIGN §1.11).
	signal.Notify(forward, signals.NotIgnored(signals.Forwarded)...)
	cfg.Forward = forward

	obs, err := ops.Start(ops.Config{
		Key: opts.Key, ID: opts.ID, HTTPAddr: c.String("http-addr"), RenewInterval: cfg.RenewInterval,
		Rejoin: cfg.OnLost == supervise.LostRejoin, Backend: lk, Logger: log,
	})
	if err != nil {
		return usage(configError(c.String("backend"), err))
	}
	defer obs.Close()
	cfg.Events = ops.Chain(cfg.Events, obs.Events())
	// A 124 that ends a campaign is "held elsewhere"; a child's own 124 is not.
	var campaigning bool
	cfg.Events = ops.Chain(cfg.Events, supervise.Events{
		Campaigning: func() { campaigning = true },
		Acquired:    func(uint64, time.Time) { campaigning = false },
	})
	box, err := openContainment(c, log)
	if err != nil {
		return usage(err)
	}
	defer box.Close()
	cfg.Contain = box

	sup, err := supervise.New(cfg)
	if err != nil {
		return usage(configError(c.String("backend"), err))
	}
	ctx, stop := stopOnSignal()
	defer stop()
	trimResidentLater()
	code := sup.Run(ctx)
	if code == supervise.ExitNotHeld && campaigning {
		code = conflict
	}
	return exitCode(code)
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

func newLogger(c *cli.Context) (hclog.Logger, error) {
	level := hclog.LevelFromString(c.String("log-level"))
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level must be trace, debug, info, warn, error or off, got %q", c.String("log-level"))
	}
	if c.Bool("quiet") && level < hclog.Warn {
		// Quiet: state changes and skips are not news; trouble still is.
		level = hclog.Warn
	}
	var json bool
	switch c.String("log-format") {
	case "text":
	case "json":
		json = true
	default:
		return nil, fmt.Errorf("--log-format must be text or json, got %q", c.String("log-format"))
	}
	return hclog.New(&hclog.LoggerOptions{Name: "leaderrun", Level: level, JSONFormat: json, Output: logOutput()}), nil
}

// lockerOptions are the settings every backend shares; key is the one the
// command line named (--key, or status's and check's argument).
func lockerOptions(c *cli.Context, key string) (locker.Options, error) {
	if key == "" {
		return locker.Options{}, errors.New("--key is required")
	}
	if err := locker.ValidateKey(key); err != nil {
		return locker.Options{}, fmt.Errorf("--key %w", err)
	}
	if err := locker.ValidatePrefix(c.String("prefix")); err != nil {
		return locker.Options{}, fmt.Errorf("--prefix %w", err)
	}
	id := c.String("id")
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	ttl := c.Duration("ttl")
	if ttl > maxTTL {
		return locker.Options{}, fmt.Errorf("--ttl must be at most %s, got %s", roundDuration(maxTTL), roundDuration(ttl))
	}
	return locker.Options{
		Key: key, Prefix: c.String("prefix"), ID: id, TTL: ttl,
		NoWait: c.Bool("no-wait"), Version: buildVersion(),
	}, nil
}

func supervisorConfig(c *cli.Context, ttl time.Duration) (supervise.Config, error) {
	stopSig, err := stopSignal(c.String("stop-signal"))
	if err != nil {
		return supervise.Config{}, err
	}
	renew := c.Duration("renew-interval")
	if !c.IsSet("renew-interval") {
		renew = (ttl / 3).Round(time.Millisecond)
	}
	return supervise.Config{
		TTL:            ttl,
		RenewInterval:  renew,
		KillGrace:      c.Duration("kill-grace"),
		SafetyMargin:   c.Duration("safety-margin"),
		StopSignal:     stopSig,
		AcquireTimeout: c.Duration("acquire-timeout"),
		Restart:        supervise.RestartPolicy(c.String("restart")),
		RestartDelay:   c.Duration("restart-delay"),
		OnLost:         supervise.LostPolicy(c.String("on-lost")),
	}, nil
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
func childEnv(c *cli.Context, opts locker.Options) []string {
	var added []string
	replaced := map[string]bool{"NOTIFY_SOCKET": true, "LEADER_EPOCH": true}
	set := func(name, value string) {
		if value != "" {
			added = append(added, name+"="+value)
			replaced[name] = true
		}
	}
	set("LEADER_KEY", opts.Key)
	set("LEADER_ID", opts.ID)
	set("LEADERRUN_BACKEND", c.String("backend"))
	set("LEADERRUN_PREFIX", opts.Prefix)
	switch c.String("backend") {
	case "local":
		set("LEADERRUN_LOCK_DIR", c.String("lock-dir"))
		set("LEADERRUN_STATE_DIR", c.String("state-dir"))
	case "etcd":
		set("ETCDCTL_ENDPOINTS", c.String("etcd-endpoints"))
		set("ETCDCTL_CACERT", c.String("etcd-cacert"))
		set("ETCDCTL_CERT", c.String("etcd-cert"))
		set("ETCDCTL_KEY", c.String("etcd-key"))
	case "consul":
		set("CONSUL_HTTP_ADDR", c.String("consul-addr"))
		set("CONSUL_CACERT", c.String("consul-ca-file"))
		set("CONSUL_CLIENT_CERT", c.String("consul-client-cert"))
		set("CONSUL_CLIENT_KEY", c.String("consul-client-key"))
		set("CONSUL_TLS_SERVER_NAME", c.String("consul-tls-server-name"))
		set("CONSUL_DATACENTER", c.String("consul-datacenter"))
	case "zookeeper":
		set("LEADERRUN_ZK_SERVERS", c.String("zk-servers"))
		set("LEADERRUN_ZK_CHROOT", c.String("zk-chroot"))
	case "kubernetes":
		set("LEADERRUN_K8S_NAMESPACE", c.String("k8s-namespace"))
		set("KUBECONFIG", c.String("kubeconfig"))
		set("LEADERRUN_K8S_CONTEXT", c.String("k8s-context"))
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

// conflictExit is --conflict-exit, checked to be an exit status.
func conflictExit(c *cli.Context) (int, error) {
	if !c.IsSet("conflict-exit") {
		return exitcode.NotHeld, nil
	}
	n := c.Int("conflict-exit")
	if n < 0 || n > 255 {
		return 0, fmt.Errorf("--conflict-exit must be from 0 to 255, got %d", n)
	}
	return n, nil
}

// usage reports a bad input on one line and exits 125 (DESIGN §4).
func usage(err error) error {
	fmt.Fprintf(errorOutput(), "leaderrun: %s\n", oneLine(err))
	return exitCode(exitcode.Internal)
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
