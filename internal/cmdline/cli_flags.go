//go:build linux

package cmdline

import (
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/supervise"
)

// Option groups, in the order --help and the man page show them. A flag's
// Category must be one of these; a placeholder in its Usage is written
// between backquotes (urfave/cli's convention), its default comes from
// Value or DefaultText and is never repeated in Usage.
const (
	catLeadership = "Leadership"
	catTiming     = "Timing"
	catChild      = "Child"
	catOutput     = "Output"
	catQuery      = "Reading the backend"
	catOther      = "Other"
)

// categoryOrder is the reading order of the groups: each backend's group
// (backend_<name>.go) comes after the common ones.
func categoryOrder() []string {
	return slices.Concat([]string{catLeadership, catTiming, catChild, catOutput, catQuery},
		backendCategories(), []string{catOther})
}

// categoryNote is a line printed under a group's title.
var categoryNote = map[string]string{
	catTiming: "renew-interval + kill-grace + safety-margin must be less than ttl",
}

// flagArg is the placeholder of an option whose Usage names none.
var flagArg = map[string]string{
	"backend": "NAME", "prefix": "PREFIX", "on-lost": "ACTION", "restart": "POLICY",
	"log-level": "LEVEL", "log-format": "FORMAT",
}

// maxIDLen bounds --id: a Kubernetes Lease's holderIdentity takes no
// more, and every backend gets the same bound, so a name that works on
// one works on all. The name goes in the guard's hello, the backend's
// record, logs and status lines.
const maxIDLen = 253

// checkID is --id's rule: at most maxIDLen bytes of UTF-8, no control
// characters (a newline would split a log line or status record).
func checkID(id string) error {
	if len(id) > maxIDLen {
		return fmt.Errorf("--id must be at most %d bytes, got %d", maxIDLen, len(id))
	}
	if !utf8.ValidString(id) {
		return errors.New("--id must be UTF-8 text")
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("--id must not contain control characters, got %q", r)
		}
	}
	return nil
}

// maxTTL bounds --ttl: a lease of more than a day is a typo (Consul's own
// limit is 24h), and a leader that dies would hold the key that long.
const maxTTL = 24 * time.Hour

