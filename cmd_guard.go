//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/guard"
	"github.com/leaderrun/leaderrun/supervise"
)

// guardCommandName is the hidden mode in which leaderrun runs as the
// dead-man guard of another leaderrun (package guard).
const guardCommandName = "__guard"

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
			// Only "done", end of input or SIGKILL end the guard: a signal
			// meant for leaderrun (pkill, a terminal's ^C) must not disarm it.
			signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
			return exitCode(guard.Run(os.Stdin, releaseFromHello, log.Named("guard")))
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

// guardConfig tells the supervisor how to start this binary as a guard.
func guardConfig(c *cli.Context, spec backendSpec) *supervise.GuardConfig {
	return &supervise.GuardConfig{
		// The running binary itself, even if its file was replaced since.
		Path: "/proc/self/exe",
		Args: []string{"leaderrun", guardCommandName,
			"--log-level", c.String("log-level"), "--log-format", c.String("log-format")},
		Env:   os.Environ(),
		Hello: spec.encode(),
	}
}
