//go:build linux

package cmdline

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/contain/scope"
	"github.com/leaderrun/leaderrun/guard"
	"github.com/leaderrun/leaderrun/internal/logline"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/supervise"
)

// openContainment picks where jobs run (--contain, DESIGN §1.4) and says
// which mode is in force and why, in one line.
func openContainment(cfg *runConfig, log hclog.Logger) (*contain.Box, error) {
	mode := cfg.contain
	opts := contain.Options{AdoptOrphans: true, Known: supervise.Started, Reaped: supervise.Reaped, HoldReaps: supervise.HoldReaps, Key: jobKey(cfg)}
	if mode != contain.Group {
		if dir, err := systemdScope(cfg.opts.Name()); err != nil {
			log.Warn("cannot get a systemd scope for the job", "error", err)
		} else if dir != "" {
			opts.Cgroup = dir
		}
	}
	box, err := contain.Open(mode, opts)
	if err != nil {
		return nil, err
	}
	// The full mode is what every host should have: said at debug level,
	// so a successful run writes only the job's start and end; a weaker
	// mode is worth a line in every run's log.
	if box.Mode() == contain.Cgroup {
		log.Debug("containment", "mode", box.Mode(), "why", box.Reason())
	} else {
		log.Info("containment", "mode", box.Mode(), "why", box.Reason())
	}
	return box, nil
}

// jobKey names the leadership the jobs run under, for the sweep of leftover
// jobs (DESIGN §1.9): backend, prefix and key, and on the local backend the
// lock directory, since each directory is a leadership of its own. Other
// backends' addresses are left out: one cluster may be named by different
// address lists, and a leftover of a dead leaderrun missed is worse than an
// unsupervised job of the same key in another cluster killed.
func jobKey(cfg *runConfig) string {
	id := []string{cfg.backend.Name, cfg.opts.Prefix, cfg.opts.Name()}
	if scope := cfg.settings.Scope(); scope != "" {
		id = append(id, scope)
	}
	return strings.Join(id, "\x00")
}

// runGuard is the guard to start with each term, or nil with --no-guard.
func runGuard(cfg *runConfig, lk locker.Locker, log hclog.Logger) *guard.Spec {
	if cfg.noGuard {
		log.Warn("running without the dead-man guard (--no-guard): a frozen or killed leaderrun leaves its job to PDEATHSIG alone")
		return nil
	}
	hello, whyFull := guardHello(cfg, lk)
	g, warning := guardSpec(cfg.logs, hello, whyFull)
	if warning != "" {
		// At WARN once per boot and binary, at INFO after that: cron would
		// mail it on every quiet run.
		if self, _ := os.Executable(); logline.FirstThisBoot("guard warning\x00" + self + "\x00" + warning) {
			log.Warn(warning)
		} else {
			log.Info(warning)
		}
	}
	if whyFull != "" {
		log.Info("the guard is leaderrun itself: leaderrun-guard cannot release this lease alone", "why", whyFull)
	}
	return g
}

// systemdScope asks systemd, where it is PID 1 and leaderrun's cgroup is
// not delegated to it, for a transient scope of leaderrun's own (the call
// `systemd-run --scope` makes), delegated, and returns its cgroup
// directory; "" where no scope is needed.
func systemdScope(key string) (string, error) {
	if !contain.SystemdBooted() {
		return "", nil
	}
	dir, err := contain.OwnCgroupDir()
	if err != nil || contain.Delegated(dir) {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := scope.Connect(ctx, os.Geteuid() == 0)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := scope.Start(ctx, conn, key, os.Getpid()); err != nil {
		return "", err
	}
	return contain.OwnCgroupDir()
}
