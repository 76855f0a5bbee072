//go:build linux

package cmdline

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/guard"
	"github.com/leaderrun/leaderrun/locker"
)

// The dead-man guard (package guard) normally runs as the small
// leaderrun-guard binary installed next to leaderrun; it runs leaderrun
// `__release` only to release a lease. Where that binary is missing (a
// plain `go build`), leaderrun re-executes itself as `__guard`, at the cost
// of a full leaderrun's memory.
const (
	guardCommandName   = "__guard"
	releaseCommandName = "__release"
	// guardReleaseTimeout bounds one release by `leaderrun __release`.
	guardReleaseTimeout = 5 * time.Second
)

func guardCommand() *cli.Command {
	return &cli.Command{
		Name:   guardCommandName,
		Hidden: true,
		Usage:  "internal: the dead-man guard started by leaderrun itself",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info"},
			&cli.StringFlag{Name: "log-format", Value: "text"},
		},
		Action: func(c *cli.Context) error {
			log, err := logSettings{level: c.String("log-level"), format: c.String("log-format")}.logger()
			if err != nil {
				return usage(err)
			}
			trimResidentLater()
			return exitCode(guard.Main(releaseFromHello, log.Named("guard")))
		},
	}
}

// releaseCommand releases a lease described on stdin (guard.ReleaseRequest):
// the small guard runs it once the job of a dead leaderrun is gone.
func releaseCommand() *cli.Command {
	return &cli.Command{
		Name:   releaseCommandName,
		Hidden: true,
		Usage:  "internal: release a lease for the dead-man guard",
		Action: func(c *cli.Context) error {
			hello, handle, err := guard.ReadReleaseRequest(os.Stdin)
			if err != nil {
				return usage(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), guardReleaseTimeout)
			defer cancel()
			if err := releaseFromHello(ctx, hello, handle); err != nil {
				fmt.Fprintf(os.Stderr, "leaderrun: release: %s\n", oneLine(err))
				return exitCode(1)
			}
			return nil
		},
	}
}

// guardHello is the guard's hello payload for this run (guard.BackendHello),
// and why leaderrun-guard could not release the lease by itself ("" when
// it can).
func guardHello(cfg *runConfig, lk locker.Locker) ([]byte, string) {
	settings, whyFull := cfg.settings.Guard(lk)
	raw, err := json.Marshal(settings)
	if err == nil {
		var b []byte
		if b, err = json.Marshal(guard.BackendHello{Backend: cfg.backend.Name, Options: guard.HelloOptions(cfg.opts), Settings: raw}); err == nil {
			return b, whyFull
		}
	}
	panic(fmt.Sprintf("encode the guard's hello: %v", err)) // plain data cannot fail
}

// releaseFromHello builds the backend from the guard's hello payload and
// releases the lease by its handle.
func releaseFromHello(ctx context.Context, hello []byte, handle string) error {
	h, err := guard.ParseBackendHello(hello)
	if err != nil {
		return err
	}
	b := backendNamed(h.Backend)
	if b == nil {
		return fmt.Errorf("hello: no backend %q", h.Backend)
	}
	settings, err := b.FromHello(h.Settings)
	if err != nil {
		return fmt.Errorf("hello: %s settings: %w", b.Name, err)
	}
	lk, err := settings.New(h.Options, false, newQuietLogger())
	if err != nil {
		return err
	}
	defer lk.Close()
	return lk.ReleaseHandle(ctx, handle)
}

// guardSpec tells the supervisor how to start the guard, and says (as a
// warning to log) when it must fall back to re-executing leaderrun:
// leaderrun-guard is missing, or (whyFull) it cannot release this lease
// by itself.
//
// The small guard releases local locks (by unlocking the descriptor it
// holds), etcd leases and Consul sessions (over their HTTP APIs),
// ZooKeeper sessions (closeSession) and, when leaderrun's credentials
// allow, Kubernetes Leases itself. Otherwise (a Kubernetes user behind an
// exec plugin, say) it would have to execute leaderrun, which adds that
// start-up to a crash failover (about 100ms, measured); there the guard is
// leaderrun itself, so failover stays as fast as the backend allows.
func guardSpec(logs logSettings, hello []byte, whyFull string) (*guard.Spec, string) {
	logArgs := []string{"--log-level", logs.level, "--log-format", logs.format}
	self, err := os.Executable()
	if err == nil && whyFull == "" {
		small := filepath.Join(filepath.Dir(self), guard.Name)
		if st, err := os.Stat(small); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return &guard.Spec{
				Path:  small,
				Args:  append([]string{guard.Name, "--release-with", self}, logArgs...),
				Env:   os.Environ(),
				Hello: hello,
			}, ""
		}
	}
	warning := ""
	if whyFull == "" {
		warning = guard.Name + " is not installed next to leaderrun; the guard is leaderrun itself, which costs more memory"
	}
	return &guard.Spec{
		// The running binary itself, even if its file was replaced since.
		Path:  "/proc/self/exe",
		Args:  append([]string{guard.Name, guardCommandName}, logArgs...),
		Env:   os.Environ(),
		Hello: hello,
	}, warning
}