// runFlags are the options of the run path only (DESIGN §2).
func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "id", Category: catLeadership, EnvVars: []string{"LEADERRUN_ID"}, DefaultText: "hostname:pid",
			Usage: "this candidate's `NAME` in logs and status: at most 253 bytes, no control characters"},
		&cli.DurationFlag{Name: "acquire-timeout", Category: catLeadership, EnvVars: []string{"LEADERRUN_ACQUIRE_TIMEOUT"},
			Usage: "give up (exit 124) when not leader after this long; 0 waits forever"},
		&cli.BoolFlag{Name: "no-wait", Category: catLeadership, EnvVars: []string{"LEADERRUN_NO_WAIT"},
			Usage: "one attempt: exit 124 (or --conflict-exit) if another holder leads, 125 if the backend cannot be reached"},
		&cli.IntFlag{Name: "conflict-exit", Category: catLeadership, EnvVars: []string{"LEADERRUN_CONFLICT_EXIT"}, DefaultText: "124 when held elsewhere, 0 when the slot already ran",
			Usage: "exit `CODE` when another holder leads or the slot already ran"},
		&cli.StringFlag{Name: "on-lost", Category: catLeadership, EnvVars: []string{"LEADERRUN_ON_LOST"}, Value: "exit",
			Usage: "after a loss: exit (with 123) or rejoin the campaign"},
		holdersFlag("run the command on at most `N` candidates at once, each in its own slot 0..N-1 (LEADER_SLOT); every candidate of the key must give the same N"),
		&cli.IntFlag{Name: "history-keep", Category: catLeadership, EnvVars: []string{"LEADERRUN_HISTORY_KEEP"}, Value: locker.DefaultHistoryKeep,
			Usage: "keep the last `N` terms of the key's run history on the backend (leaderrun history); 0 writes none"},

		&cli.IntFlag{Name: "priority", Category: catLeadership, EnvVars: []string{"LEADERRUN_PRIORITY"},
			Usage: "prefer this candidate: while waiting it asks a holder of a lower `N` to hand over (0 to 1000; equal ones never preempt)"},
		&cli.DurationFlag{Name: "preempt-after", Category: catLeadership, EnvVars: []string{"LEADERRUN_PREEMPT_AFTER"}, Value: supervise.DefaultPreemptAfter,
			Usage: "how long a --priority candidate waits, ready, before it asks; doubles after a preempting term that ended early"},
		&cli.StringFlag{Name: "health-cmd", Category: catLeadership, EnvVars: []string{"LEADERRUN_HEALTH_CMD"},
			Usage: "shell `COMMAND` that must exit 0: a candidate whose last check failed does not campaign, a leader steps down after --health-failures in a row"},
		&cli.DurationFlag{Name: "health-interval", Category: catLeadership, EnvVars: []string{"LEADERRUN_HEALTH_INTERVAL"}, Value: 10 * time.Second,
			Usage: "time between two health checks"},
		&cli.DurationFlag{Name: "health-timeout", Category: catLeadership, EnvVars: []string{"LEADERRUN_HEALTH_TIMEOUT"}, Value: 5 * time.Second,
			Usage: "a check still running after this long is killed and fails"},
		&cli.IntFlag{Name: "health-failures", Category: catLeadership, EnvVars: []string{"LEADERRUN_HEALTH_FAILURES"}, Value: 3,
			Usage: "failed checks in a row that make a leader step down"},
		&cli.DurationFlag{Name: "ready-timeout", Category: catLeadership, EnvVars: []string{"LEADERRUN_READY_TIMEOUT"},
			Usage: "a job that sends no READY=1 to its NOTIFY_SOCKET within this long of its start is stopped and the key handed over (0: not awaited)"},
		&cli.DurationFlag{Name: "job-watchdog", Category: catLeadership, EnvVars: []string{"LEADERRUN_JOB_WATCHDOG"},
			Usage: "a job that sends no WATCHDOG=1 for this long (it reads WATCHDOG_USEC) hangs: it is stopped, the key handed over, and this host backs off (0: off)"},

		&cli.DurationFlag{Name: "ttl", Category: catTiming, EnvVars: []string{"LEADERRUN_TTL"}, Value: 15 * time.Second,
			Usage: "lease time asked of the backend, at most 24h; on the local backend: how long the job may run without a successful check of its lock file"},
		&cli.DurationFlag{Name: "renew-interval", Category: catTiming, EnvVars: []string{"LEADERRUN_RENEW_INTERVAL"}, DefaultText: "ttl/3",
			Usage: "time between renewals"},
		&cli.DurationFlag{Name: "kill-grace", Category: catTiming, EnvVars: []string{"LEADERRUN_KILL_GRACE"}, Value: 5 * time.Second,
			Usage: "time between the stop signal and SIGKILL"},
		&cli.DurationFlag{Name: "safety-margin", Category: catTiming, EnvVars: []string{"LEADERRUN_SAFETY_MARGIN"}, Value: time.Second,
			Usage: "the job is dead this long before the lease could expire"},

		&cli.StringFlag{Name: "stop-signal", Category: catChild, EnvVars: []string{"LEADERRUN_STOP_SIGNAL"}, Value: "SIGTERM",
			Usage: "first `SIGNAL` to the job: a name (TERM, SIGTERM) or number; not KILL, STOP, TSTP, TTIN, TTOU or CONT"},
		&cli.StringFlag{Name: "restart", Category: catChild, EnvVars: []string{"LEADERRUN_RESTART"}, Value: "never",
			Usage: "start the command again while leader: never, on-failure or always"},
		&cli.StringFlag{Name: "contain", Category: catChild, EnvVars: []string{"LEADERRUN_CONTAIN"}, Value: "auto",
			Usage: "how the job is held together: auto, cgroup (cgroup v2) or group (process group and sweep)"},
		&cli.BoolFlag{Name: "no-guard", Category: catChild, EnvVars: []string{"LEADERRUN_NO_GUARD"},
			Usage: "run the command without the dead-man guard (not recommended)"},
		&cli.DurationFlag{Name: "restart-delay", Category: catChild, EnvVars: []string{"LEADERRUN_RESTART_DELAY"}, Value: time.Second,
			Usage: "first restart delay, doubling up to 30s"},

		&cli.StringFlag{Name: "log-level", Category: catOutput, EnvVars: []string{"LEADERRUN_LOG_LEVEL"}, Value: "info",
			Usage: "trace, debug, info, warn, error, or off for no log lines at all"},
		&cli.StringFlag{Name: "log-format", Category: catOutput, EnvVars: []string{"LEADERRUN_LOG_FORMAT"}, Value: "text",
			Usage: "text or json"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Category: catOutput, EnvVars: []string{"LEADERRUN_QUIET"},
			Usage: "nothing on stderr unless something went wrong (a skip is not wrong)"},
		&cli.StringFlag{Name: "http-addr", Category: catOutput, EnvVars: []string{"LEADERRUN_HTTP_ADDR"},
			Usage: "serve /healthz, /status and /metrics on `HOST:PORT`; off when empty"},
	}
}

