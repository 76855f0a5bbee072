//go:build linux

package cmdline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/locker"
)

// historyCommand is `leaderrun history`: the key's last terms, as its
// holders recorded them on the backend (--history-keep).
func historyCommand() *cli.Command {
	return &cli.Command{
		Name:      "history",
		Usage:     "show a key's last terms: epoch, holder, host, start, end, how it ended, slot",
		UsageText: synopsisHistory,
		Description: "Reads the run history kept on the backend for KEY (the last --history-keep terms its " +
			"holders recorded) and prints it newest first, as a table or as JSON with --json. A term " +
			"whose holder died before recording its end has no end (\"unknown\"; \"running\" for the " +
			"current holder). For --once-per runs, a period between two recorded slots, or between the " +
			"newest and the last complete period, that no term ran is shown as missed. --since keeps " +
			"what happened in the window: a term that started, ended or still runs in it, a missed " +
			"period that overlaps it. A key the backend has no trace of exits 3, as status does; a " +
			"backend that keeps no history, or a bad --limit or --since, exits 125. --prometheus prints, for a once-per key, the start of the newest slot that ran, " +
			"its period and the missed slots as gauges, for the LeaderrunOncePerSlotMissed alert " +
			"(docs/OPERATING.md).",
		Flags:        slices.Concat(queryFlags(), historyFlags(), []cli.Flag{slotFlag()}, commonFlags()),
		Before:       divertDoubleDash,
		OnUsageError: divertUsageError,
		Action:       historyAction,
	}
}

// historyFlags are the flags of `history` alone.
func historyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "json", Category: catQuery, EnvVars: []string{"LEADERRUN_HISTORY_JSON"}, Usage: "print a JSON document instead of a table"},
		&cli.BoolFlag{Name: "prometheus", Category: catQuery,
			Usage: "print the once-per gauges in Prometheus's text format, for node_exporter's textfile collector"},
		&cli.IntFlag{Name: "limit", Category: catQuery, EnvVars: []string{"LEADERRUN_HISTORY_LIMIT"},
			Usage: "show the newest `N` terms only; 0 shows all that are kept"},
		&cli.DurationFlag{Name: "since", Category: catQuery, EnvVars: []string{"LEADERRUN_HISTORY_SINCE"},
			Usage: "show only what happened in the last `DURATION` (24h, 90m)"},
	}
}

// maxMissedRows bounds the missed slots one history shows: a short period
// left alone for long would print a row for each.
const maxMissedRows = 100

// historyReport is the JSON document of `leaderrun history --json`
// (docs/REFERENCE.md lists its fields).
type historyReport struct {
	Key     string       `json:"key"`
	Backend string       `json:"backend"`
	Terms   []historyRow `json:"terms"`
}

// historyRow is one term, or one missed slot (Missed true, no epoch).
type historyRow struct {
	Epoch         uint64     `json:"epoch,omitempty"`
	ID            string     `json:"id,omitempty"`
	Hostname      string     `json:"hostname,omitempty"`
	PID           int        `json:"pid,omitempty"`
	Start         *time.Time `json:"start,omitempty"`
	End           *time.Time `json:"end,omitempty"`
	Ended         string     `json:"ended,omitempty"`
	ExitCode      *int       `json:"exit_code,omitempty"`
	Reason        string     `json:"reason,omitempty"`
	Leading       bool       `json:"leading,omitempty"`
	Slot          string     `json:"slot,omitempty"`
	SlotOutcome   string     `json:"slot_outcome,omitempty"`
	PeriodSeconds int64      `json:"period_seconds,omitempty"`
	Missed        bool       `json:"missed,omitempty"`
	// CaughtUp: the term ran Slot after its period, as a catch-up.
	CaughtUp bool `json:"caught_up,omitempty"`
	// JobReady and JobStatus are what the term's job said over its
	// notify socket: when it first sent READY=1, its last STATUS= text.
	JobReady  *time.Time `json:"job_ready,omitempty"`
	JobStatus string     `json:"job_status,omitempty"`

	at time.Time // the row's place in time, for the order
	// last is the last moment the row covers, for --since: a term's end,
	// now while it runs, its start when its end is unknown; the end of a
	// missed slot's period. A once-per term's at is its slot's start,
	// which may lie long before it ran.
	last time.Time
}

// slotMissed is the slot outcome of a missed row.
const slotMissed = "missed"

