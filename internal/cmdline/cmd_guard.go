//go:build linux

package cmdline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/guard"
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
			log, err := newLogger(c)
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

// releaseFromHello builds the backend from the guard's hello payload and
// releases the lease by its handle.
func releaseFromHello(ctx context.Context, hello []byte, handle string) error {
	var spec backendSpec
	if err := json.Unmarshal(hello, &spec); err != nil {
		return fmt.Errorf("read backend settings: %w", err)
	}
	lk, err := spec.newLocker(newQuietLogger())
	if err != nil {
		return err
	}
	defer lk.Close()
	return lk.ReleaseHandle(ctx, handle)
}

// guardSpec tells the supervisor how to start the guard, and says (as a
// warning to log) when it must fall back to re-executing leaderrun.
func guardSpec(c *cli.Context, spec backendSpec) (*guard.Spec, string) {
	logArgs := []string{"--log-level", c.String("log-level"), "--log-format", c.String("log-format")}
	self, err := os.Executable()
	// The small guard releases local locks (by unlocking the descriptor it
	// holds), etcd leases and Consul sessions (over their HTTP APIs),
	// ZooKeeper sessions (closeSession) and, when leaderrun's credentials
	// allow, Kubernetes Leases (kubeSmallGuardReleases) itself. Otherwise
	// (a Kubernetes user behind an exec plugin, say) it would have to
	// execute leaderrun, which adds that start-up to a crash failover
	// (about 100ms, measured); there the guard is leaderrun itself, so
	// failover stays as fast as the backend allows.
	if !smallGuardReleases(spec.Backend) && !kubeSmallGuardReleases(spec) {
		err = errFullGuard
	}
	if err == nil {
		small := filepath.Join(filepath.Dir(self), guard.Name)
		if st, err := os.Stat(small); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return &guard.Spec{
				Path:  small,
				Args:  append([]string{guard.Name, "--release-with", self}, logArgs...),
				Env:   os.Environ(),
				Hello: spec.encode(),
			}, ""
		}
	}
	return &guard.Spec{
		// The running binary itself, even if its file was replaced since.
		Path:  "/proc/self/exe",
		Args:  append([]string{guard.Name, guardCommandName}, logArgs...),
		Env:   os.Environ(),
		Hello: spec.encode(),
	}, fullGuardReason(err)
}

// smallGuardReleases says whether leaderrun-guard gives back this backend's
// lease without running leaderrun.
func smallGuardReleases(backend string) bool {
	return backend == "local" || backend == "etcd" || backend == "consul" || backend == "zookeeper"
}

// kubeSmallGuardReleases says whether leaderrun-guard clears this
// Kubernetes Lease itself: when leaderrun passed it a connection a plain
// HTTPS client can use (bearer token or client certificate; an exec
// plugin or auth provider needs leaderrun).
func kubeSmallGuardReleases(spec backendSpec) bool {
	return spec.Backend == "kubernetes" && spec.K8sServer != ""
}

// errFullGuard says the backend's release needs leaderrun's own clients.
var errFullGuard = errors.New("a network backend's release is fastest from leaderrun itself")

// fullGuardReason is the warning for a guard that is leaderrun itself, or
// nothing when that was chosen on purpose.
func fullGuardReason(err error) string {
	if errors.Is(err, errFullGuard) {
		return ""
	}
	return guard.Name + " is not installed next to leaderrun; the guard is leaderrun itself, which costs more memory"
}
