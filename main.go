// Command leaderrun runs a command only while this host leads a key in
// Consul, etcd or a local lock file, and stops it before the lease could
// pass to anyone else. This file wires flags to packages; the logic lives in
// supervise/, locker/ and signals/.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/ops"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/signals"
	"github.com/leaderrun/leaderrun/supervise"
)

// version is set with -ldflags "-X main.version=..." by release builds.
var version = ""

func main() {
	// A closed stderr (a restarted log collector) must not kill leaderrun
	// with SIGPIPE: that would take the child down with it. Handling the
	// signal, rather than ignoring it, keeps the child's default SIGPIPE.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	os.Exit(runApp(os.Args))
}

// exitCode carries a chosen exit code out of a cli action.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }

func runApp(args []string) int {
	app := newApp()
	err := app.Run(args)
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	default:
		fmt.Fprintf(os.Stderr, "leaderrun: %s\n", oneLine(err))
		return supervise.ExitInternal
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:      "leaderrun",
		Usage:     "run a command only while this host leads a key in Consul, etcd or a local lock",
		UsageText: "leaderrun [options] --key KEY -- COMMAND [ARG...]",
		Version:   buildVersion(),
		Flags:     append(runFlags(), backendFlags()...),
		Action:    runAction,
		Commands: []*cli.Command{
			guardCommand(),
			statusCommand(),
			checkCommand(),
			genCommand(),
			{
				Name:   "version",
				Before: divertDoubleDash,
				Usage:  "print the version",
				Action: func(*cli.Context) error { fmt.Println("leaderrun " + buildVersion()); return nil },
			},
		},
		HideHelpCommand:       true,
		EnableBashCompletion:  true,
		OnUsageError:          func(_ *cli.Context, err error, _ bool) error { return err },
		ExitErrHandler:        func(*cli.Context, error) {},
		CustomAppHelpTemplate: "",
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// runFlags are the options of the run path (DESIGN §2).
func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "ttl", EnvVars: []string{"LEADERRUN_TTL"}, Value: 15 * time.Second, Usage: "lease time requested from the backend"},
		&cli.DurationFlag{Name: "renew-interval", EnvVars: []string{"LEADERRUN_RENEW_INTERVAL"}, Usage: "time between renewals (default ttl/3)"},
		&cli.DurationFlag{Name: "kill-grace", EnvVars: []string{"LEADERRUN_KILL_GRACE"}, Value: 5 * time.Second, Usage: "time between the stop signal and SIGKILL"},
		&cli.DurationFlag{Name: "safety-margin", EnvVars: []string{"LEADERRUN_SAFETY_MARGIN"}, Value: time.Second, Usage: "the child is dead this long before the lease could expire"},
		&cli.StringFlag{Name: "stop-signal", EnvVars: []string{"LEADERRUN_STOP_SIGNAL"}, Value: "SIGTERM", Usage: "first signal sent to the child's process group"},
		&cli.DurationFlag{Name: "acquire-timeout", EnvVars: []string{"LEADERRUN_ACQUIRE_TIMEOUT"}, Usage: "give up (exit 124) if not leader within this time; 0 waits forever"},
		&cli.BoolFlag{Name: "no-wait", Usage: "try once; exit 124 if another holder leads"},
		&cli.StringFlag{Name: "restart", EnvVars: []string{"LEADERRUN_RESTART"}, Value: "never", Usage: "restart the child while leader: never, on-failure or always"},
		&cli.DurationFlag{Name: "restart-delay", EnvVars: []string{"LEADERRUN_RESTART_DELAY"}, Value: time.Second, Usage: "first restart delay, doubling to 30s"},
		&cli.StringFlag{Name: "on-lost", EnvVars: []string{"LEADERRUN_ON_LOST"}, Value: "exit", Usage: "after losing leadership: exit (123) or rejoin the campaign"},
		&cli.StringFlag{Name: "log-level", EnvVars: []string{"LEADERRUN_LOG_LEVEL"}, Value: "info", Usage: "trace, debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", EnvVars: []string{"LEADERRUN_LOG_FORMAT"}, Value: "text", Usage: "text or json"},
		&cli.StringFlag{Name: "http-addr", EnvVars: []string{"LEADERRUN_HTTP_ADDR"}, Usage: "serve /healthz, /status and /metrics on this host:port (default off)"},
	}
}

