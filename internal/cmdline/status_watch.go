//go:build linux

package cmdline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/logline"
	"github.com/leaderrun/leaderrun/locker"
)

// minWatchInterval is the shortest --interval status --watch takes: each
// poll is the reads of one status, and a watcher should not load the
// backend like a candidate.
const minWatchInterval = 100 * time.Millisecond

// watchFlags are status's --watch and --interval.
func watchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "watch", Category: catQuery,
			Usage: "print the state, then a line (with --json a JSON object) at each change, until interrupted"},
		&cli.DurationFlag{Name: "interval", Category: catQuery, Value: time.Second,
			Usage: "with --watch, poll the backend every `D` (at least 100ms), each poll the reads of one status"},
	}
}

// statusWatch is status --watch: it reads the key every --interval, as
// status does, and prints a line whenever what an operator cares about
// changed, until SIGINT or SIGTERM (exit 0). Every backend is polled: the
// only notification the backends offer cheaply is the control record's
// (WaitControl), and the holder's changes need the same read anyway.
func statusWatch(c *cli.Context) error {
	if !c.Bool("watch") {
		return usage(errors.New("--interval needs --watch: plain status reads the key once"))
	}
	if c.IsSet("holders") {
		return usage(errors.New("--watch does not take --holders: status --watch of a key run with --holders already shows each slot"))
	}
	if d := c.Duration("interval"); d < minWatchInterval {
		return usage(fmt.Errorf("--interval must be at least %v, got %v", minWatchInterval, d))
	}
	lk, opts, err := queryLocker(c)
	if err != nil {
		return usage(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	w := &watcher{c: c, lk: lk, key: opts.Name(), json: c.Bool("json"), out: os.Stdout, errOut: errorOutput()}
	done := make(chan error, 1)
	go func() { done <- w.run(ctx) }()
	// A signal ends the watch at once, also in the middle of a read.
	select {
	case <-ctx.Done():
		return nil
	case err := <-done:
		return err
	}
}

// watcher is the state of one status --watch.
type watcher struct {
	c      *cli.Context
	lk     locker.Locker // nil after a failed read: built again
	key    string
	json   bool
	out    io.Writer
	errOut io.Writer
	// last is the report last printed, and shown whether there is one.
	last  statusReport
	shown bool
	// trouble is true while the backend cannot be read: the line saying
	// so was printed, and the next state read is printed in full.
	trouble bool
	// deferred is true when the last read named a holder without an
	// epoch, not printed yet.
	deferred bool
}

// run polls until ctx ends. Only a refusal of the first read (ACL,
// authentication, TLS: status would exit 125) ends it with an error.
func (w *watcher) run(ctx context.Context) error {
	for first := true; ; first = false {
		report, unread, err := w.read(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if first && errors.Is(err, locker.ErrRefused) {
			return usage(err)
		}
		w.observe(time.Now(), report, unread, err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.c.Duration("interval")):
		}
	}
}

// read is one status of the key, with the Locker of the last read if it
// answered, else a new one.
func (w *watcher) read(ctx context.Context) (statusReport, error, error) {
	if w.lk == nil {
		lk, _, err := queryLocker(w.c)
		if err != nil {
			return statusReport{}, nil, err
		}
		w.lk = lk
	}
	r, unread, err := statusOf(w.c, readLeaderFrom(ctx, w.c, w.lk, w.key, true))
	if err != nil {
		w.lk.Close()
		w.lk = nil
	}
	return r, unread, err
}

// observe prints what one read says, if it is news: the state the first
// time and after an outage, the changes otherwise, and an outage once.
func (w *watcher) observe(now time.Time, r statusReport, unread, err error) {
	if err == nil && unread != nil {
		// The slots are the state here: not knowing them is an outage.
		err = unread
	}
	if err != nil {
		if !w.trouble {
			w.trouble = true
			w.say(now, "cannot read the backend, still watching: "+oneLine(err))
		}
		return
	}
	var prev *statusReport
	if last := w.last; w.shown && !w.trouble {
		prev = &last
	}
	if prev != nil && !changed(*prev, r) {
		w.deferred = false
		return
	}
	// A holder that has just taken the lock may not have its epoch yet
	// (the local backend's pending record): its next read, a moment
	// later, has it. A holder still without one then is shown so.
	if r.Leader != nil && r.Leader.Epoch == 0 && !w.deferred {
		w.deferred = true
		return
	}
	w.deferred = false
	again := w.shown && w.trouble
	w.last, w.shown, w.trouble = r, true, false
	if w.json {
		w.writeJSONLine(now, r)
		return
	}
	text := describeChange(prev, r)
	if again {
		text = "backend readable again: " + text
	}
	w.say(now, text)
}

// say prints one line of the watch: on stdout with its time, or with
// --json on stderr, where it does not break the JSON Lines.
func (w *watcher) say(now time.Time, text string) {
	if w.json {
		fmt.Fprintf(w.errOut, "leaderrun: %s\n", printable(text))
		return
	}
	// One write per line: a reader behind a pipe gets it at once.
	fmt.Fprintf(w.out, "%s %s\n", now.UTC().Format(time.RFC3339), printable(text))
}

// writeJSONLine prints the report as one line of JSON Lines, with the
// time of the read.
func (w *watcher) writeJSONLine(now time.Time, r statusReport) {
	b, err := json.Marshal(struct {
		Time string `json:"time"`
		statusReport
	}{now.UTC().Format(time.RFC3339Nano), r})
	if err != nil {
		fmt.Fprintf(w.errOut, "leaderrun: %s\n", oneLine(err))
		return
	}
	w.out.Write(append(logline.PrintableJSON(b), '\n'))
}

// volatileFields are the JSON fields of a status that change by
// themselves, without anything happening to the key: they are left out
// when two reports are compared. Every other field counts, also one
// added later; a new field that changes by itself belongs here.
var volatileFields = []string{"lease_remaining_seconds", "lease_ttl_seconds", "time"}

// fields is the report as JSON, field by field, without volatileFields at
// any depth: each value is its JSON text, with object keys in order.
func fields(r statusReport) map[string]string {
	b, err := json.Marshal(r)
	if err != nil {
		return map[string]string{"": err.Error()}
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return map[string]string{"": err.Error()}
	}
	out := map[string]string{}
	for k, v := range doc {
		if slices.Contains(volatileFields, k) {
			continue
		}
		vb, _ := json.Marshal(stripVolatile(v))
		out[k] = string(vb)
	}
	return out
}

// stripVolatile is v without volatileFields in any object within it.
func stripVolatile(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k := range v {
			if slices.Contains(volatileFields, k) {
				delete(v, k)
			} else {
				v[k] = stripVolatile(v[k])
			}
		}
	case []any:
		for i := range v {
			v[i] = stripVolatile(v[i])
		}
	}
	return v
}

// changed reports whether b says something a differs in, apart from
// volatileFields.
func changed(a, b statusReport) bool { return fieldsDiffer(fields(a), fields(b)) }

// fieldsDiffer reports whether two reports' fields differ.
func fieldsDiffer(fa, fb map[string]string) bool {
	if len(fa) != len(fb) {
		return true
	}
	for k, v := range fa {
		if w, ok := fb[k]; !ok || w != v {
			return true
		}
	}
	return false
}

// describeChange is the text of a watch line: what r says that prev did
// not, or with prev nil all of r. The parts it knows are worded; any other
// field that changed is shown as its name and JSON value.
func describeChange(prev *statusReport, r statusReport) string {
	var was statusReport
	if prev != nil {
		was = *prev
	}
	return describeFields(prev, r, fields(was), fields(r))
}

// describeFields is describeChange with the reports' fields given.
func describeFields(prev *statusReport, r statusReport, fa, fb map[string]string) string {
	var parts []string
	diff := func(names ...string) bool {
		for _, n := range names {
			if prev == nil && fb[n] != "" || prev != nil && fa[n] != fb[n] {
				return true
			}
		}
		return false
	}
	worded := []string{"key", "backend", "leader", "never_used", "looked_at", "paused", "step_down", "step_down_void", "holders", "slots", "last_run", "candidates"}
	if prev == nil || diff("leader", "never_used", "looked_at") {
		t := leaderText(r)
		if prev != nil {
			if sameTerm(prev.Leader, r.Leader) {
				t += " (its record changed)"
			} else {
				t += " (was " + wasText(*prev) + ")"
			}
		}
		parts = append(parts, t)
	}
	switch {
	case r.Paused != nil && diff("paused"):
		parts = append(parts, fmt.Sprintf("paused: %s (by %s since %s)", r.Paused.Reason, r.Paused.By, r.Paused.Since.UTC().Format(time.RFC3339)))
	case r.Paused == nil && prev != nil && prev.Paused != nil:
		parts = append(parts, "resumed")
	}
	switch {
	case r.StepDown != nil && diff("step_down", "step_down_void"):
		t := "step-down: epoch " + stepDownText(r.StepDown)
		if r.StepDownVoid {
			t += " (void: candidates ignore it)"
		}
		parts = append(parts, t)
	case r.StepDown == nil && prev != nil && prev.StepDown != nil:
		parts = append(parts, "step-down over")
	}
	if diff("holders", "slots") && (r.Holders > 1 || prev != nil) {
		parts = append(parts, slotsLine(r))
	}
	if diff("candidates") && (r.listed == candidatesListed || prev != nil && prev.listed == candidatesListed) {
		parts = append(parts, candidatesLine(r))
	}
	if r.LastRun != nil && diff("last_run") {
		parts = append(parts, "last run: "+r.LastRun.Describe()+" ("+r.LastRun.Outcome+")")
	}
	var other []string
	for k := range fb {
		// The state in full leaves out the fields that say nothing.
		if prev == nil && slices.Contains([]string{"null", "[]", "{}", `""`, "false", "0"}, fb[k]) {
			continue
		}
		if !slices.Contains(worded, k) && diff(k) {
			other = append(other, k)
		}
	}
	for k := range fa {
		if _, ok := fb[k]; !ok && !slices.Contains(worded, k) && prev != nil {
			other = append(other, k)
		}
	}
	slices.Sort(other)
	for _, k := range slices.Compact(other) {
		v, ok := fb[k]
		if !ok {
			v = "none"
		}
		parts = append(parts, k+": "+v)
	}
	return strings.Join(parts, "; ")
}

// leaderText says who leads: "leader ID (host H, pid P) epoch E", or
// that nobody does.
func leaderText(r statusReport) string {
	l := r.Leader
	switch {
	case l == nil && r.NeverUsed:
		return "no leader: " + r.neverUsedLine() + "; watching for it"
	case l == nil && r.Holders > 1:
		return "no leader in slot 0"
	case l == nil:
		return "no leader"
	}
	t := fmt.Sprintf("leader %s (host %s, pid %d) epoch %d", l.ID, orUnknown(l.Hostname), l.PID, l.Epoch)
	if job := l.jobText(); job != "" {
		t += ", job " + job
	}
	return t
}

// wasText is the leader a change replaced: "ID epoch E", or "no leader".
func wasText(r statusReport) string {
	switch l := r.Leader; {
	case l != nil:
		return fmt.Sprintf("%s epoch %d", l.ID, l.Epoch)
	case r.NeverUsed:
		return "never used"
	}
	return "no leader"
}

// sameTerm reports whether a and b are the same holder's same term.
func sameTerm(a, b *leaderReport) bool {
	return a != nil && b != nil && a.ID == b.ID && a.Hostname == b.Hostname && a.PID == b.PID && a.Epoch == b.Epoch
}

// slotsLine says who holds each slot of a key run with --holders.
func slotsLine(r statusReport) string {
	if r.Holders <= 1 {
		return "no slots (not run with --holders)"
	}
	var each []string
	for _, sl := range r.Slots {
		if sl.Leader == nil {
			each = append(each, fmt.Sprintf("slot %d free", sl.Slot))
		} else {
			each = append(each, fmt.Sprintf("slot %d %s epoch %d", sl.Slot, sl.Leader.ID, sl.Leader.Epoch))
		}
	}
	return fmt.Sprintf("holders %d: %s", r.Holders, strings.Join(each, ", "))
}

// candidatesLine says who waits, in order: "candidates: none", or
// "candidates: 2 waiting: web-2 (host b), web-3 (host c)".
func candidatesLine(r statusReport) string {
	if r.listed != candidatesListed {
		return "candidates: not read"
	}
	if len(r.Candidates) == 0 {
		return "candidates: none"
	}
	each := make([]string, len(r.Candidates))
	for i, c := range r.Candidates {
		each[i] = c.ID
		if c.Hostname != nil {
			each[i] += " (host " + *c.Hostname + ")"
		}
	}
	return fmt.Sprintf("candidates: %d waiting: %s", len(r.Candidates), strings.Join(each, ", "))
}