func historyAction(c *cli.Context) error {
	limit, since := c.Int("limit"), c.Duration("since")
	if c.Bool("json") && c.Bool("prometheus") {
		return usage(errors.New("--json and --prometheus contradict: give one"))
	}
	if limit < 0 {
		return usage(fmt.Errorf("--limit must be 0 or more, got %d", limit))
	}
	if c.IsSet("since") && since <= 0 {
		return usage(fmt.Errorf("--since must be greater than 0, got %v", since))
	}
	lk, opts, err := queryLocker(c)
	if err != nil {
		return usage(err)
	}
	defer lk.Close()
	h, ok := locker.As[locker.History](lk)
	if !ok {
		return usage(fmt.Errorf("backend %q keeps no run history", c.String("backend")))
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Duration("timeout"))
	defer cancel()
	terms, err := h.Terms(ctx, limit)
	if err != nil {
		return usage(unreadBackend(c, opts.Key, fmt.Errorf("history of key %q: %w", opts.Name(), err)))
	}
	// Who leads tells a running term from one whose holder died, and a
	// key without history from one never used.
	holder, lerr := lk.Leader(ctx)
	var nu *locker.NeverUsedError
	if len(terms) == 0 && errors.As(lerr, &nu) {
		// As status says it: exit 3, a key the backend has no trace of.
		r, _ := newStatusReport(opts.Name(), c.String("backend"), holder, lerr)
		fmt.Fprintf(errorOutput(), "leaderrun: %s\n", printable(r.neverUsedLine()))
		return exitCode(exitcode.StatusNeverUsed)
	}
	var leading uint64
	if lerr == nil {
		leading = holder.Epoch
	}
	now := time.Now()
	report := historyReport{Key: opts.Name(), Backend: c.String("backend"), Terms: historyRows(terms, leading, now)}
	if c.IsSet("since") {
		report.Terms = slices.DeleteFunc(report.Terms, func(r historyRow) bool { return r.last.Before(now.Add(-since)) })
	}
	if c.Bool("prometheus") {
		return writeHistoryMetrics(os.Stdout, opts.Name(), terms, report.Terms)
	}
	if c.Bool("json") {
		return writeJSON(os.Stdout, report)
	}
	return report.writeText(os.Stdout)
}

// historyRows turns terms (newest first) into rows, with a missed row for
// each once-per slot that no term ran, newest first.
func historyRows(terms []locker.Term, leading uint64, now time.Time) []historyRow {
	rows := make([]historyRow, 0, len(terms))
	for _, t := range terms {
		r := historyRow{Epoch: t.Epoch, ID: t.ID, Hostname: t.Hostname, PID: t.PID, Ended: t.Ended, ExitCode: t.ExitCode,
			Reason: t.Reason, Slot: t.Slot, SlotOutcome: t.SlotOutcome, PeriodSeconds: int64(t.Period / time.Second), CaughtUp: t.CatchUp}
		r.JobStatus = t.Status
		if !t.Ready.IsZero() {
			ready := t.Ready.UTC()
			r.JobReady = &ready
		}
		start := t.Start.UTC()
		r.Start, r.at = &start, start
		if !t.End.IsZero() {
			end := t.End.UTC()
			r.End, r.at = &end, end
		} else if t.Epoch == leading {
			r.Leading, r.at = true, now
		}
		r.last = r.at
		if s, ok := slotStart(t); ok {
			r.at = s
			if !t.End.IsZero() && t.End.After(s) {
				r.at = s.Add(time.Nanosecond) // after its slot's missed neighbours, before the next slot
			}
		}
		rows = append(rows, r)
	}
	rows = append(rows, missedSlots(terms, now)...)
	// Newest first; a term before an older one of the same time (epoch order).
	slices.SortStableFunc(rows, func(a, b historyRow) int { return b.at.Compare(a.at) })
	return rows
}

// slotStart is the start of a once-per term's slot, when it names a period.
func slotStart(t locker.Term) (time.Time, bool) {
	if t.Period <= 0 || t.Slot == "" {
		return time.Time{}, false
	}
	s, err := time.Parse(time.RFC3339, t.Slot)
	return s, err == nil
}