// backendFlags select and configure the backend; status and check use them
// too.
func backendFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "key", EnvVars: []string{"LEADERRUN_KEY"}, Usage: "the leadership key"},
		&cli.StringFlag{Name: "backend", EnvVars: []string{"LEADERRUN_BACKEND"}, Value: "consul", Usage: "consul, etcd, kubernetes or local"},
		&cli.StringFlag{Name: "prefix", EnvVars: []string{"LEADERRUN_PREFIX"}, Value: "leaderrun", Usage: "namespace of leaderrun's keys on the backend"},
		&cli.StringFlag{Name: "id", EnvVars: []string{"LEADERRUN_ID"}, Usage: "this candidate's name (default hostname:pid)"},
		&cli.StringFlag{Name: "lock-dir", EnvVars: []string{"LEADERRUN_LOCK_DIR"}, Usage: "local backend: lock directory (default /run/leaderrun, else $XDG_RUNTIME_DIR/leaderrun, else /tmp/leaderrun-UID)"},

		&cli.StringFlag{Name: "consul-addr", EnvVars: []string{"CONSUL_HTTP_ADDR"}, Usage: "Consul agent address (default 127.0.0.1:8500)"},
		&cli.StringFlag{Name: "consul-token", EnvVars: []string{"CONSUL_HTTP_TOKEN"}, Usage: "Consul ACL token"},
		&cli.StringFlag{Name: "consul-token-file", EnvVars: []string{"CONSUL_HTTP_TOKEN_FILE"}, Usage: "file holding the Consul ACL token"},
		&cli.StringFlag{Name: "consul-ca-file", EnvVars: []string{"CONSUL_CACERT"}, Usage: "CA certificate for Consul TLS"},
		&cli.StringFlag{Name: "consul-client-cert", EnvVars: []string{"CONSUL_CLIENT_CERT"}, Usage: "client certificate for Consul TLS"},
		&cli.StringFlag{Name: "consul-client-key", EnvVars: []string{"CONSUL_CLIENT_KEY"}, Usage: "client key for Consul TLS"},
		&cli.StringFlag{Name: "consul-tls-server-name", EnvVars: []string{"CONSUL_TLS_SERVER_NAME"}, Usage: "server name to verify in Consul's certificate"},
		&cli.StringFlag{Name: "consul-datacenter", EnvVars: []string{"CONSUL_DATACENTER"}, Usage: "Consul datacenter"},
		&cli.DurationFlag{Name: "consul-lock-delay", EnvVars: []string{"LEADERRUN_CONSUL_LOCK_DELAY"}, Usage: "Consul session lock-delay (default: the TTL, at most 60s)"},
		&cli.StringSliceFlag{Name: "consul-session-checks", EnvVars: []string{"LEADERRUN_CONSUL_SESSION_CHECKS"}, Usage: "opt-in session health checks (needs --consul-lock-delay >= --ttl)"},

		&cli.StringFlag{Name: "etcd-endpoints", EnvVars: []string{"ETCDCTL_ENDPOINTS"}, Value: "127.0.0.1:2379", Usage: "comma-separated etcd endpoints"},
		&cli.StringFlag{Name: "etcd-user", EnvVars: []string{"ETCDCTL_USER"}, Usage: "etcd user (user or user:password)"},
		&cli.StringFlag{Name: "etcd-password", EnvVars: []string{"ETCDCTL_PASSWORD"}, Usage: "etcd password"},
		&cli.StringFlag{Name: "etcd-cacert", EnvVars: []string{"ETCDCTL_CACERT"}, Usage: "CA certificate for etcd TLS"},
		&cli.StringFlag{Name: "etcd-cert", EnvVars: []string{"ETCDCTL_CERT"}, Usage: "client certificate for etcd TLS"},
		&cli.StringFlag{Name: "etcd-key", EnvVars: []string{"ETCDCTL_KEY"}, Usage: "client key for etcd TLS"},
		&cli.DurationFlag{Name: "etcd-dial-timeout", EnvVars: []string{"ETCDCTL_DIAL_TIMEOUT"}, Value: 5 * time.Second, Usage: "etcd dial timeout"},

		&cli.StringFlag{Name: "k8s-namespace", EnvVars: []string{"LEADERRUN_K8S_NAMESPACE"}, Usage: "Kubernetes namespace of the Lease (default: the kubeconfig context's, else the pod's own, else default)"},
		&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, Usage: "kubeconfig file (default ~/.kube/config, else the pod's service account)"},
		&cli.StringFlag{Name: "k8s-context", EnvVars: []string{"LEADERRUN_K8S_CONTEXT"}, Usage: "kubeconfig context (default: the current one)"},
	}
}

