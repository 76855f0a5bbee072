//go:build linux

package cmdline

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/exitcode"
)

// statusCommand is `leaderrun status`: who leads a key, read from the
// backend with the same backend options as a run.
func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show who leads a key: holder, host, pid, epoch, lease left",
		UsageText: synopsisStatus,
		Description: "Reads the current holder of KEY with a linearizable read and prints it as a table, " +
			"or as JSON with --json. Nobody leading is not an error: it prints \"no leader\" " +
			"(JSON: \"leader\": null) and exits 0. A key the backend has no trace of (never used: " +
			"a typo, or the wrong server, prefix or --lock-dir) exits 3, saying where it looked " +
			"(JSON: \"never_used\": true, \"looked_at\"). Exits 125 when the backend cannot be read. " +
			"--unit NAME reads the settings of the systemd instance leaderrun@NAME.",
		Flags: slices.Concat(queryFlags(),
			[]cli.Flag{&cli.BoolFlag{Name: "json", Category: catQuery, EnvVars: []string{"LEADERRUN_STATUS_JSON"}, Usage: "print a JSON document instead of a table"},
				holdersFlag("list the `N` slots of a key run with --holders N: each slot's holder, and the free slots")},
			commonFlags()),
		Before:       divertDoubleDash,
		OnUsageError: divertUsageError,
		Action:       statusAction,
	}
}

func statusAction(c *cli.Context) error {
	if c.IsSet("holders") {
		return statusSlots(c)
	}
	read, err := readLeader(c, true)
	if err != nil {
		return usage(err)
	}
	report, err := newStatusReport(read.Key, c.String("backend"), read.Holder, read.Err)
	if err != nil {
		return usage(fmt.Errorf("status of key %q: %w", read.Key, err))
	}
	report.LastRun = read.LastRun
	report.withControl(read.Control, time.Now())
	if c.Bool("json") {
		err = writeJSON(os.Stdout, report)
	} else {
		err = report.writeText(os.Stdout, time.Now())
	}
	if err != nil || !report.NeverUsed {
		return err
	}
	fmt.Fprintf(errorOutput(), "leaderrun: %s\n", printable(report.neverUsedLine()))
	return exitCode(exitcode.StatusNeverUsed)
}
