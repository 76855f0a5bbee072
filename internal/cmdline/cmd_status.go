//go:build linux

package cmdline

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/locker"
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
			"--unit NAME reads the settings of the systemd instance leaderrun@NAME. " +
			"--watch prints the state, then a line per change (leader, epoch, pause, step-down, slots; " +
			"with --json one document per line, with its \"time\") until SIGINT or SIGTERM, exit 0. " +
			"It polls every --interval, says once when the backend cannot be read, and waits for " +
			"a key never used instead of exiting 3.",
		Flags: slices.Concat(queryFlags(),
			[]cli.Flag{&cli.BoolFlag{Name: "json", Category: catQuery, EnvVars: []string{"LEADERRUN_STATUS_JSON"}, Usage: "print a JSON document instead of a table"},
				holdersFlag("list the `N` slots of a key run with --holders N: each slot's holder, and the free slots")},
			watchFlags(),
			commonFlags()),
		Before:       divertDoubleDash,
		OnUsageError: divertUsageError,
		Action:       statusAction,
	}
}

func statusAction(c *cli.Context) error {
	if c.Bool("watch") || c.IsSet("interval") {
		return statusWatch(c)
	}
	if c.IsSet("holders") {
		return statusSlots(c)
	}
	read, err := readLeader(c, true)
	if err != nil {
		return usage(err)
	}
	report, unread, err := statusOf(c, read)
	if err != nil {
		return usage(err)
	}
	if unread != nil {
		fmt.Fprintf(errorOutput(), "leaderrun: %s\n", oneLine(unread))
	}
	sayCandidatesUnread(read)
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

// statusOf is the report of one read of the key: err when the backend did
// not answer (or the options are wrong), unread when the slots of a
// --holders key could not be read (the report then lists none).
func statusOf(c *cli.Context, read leaderRead) (report statusReport, unread, err error) {
	report, err = newStatusReport(read.Key, c.String("backend"), read.Holder, read.Err)
	if err != nil {
		return report, nil, unreadBackend(c, read.Key, fmt.Errorf("status of key %q: %w", read.Key, err))
	}
	if report.Leader != nil && report.Leader.LeaseRemainingSeconds == nil && read.TTL > 0 {
		ttl := read.TTL.Seconds()
		report.Leader.LeaseTTLSeconds = &ttl
	}
	report.LastRun = read.LastRun
	if t := read.Term; t != nil && report.Leader != nil {
		if !t.Ready.IsZero() {
			ready := t.Ready.UTC()
			report.Leader.JobReady = &ready
		}
		report.Leader.JobStatus = t.Status
	}
	report.withControl(read.Control, time.Now())
	report.withCandidates(read)
	unread, err = report.withSlots(c, read)
	return report, unread, err
}

// withSlots adds the slots of a key run with --holders N above 1, as its
// control record's bound or its slot 0's holder says N: plain status then
// shows every slot, not slot 0 alone (DESIGN §1.15). A slot that cannot be
// read leaves the list out, not the status: unread says why.
func (r *statusReport) withSlots(c *cli.Context, read leaderRead) (unread, err error) {
	n := read.Control.Holders
	if read.Err == nil {
		n = max(n, read.Holder.Holders)
	}
	if slot, _ := querySlot(c); n <= 1 || slot != 0 {
		return nil, nil
	}
	opts, err := lockerOptions(c, read.Key)
	if err != nil {
		return nil, err
	}
	b, settings, err := readBackend(c, opts)
	if err != nil {
		return nil, err
	}
	r.Holders = min(n, locker.MaxHolders)
	if r.Slots, _, err = readSlots(c, settings.New, b, opts, r.Holders); err != nil {
		r.Slots = nil
		return fmt.Errorf("the key runs with --holders %d, but its slots could not be read: %w", r.Holders, err), nil
	}
	return nil, nil
}