// missedSlots lists, for each once-per period in terms, the slots between
// the oldest recorded slot and the last complete period before now that no
// term ran; at most maxMissedRows, the newest.
func missedSlots(terms []locker.Term, now time.Time) []historyRow {
	ran := map[time.Duration]map[time.Time]bool{}
	for _, t := range terms {
		if s, ok := slotStart(t); ok {
			if ran[t.Period] == nil {
				ran[t.Period] = map[time.Time]bool{}
			}
			ran[t.Period][s] = true
		}
	}
	var out []historyRow
	for period, slots := range ran {
		oldest := now
		for s := range slots {
			if s.Before(oldest) {
				oldest = s
			}
		}
		// The newest slot whose period is over: the current one may still run.
		p := int64(period / time.Second)
		n := now.Unix()
		last := time.Unix(n-((n%p)+p)%p, 0).UTC().Add(-period)
		for s := last; s.After(oldest) && len(out) < maxMissedRows; s = s.Add(-period) {
			if !slots[s] {
				out = append(out, historyRow{Slot: s.Format(time.RFC3339), SlotOutcome: slotMissed,
					PeriodSeconds: p, Missed: true, at: s, last: s.Add(period)})
			}
		}
	}
	return out
}

// writeText prints the rows as a table for people. Holders wrote every
// text in it: each goes through printable.
func (r historyReport) writeText(w io.Writer) error {
	if len(r.Terms) == 0 {
		_, err := fmt.Fprintf(w, "no terms recorded for key %q on %s\n", r.Key, r.Backend)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EPOCH\tHOLDER\tHOST\tSTART\tEND\tENDED\tEXIT\tSLOT")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return printable(s)
	}
	stamp := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format(time.RFC3339)
	}
	for _, t := range r.Terms {
		slot := "-"
		if t.Slot != "" {
			slot = printable(t.Slot) + " " + dash(t.SlotOutcome)
			if t.CaughtUp {
				slot += ", caught up"
			}
		}
		if t.Missed {
			fmt.Fprintf(tw, "-\t-\t-\t-\t-\tmissed\t-\t%s\n", slot)
			continue
		}
		ended := t.Ended
		switch {
		case t.Leading && t.JobStatus != "":
			ended = "running: " + t.JobStatus
		case t.Leading:
			ended = "running"
		case t.End == nil:
			ended = "unknown" // the holder died before recording its end
		case t.Reason != "" && t.Ended != locker.TermExited:
			ended += " (" + t.Reason + ")"
		}
		exit := "-"
		if t.ExitCode != nil {
			exit = strconv.Itoa(*t.ExitCode)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Epoch, dash(t.ID), dash(t.Hostname), stamp(t.Start), stamp(t.End), printable(ended), exit, slot)
	}
	return tw.Flush()
}

// writeHistoryMetrics prints the once-per gauges of a key: the start of the
// newest slot a term ran and its period (the alert fires once two periods
// passed since that start: the period after it is over and nobody ran it),
// and the missed slots among rows. A key without once-per terms prints
// only the help lines. Nothing here is exported by a running leaderrun: a
// once-per leaderrun lives for one slot, which no scrape may ever see.
func writeHistoryMetrics(w io.Writer, key string, terms []locker.Term, rows []historyRow) error {
	gauge := func(name, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
	}
	label := "{key=" + strconv.Quote(key) + "}"
	gauge("leaderrun_once_last_slot_timestamp_seconds", "Start of the newest once-per slot of the key that a term ran, from its run history.")
	var newest locker.Term
	var newestAt time.Time
	for _, t := range terms {
		if s, ok := slotStart(t); ok && s.After(newestAt) {
			newest, newestAt = t, s
		}
	}
	if newestAt.IsZero() {
		gauge("leaderrun_once_period_seconds", "The --once-per period of the key's newest slot.")
		gauge("leaderrun_once_missed_slots", "Once-per slots that no term ran, between the oldest slot kept and the last complete period.")
		return nil
	}
	fmt.Fprintf(w, "leaderrun_once_last_slot_timestamp_seconds%s %d\n", label, newestAt.Unix())
	gauge("leaderrun_once_period_seconds", "The --once-per period of the key's newest slot.")
	fmt.Fprintf(w, "leaderrun_once_period_seconds%s %d\n", label, int64(newest.Period/time.Second))
	gauge("leaderrun_once_missed_slots", "Once-per slots that no term ran, between the oldest slot kept and the last complete period.")
	missed := 0
	for _, r := range rows {
		if r.Missed {
			missed++
		}
	}
	_, err := fmt.Fprintf(w, "leaderrun_once_missed_slots%s %d\n", label, missed)
	return err
}
