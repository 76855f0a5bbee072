//go:build linux

package cmdline

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/internal/logline"
	"github.com/leaderrun/leaderrun/internal/once"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/supervise"
)

// runConfig is one run's command line and environment, read and checked
// once (parseRun); nothing after that reads a flag.
type runConfig struct {
	backend  *backend
	settings backendSettings
	opts     locker.Options
	logs     logSettings
	// sup holds the timing and policies; run adds the rest.
	sup     supervise.Config
	command []string // the command to run and its arguments
	// conflict is the exit code of "held elsewhere"; skip that of a
	// slot that already ran (0 unless --conflict-exit is set).
	conflict, skip int
	once           *onceSettings // nil: once-per mode is off
	contain        contain.Mode
	noGuard        bool
	httpAddr       string
	// holders is --holders; the slot this run won is opts.Slot (winSlot).
	holders int
}

// logSettings are --log-level, --log-format and --quiet.
type logSettings struct {
	level, format string
	quiet         bool
}

// onceSettings are the once-per options (distributed cron).
type onceSettings struct {
	period time.Duration // 0: the slot is --run-id alone
	runID  string
	record string
	grace  time.Duration // --catch-up; 0: off
	// catchUp is the missed slot a catch-up term runs, until the end of
	// its grace; "" in every other term.
	catchUp string
	until   time.Time
	// started fixes the current period when a catch-up term may come
	// first; zero: the period of when the gate is built.
	started time.Time
}

