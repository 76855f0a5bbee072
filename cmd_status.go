package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/ops"
	"github.com/leaderrun/leaderrun/locker"
)

// statusCommand is `leaderrun status`: who leads a key, read from the
// backend with the same backend options as a run.
func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show who leads a key: holder, host, pid, epoch, lease left",
		UsageText: "leaderrun status --key KEY [--json] [backend options]",
		Description: "Reads the current holder of KEY with a linearizable read and prints it as a table, " +
			"or as JSON with --json. Nobody leading is not an error: it prints \"no leader\" " +
			"(JSON: \"leader\": null) and exits 0. Exits 125 when the backend cannot be read.",
		Flags: append(queryBackendFlags(),
			&cli.BoolFlag{Name: "json", EnvVars: []string{"LEADERRUN_STATUS_JSON"}, Usage: "print a JSON document instead of a table"}),
		Before:       divertDoubleDash,
		OnUsageError: divertUsageError,
		Action:       statusAction,
	}
}

func statusAction(c *cli.Context) error {
	lk, opts, err := queryLocker(c)
	if err != nil {
		return usage(err)
	}
	defer lk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), c.Duration("timeout"))
	defer cancel()
	h, err := lk.Leader(ctx)
	report, err := ops.NewReport(opts.Key, c.String("backend"), h, err)
	if err != nil {
		return usage(fmt.Errorf("status of key %q: %w", opts.Key, err))
	}
	if rl, ok := locker.RunLogOf(lk); ok {
		if run, err := rl.LatestRun(ctx); err == nil {
			report.LastRun = &run
		}
	}
	if c.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return report.WriteText(os.Stdout, time.Now())
}

// queryBackendFlags are the backend options of a run (backendFlags), for
// the commands that only read the backend. Inside leaderrun's child the key
// comes from LEADER_KEY first: it names the key the parent really leads.
// --timeout bounds the whole read.
func queryBackendFlags() []cli.Flag {
	flags := backendFlags()
	for _, f := range flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "key" {
			sf.EnvVars = append([]string{"LEADER_KEY"}, sf.EnvVars...)
		}
	}
	return append(flags, &cli.DurationFlag{Name: "timeout", Value: 10 * time.Second,
		Usage: "give up reading the backend after this long (exit 125)"})
}

// queryLocker builds the backend from the command's flags, logging only
// errors so the command's own output stays clean.
func queryLocker(c *cli.Context) (locker.Locker, locker.Options, error) {
	opts, err := lockerOptions(c)
	if err != nil {
		return nil, opts, err
	}
	if c.Duration("timeout") <= 0 {
		return nil, opts, fmt.Errorf("--timeout must be greater than 0, got %v", c.Duration("timeout"))
	}
	spec := specFromCLI(c, opts)
	spec.ReadOnly = true // status and check create nothing
	lk, err := spec.newLocker(newQuietLogger())
	return lk, opts, err
}

// divertDoubleDash makes `leaderrun [options] -- status ...` run a program
// named status, as `--` promises, instead of this subcommand: urfave/cli
// picks a subcommand by the first argument even after `--`.
func divertDoubleDash(c *cli.Context) error {
	root := rootContext(c)
	if !afterDoubleDash(root) {
		return nil
	}
	if err := runAction(root); err != nil {
		return err
	}
	return exitCode(0)
}

// divertUsageError is divertDoubleDash for arguments this subcommand could
// not parse as its own flags; a real usage error is one line and 125.
func divertUsageError(c *cli.Context, err error, _ bool) error {
	if root := rootContext(c); afterDoubleDash(root) {
		if err := runAction(root); err != nil {
			return err
		}
		return exitCode(0)
	}
	return usage(err)
}

// rootContext is the context of the top-level command line.
func rootContext(c *cli.Context) *cli.Context {
	lineage := c.Lineage()
	for i := len(lineage) - 1; i >= 0; i-- {
		if lineage[i].Command != nil {
			return lineage[i]
		}
	}
	return c
}

// afterDoubleDash reports whether the top-level flags ended with "--", so
// that the first remaining argument is a command to run. The flag parser
// drops the "--"; os.Args still shows it.
func afterDoubleDash(root *cli.Context) bool {
	if len(os.Args) < 1 {
		return false
	}
	raw := os.Args[1:]
	n := len(raw) - root.NArg()
	return n >= 1 && n <= len(raw) && raw[n-1] == "--"
}