// backendFlags select and configure the backend; status and check use them
// too. Each backend's own options come from its file (backend_<name>.go).
func backendFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "key", Category: catLeadership, EnvVars: []string{"LEADERRUN_KEY"},
			Usage: "the leadership `KEY` (required; see KEY below)"},
		&cli.StringFlag{Name: "backend", Category: catLeadership, EnvVars: []string{"LEADERRUN_BACKEND"}, Value: defaultBackend,
			Usage: backendList()},
		&cli.StringFlag{Name: "prefix", Category: catLeadership, EnvVars: []string{"LEADERRUN_PREFIX"}, Value: "leaderrun",
			Usage: "namespace of leaderrun's keys on the backend"},
	}, allBackendFlags()...)
}

// commonFlags are on every command (urfave/cli adds --help itself).
// loadEnvFiles reads the files before the flags are parsed.
func commonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: envFileFlag, Category: catOther, EnvVars: []string{"LEADERRUN_ENV_FILE"},
			Usage: "read VAR=value settings from `FILE`; they override the environment (repeatable; the variable takes a comma-separated list)"},
	}
}

// versionFlag is the top level's --version. It has no -v: most tools
// read that as "verbose".
func versionFlag() cli.Flag {
	return &cli.BoolFlag{Name: "version", Category: catOther, Usage: "print the version (there is no -v)"}
}

// runOptions are the options of a run, as the top level defines them.
func runOptions() []cli.Flag {
	return slices.Concat(backendFlags(), runFlags(), onceFlags(), commonFlags())
}

// noEnvFlags are the options no variable sets: --help and --version do
// not configure anything, and --unit names the files the variables come
// from. Every other option reads LEADERRUN_<OPTION> (ruleEnv).
var noEnvFlags = []string{"help", "version", unitFlag}

// withRuleEnv makes each of flags read LEADERRUN_<OPTION> too, after the
// variables it names itself: a backend's own variable (CONSUL_HTTP_ADDR)
// or LEADER_EPOCH is what leaderrun puts in its child's environment, so
// it must win over a LEADERRUN_ variable the child merely inherited.
func withRuleEnv(flags []cli.Flag) []cli.Flag {
	for _, f := range flags {
		name := f.Names()[0]
		if slices.Contains(noEnvFlags, name) || name == "generate-bash-completion" {
			continue
		}
		env := ruleEnv(name)
		switch f := f.(type) {
		case *cli.StringFlag:
			f.EnvVars = appendNew(f.EnvVars, env)
		case *cli.BoolFlag:
			f.EnvVars = appendNew(f.EnvVars, env)
		case *cli.DurationFlag:
			f.EnvVars = appendNew(f.EnvVars, env)
		case *cli.IntFlag:
			f.EnvVars = appendNew(f.EnvVars, env)
		case *cli.Uint64Flag:
			f.EnvVars = appendNew(f.EnvVars, env)
		case *cli.StringSliceFlag:
			f.EnvVars = appendNew(f.EnvVars, env)
		case *cli.GenericFlag:
			f.EnvVars = appendNew(f.EnvVars, env)
		default:
			panic(fmt.Sprintf("withRuleEnv: --%s is a %T; add its type", name, f))
		}
	}
	return flags
}

// appendNew appends v to list unless it is there already.
func appendNew(list []string, v string) []string {
	if slices.Contains(list, v) {
		return list
	}
	return append(slices.Clip(list), v)
}