// parseRun reads and checks a run's options, in the order an operator
// fixes them: logging, the key and shared settings, the command, timing,
// then the backend's own.
func parseRun(c *cli.Context) (*runConfig, error) {
	cfg := &runConfig{}
	var err error
	cfg.logs = logSettings{level: c.String("log-level"), format: c.String("log-format"), quiet: c.Bool("quiet")}
	if _, err := cfg.logs.logger(); err != nil {
		return nil, err
	}
	if cfg.opts, err = lockerOptions(c, c.String("key")); err != nil {
		return nil, err
	}
	if c.NArg() == 0 {
		return nil, errors.New("a command to run is required after --")
	}
	cfg.command = c.Args().Slice()
	if cfg.sup, err = supervisorConfig(c, cfg.opts.TTL); err != nil {
		return nil, err
	}
	if cfg.backend, cfg.settings, err = readBackend(c, cfg.opts); err != nil {
		return nil, err
	}
	if cfg.conflict, err = conflictExit(c); err != nil {
		return nil, err
	}
	if c.IsSet("conflict-exit") {
		cfg.skip = cfg.conflict
	}
	if cfg.once, err = readOnce(c); err != nil {
		return nil, err
	}
	if cfg.sup.History, err = historyConfig(c, cfg.opts.ID); err != nil {
		return nil, err
	}
	if cfg.contain, err = contain.ParseMode(c.String("contain")); err != nil {
		return nil, fmt.Errorf("--contain %w", err)
	}
	if cfg.holders, err = readHolders(c); err != nil {
		return nil, err
	}
	if cfg.sup.Control, err = readControl(c, cfg.opts.ID); err != nil {
		return nil, err
	}
	if cfg.once != nil && cfg.once.grace > 0 && cfg.holders > 1 {
		return nil, fmt.Errorf("--catch-up works with one holder only, got --holders %d", cfg.holders)
	}
	if cfg.sup.Control.Priority > 0 && cfg.holders > 1 {
		return nil, fmt.Errorf("--priority works with one holder only, got --holders %d: a slot candidate races every free slot and preempts none", cfg.holders)
	}
	cfg.opts.Priority = cfg.sup.Control.Priority
	cfg.noGuard = c.Bool("no-guard")
	cfg.httpAddr = c.String("http-addr")
	if err := checkCombinations(c); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkCombinations refuses options that contradict each other or do
// nothing without another. An option counts only where it was set (on the
// command line, in the environment or a settings file), a switch only when
// on, and "name=a|b" only with one of those values: defaults never
// conflict.
func checkCombinations(c *cli.Context) error {
	contradictions := []struct{ a, b, why string }{
		{"restart=always", "once-per", "a slot runs once, a restart would run it again"},
		{"restart=always", "run-id", "a slot runs once, a restart would run it again"},
		// on-failure retries a failed run of the slot until one succeeds
		// (at least once); at most once it would run the slot again.
		{"restart=on-failure", "once-record=start", "--once-record start runs a slot at most once, a restart would run it again"},
		{"quiet", "log-level=trace|debug|info", "--quiet logs warnings and errors only; give one of them"},
		{"no-wait", "acquire-timeout", "--no-wait makes one attempt, so there is no wait to bound"},
		{"catch-up", "run-id", "a --run-id names one slot, with no period before it to catch up"},
	}
	needs := []struct{ a, oneOf, why string }{
		{"conflict-exit", "no-wait|acquire-timeout|once-per|run-id", "without them leaderrun waits until it leads, and no conflict ends the run"},
		{"once-record", "once-per|run-id", ""},
		{"catch-up", "once-per", "only a period has a period before it to catch up"},
	}
	for _, r := range contradictions {
		a, aOn := optionGiven(c, r.a)
		b, bOn := optionGiven(c, r.b)
		if aOn && bOn {
			return fmt.Errorf("%s and %s contradict: %s", a, b, r.why)
		}
	}
	for _, r := range needs {
		a, on := optionGiven(c, r.a)
		if !on {
			continue
		}
		others := strings.Split(r.oneOf, "|")
		if slices.ContainsFunc(others, func(o string) bool { _, ok := optionGiven(c, o); return ok }) {
			continue
		}
		n := len(others)
		msg := a + " needs --" + others[0]
		if n > 1 {
			msg = a + " needs --" + strings.Join(others[:n-1], ", --") + " or --" + others[n-1]
		}
		if r.why != "" {
			msg += ": " + r.why
		}
		return errors.New(msg)
	}
	return nil
}

// optionGiven reports whether the option spec names ("restart",
// "restart=always|on-failure") was set, a switch to true, and to one of
// the values if it lists some; what is how to name it in a message:
// "--restart always", "-q/--quiet".
func optionGiven(c *cli.Context, spec string) (what string, given bool) {
	name, values, hasValues := strings.Cut(spec, "=")
	if !c.IsSet(name) {
		return "", false
	}
	value := fmt.Sprint(c.Value(name))
	if _, isSwitch := c.Value(name).(bool); isSwitch {
		if !c.Bool(name) {
			return "", false
		}
		value = ""
	}
	if hasValues && !slices.Contains(strings.Split(values, "|"), strings.ToLower(value)) {
		return "", false
	}
	what = "--" + name
	if name == "quiet" {
		what = "-q/--quiet"
	}
	if hasValues {
		what += " " + value
	}
	return what, true
}

// readBackend is --backend and that backend's options.
func readBackend(c *cli.Context, opts locker.Options) (*backend, backendSettings, error) {
	b := backendNamed(c.String("backend"))
	if b == nil {
		return nil, nil, fmt.Errorf("--backend must be %s, got %q", backendList(), c.String("backend"))
	}
	s, err := b.Read(c, opts)
	if err != nil {
		return nil, nil, err
	}
	return b, s, nil
}

// logger builds the logger the settings ask for.
func (l logSettings) logger() (hclog.Logger, error) {
	level := hclog.LevelFromString(l.level)
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level must be trace, debug, info, warn, error or off, got %q", l.level)
	}
	if l.quiet && level < hclog.Warn {
		// Quiet: state changes and skips are not news; trouble still is.
		level = hclog.Warn
	}
	var json bool
	switch l.format {
	case "text":
	case "json":
		json = true
	default:
		return nil, fmt.Errorf("--log-format must be text or json, got %q", l.format)
	}
	// One line per record, durations in seconds (package logline). The
	// journal stamps each line itself: a text line written there leaves
	// out its own time, which journalctl would show twice.
	out := logOutput()
	_, journal := out.(*journalWriter)
	return logline.Wrap(hclog.New(&hclog.LoggerOptions{Name: "leaderrun", Level: level, JSONFormat: json, DisableTime: journal && !json, Output: out})), nil
}