func runAction(c *cli.Context) error {
	if c.NArg() == 0 && !c.IsSet("key") {
		_ = cli.ShowAppHelp(c)
		return exitCode(supervise.ExitInternal)
	}
	log, err := newLogger(c)
	if err != nil {
		return usage(err)
	}
	opts, err := lockerOptions(c)
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
		return usage(err)
	}
	path, err := supervise.ResolveCommand(c.Args().First())
	if err != nil {
		var se *supervise.StartError
		errors.As(err, &se)
		fmt.Fprintf(os.Stderr, "leaderrun: %s\n", err)
		return exitCode(se.Code)
	}
	lk, err := newLocker(c, opts, log)
	if err != nil {
		return usage(err)
	}
	defer lk.Close()

	cfg.Locker = lk
	cfg.Logger = log
	cfg.Guard = guardConfig(c, specFromCLI(c, opts))
	if path := os.Getenv("LEADERRUN_TEST_FREEZE_FILE"); path != "" {
		cfg.Freeze = freezeWhileExists(path)
	}
	cfg.Command = supervise.Command{Path: path, Args: c.Args().Slice(), Env: childEnv(c, opts)}
	forward := make(chan os.Signal, 8)
	signal.Notify(forward, signals.Forwarded...)
	cfg.Forward = forward

	obs, err := ops.Start(ops.Config{
		Key: opts.Key, ID: opts.ID, HTTPAddr: c.String("http-addr"), RenewInterval: cfg.RenewInterval,
		Rejoin: cfg.OnLost == supervise.LostRejoin, Backend: lk, Logger: log,
	})
	if err != nil {
		return usage(err)
	}
	defer obs.Close()
	cfg.Events = ops.Chain(cfg.Events, obs.Events())

	sup, err := supervise.New(cfg)
	if err != nil {
		return usage(err)
	}
	if err := supervise.BecomeSubreaper(); err != nil {
		log.Warn("cannot become a child subreaper; orphans go to init", "error", err)
	}
	ctx, stop := stopOnSignal()
	defer stop()
	return exitCode(sup.Run(ctx))
}

// stopOnSignal returns a context cancelled, with the signal as its cause,
// by the first SIGTERM or SIGINT.
func stopOnSignal() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, signals.Stop...)
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

// freezeWhileExists is a test hook: the supervisor's event loop hangs while
// the file exists, as if deadlocked, so tests can show the guard acting.
func freezeWhileExists(path string) func() {
	return func() {
		for {
			if _, err := os.Stat(path); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// newQuietLogger logs only errors, for one-shot helpers.
func newQuietLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "leaderrun", Level: hclog.Error, Output: os.Stderr})
}

func newLogger(c *cli.Context) (hclog.Logger, error) {
	level := hclog.LevelFromString(c.String("log-level"))
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level must be trace, debug, info, warn or error, got %q", c.String("log-level"))
	}
	var json bool
	switch c.String("log-format") {
	case "text":
	case "json":
		json = true
	default:
		return nil, fmt.Errorf("--log-format must be text or json, got %q", c.String("log-format"))
	}
	return hclog.New(&hclog.LoggerOptions{Name: "leaderrun", Level: level, JSONFormat: json, Output: os.Stderr}), nil
}

func lockerOptions(c *cli.Context) (locker.Options, error) {
	key := c.String("key")
	if !c.IsSet("key") || key == "" {
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
	return locker.Options{
		Key: key, Prefix: c.String("prefix"), ID: id, TTL: ttl,
		NoWait: c.Bool("no-wait"), Version: buildVersion(),
	}, nil
}

func supervisorConfig(c *cli.Context, ttl time.Duration) (supervise.Config, error) {
	stopSig, err := signals.Parse(c.String("stop-signal"))
	if err != nil {
		return supervise.Config{}, fmt.Errorf("--stop-signal %w", err)
	}
	renew := c.Duration("renew-interval")
	if !c.IsSet("renew-interval") {
		renew = ttl / 3
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

// usage reports a bad input on one line and exits 125 (DESIGN §4).
func usage(err error) error {
	fmt.Fprintf(os.Stderr, "leaderrun: %s\n", oneLine(err))
	return exitCode(supervise.ExitInternal)
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
