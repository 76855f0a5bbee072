//go:build linux

// Command leaderrun-guard is leaderrun's dead-man guard (package guard): a
// process of a few MiB that sleeps while the job runs and kills it if
// leaderrun misses its kill point or dies. It links only the standard
// library, golang.org/x/sys and leaderrun's guard and contain packages and
// the backends' stdlib-only wire packages (etcdwire, consulwire, zkwire,
// kubewire). It releases a lease itself (guard.DirectRelease): etcd and
// Consul over their HTTP APIs, ZooKeeper by closing the session, a
// Kubernetes Lease by a conditioned update; where it cannot (for example a
// kubeconfig exec plugin), leaderrun is the guard instead, and `leaderrun
// __release` remains the fallback. leaderrun starts it; it is not meant to
// be run by hand.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/leaderrun/leaderrun/guard"
)

func main() {
	fs := flag.NewFlagSet(guard.Name, flag.ContinueOnError)
	releaseWith := fs.String("release-with", "", "the leaderrun binary that releases a lease")
	level := fs.String("log-level", "info", "trace, debug, info, warn or error")
	format := fs.String("log-format", "text", "text or json")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(125)
	}
	if *releaseWith == "" {
		fmt.Fprintln(os.Stderr, guard.Name+": started by leaderrun only (--release-with is required)")
		os.Exit(125)
	}
	release := func(ctx context.Context, hello []byte, handle string) error {
		if err := guard.DirectRelease(ctx, hello, handle); !errors.Is(err, guard.ErrNoDirectRelease) {
			return err
		}
		cmd := exec.CommandContext(ctx, *releaseWith, "__release")
		cmd.Stdin = strings.NewReader(guard.ReleaseRequest(hello, handle))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return fmt.Errorf("%s __release: %s", *releaseWith, ee.ProcessState)
			}
			return err
		}
		return nil
	}
	// Package init (TLS, networking) touched pages the guard never needs
	// while it sleeps; give them back once it has settled.
	time.AfterFunc(2*time.Second, guard.TrimResident)
	os.Exit(guard.Main(release, guard.StderrLogger{Level: *level, Format: *format}))
}