// lockerOptions are the settings every backend shares; key is the one the
// command line named (--key, or status's and check's argument).
func lockerOptions(c *cli.Context, key string) (locker.Options, error) {
	if key == "" {
		return locker.Options{}, errors.New("--key is required")
	}
	if err := locker.ValidateUserKey(key); err != nil {
		return locker.Options{}, fmt.Errorf("--key %w", err)
	}
	if err := locker.ValidatePrefix(c.String("prefix")); err != nil {
		return locker.Options{}, fmt.Errorf("--prefix %w", err)
	}
	id := c.String("id")
	if err := checkID(id); err != nil {
		return locker.Options{}, err
	}
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
		Notify:         supervise.NotifyConfig{ReadyTimeout: c.Duration("ready-timeout"), Watchdog: c.Duration("job-watchdog")},
	}, nil
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

// maxHistoryKeep bounds --history-keep: every write reads the kept terms.
const maxHistoryKeep = 1000

// historyConfig reads --history-keep; 0 turns the run history off.
func historyConfig(c *cli.Context, id string) (supervise.HistoryConfig, error) {
	n := c.Int("history-keep")
	if n < 0 || n > maxHistoryKeep {
		return supervise.HistoryConfig{}, fmt.Errorf("--history-keep must be from 0 to %d, got %d", maxHistoryKeep, n)
	}
	return supervise.HistoryConfig{Keep: n, ID: id}, nil
}

// readOnce reads the once-per options, or nil when once-per mode is off.
func readOnce(c *cli.Context) (*onceSettings, error) {
	o := &onceSettings{runID: c.String("run-id"), record: c.String("once-record")}
	if o.record != once.RecordSuccess && o.record != once.RecordStart {
		return nil, fmt.Errorf("--once-record must be success or start, got %q", o.record)
	}
	if !c.IsSet("once-per") && !c.IsSet("run-id") {
		return nil, nil // --once-record alone: see checkCombinations
	}
	if c.IsSet("once-per") {
		o.period = oncePeriod(c)
		if err := once.ValidatePeriod(o.period); err != nil {
			return nil, fmt.Errorf("--once-per %w", err)
		}
	}
	if c.IsSet("run-id") {
		if err := locker.ValidateSlot(o.runID); err != nil {
			return nil, fmt.Errorf("--run-id %w", err)
		}
	}
	if c.IsSet("catch-up") && o.period > 0 && o.runID == "" {
		// Without them checkCombinations says what is missing.
		o.grace = periodOf(c, "catch-up")
		if err := once.ValidateCatchUp(o.grace, o.period); err != nil {
			return nil, fmt.Errorf("--catch-up %w", err)
		}
	}
	return o, nil
}

// maxPriority bounds --priority.
const maxPriority = 1000

// readControl reads --priority, --preempt-after and the health check.
func readControl(c *cli.Context, id string) (supervise.ControlConfig, error) {
	cc := supervise.ControlConfig{ID: id, Priority: c.Int("priority"), PreemptAfter: c.Duration("preempt-after")}
	if cc.Priority < 0 || cc.Priority > maxPriority {
		return cc, fmt.Errorf("--priority must be from 0 to %d, got %d", maxPriority, cc.Priority)
	}
	if cc.PreemptAfter <= 0 {
		return cc, fmt.Errorf("--preempt-after must be greater than 0, got %v", cc.PreemptAfter)
	}
	cmd := strings.TrimSpace(c.String("health-cmd"))
	if c.IsSet("health-cmd") && cmd == "" {
		return cc, errors.New("--health-cmd must not be empty")
	}
	hc := &supervise.HealthCheck{Command: cmd, Interval: c.Duration("health-interval"), Timeout: c.Duration("health-timeout"), Failures: c.Int("health-failures")}
	switch {
	case hc.Interval <= 0:
		return cc, fmt.Errorf("--health-interval must be greater than 0, got %v", hc.Interval)
	case hc.Timeout <= 0:
		return cc, fmt.Errorf("--health-timeout must be greater than 0, got %v", hc.Timeout)
	case hc.Failures < 1 || hc.Failures > 100:
		return cc, fmt.Errorf("--health-failures must be from 1 to 100, got %d", hc.Failures)
	}
	if cmd != "" {
		hc.Env = os.Environ()
		cc.Health = hc
	}
	return cc, nil
}
