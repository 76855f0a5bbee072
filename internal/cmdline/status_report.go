//go:build linux

package cmdline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leaderrun/leaderrun/internal/logline"
	"github.com/leaderrun/leaderrun/locker"
)

// statusReport is what `leaderrun status` says about a key; with --json it is
// printed as this JSON document, whose fields are stable: new ones may be
// added, none renamed or removed.
type statusReport struct {
	// Key and Backend are what was asked about.
	Key     string `json:"key"`
	Backend string `json:"backend"`
	// Leader is the current holder, or null when nobody leads the key.
	Leader *leaderReport `json:"leader"`
	// NeverUsed is true when nobody leads the key and the backend has no
	// trace of it ever being used where it looked (LookedAt); absent
	// otherwise. status then exits exitcode.StatusNeverUsed.
	NeverUsed bool `json:"never_used,omitempty"`
	// LookedAt names that place in the backend's terms (lock directory,
	// endpoints and key prefix, KV path, znode, Lease).
	LookedAt string `json:"looked_at,omitempty"`
	// check is the settings to look at again, worded as options.
	check []string
	// LastRun is the newest live once-per record of the key (--once-per,
	// --run-id): slot, outcome, who ran it and when; absent when none.
	LastRun *locker.Run `json:"last_run,omitempty"`
	// Paused is the key's pause (leaderrun pause): by (user@host),
	// since, reason; absent when the key is not paused.
	Paused *locker.Pause `json:"paused,omitempty"`
	// StepDown is a step-down under way (leaderrun step-down, or a
	// --priority candidate's preemption): the key or slot key, the epoch
	// asked to go, to (the candidate it is reserved for, if any), by, at
	// and until; absent once another term took the key or until passed.
	StepDown *locker.StepDown `json:"step_down,omitempty"`
	// StepDownVoid is true when StepDown's until lies further ahead than
	// any leaderrun writes one (locker.MaxReservation): candidates ignore
	// it, and resume clears it.
	StepDownVoid bool `json:"step_down_void,omitempty"`
	// Holders is how many slots the key is run with (--holders), when
	// more than one: the larger of the control record's bound and the
	// --holders its holder names; absent otherwise. Leader is slot 0.
	Holders int `json:"holders,omitempty"`
	// Slots are the key's slots when Holders is set, as in `status
	// --holders N` (slot, leader, holder_holders).
	Slots []slotReport `json:"slots,omitempty"`
	// Candidates are the candidates waiting for the key, the leader
	// excluded, in the order they would win (place 0 is the next): [] when
	// nobody waits, null when the backend cannot tell (PostgreSQL,
	// DynamoDB) or the list could not be read. On the local backend the
	// places are the order in which they began to wait.
	Candidates []candidateReport `json:"candidates"`
	// listed says which of those it is (candidatesListed...).
	listed int
}

// leaderReport describes the holder, from the record it stored on the
// backend and the backend's own metadata.
type leaderReport struct {
	// ID is the holder's --id (default hostname:pid).
	ID string `json:"id"`
	// Hostname and PID locate the holder's leaderrun process.
	Hostname string `json:"hostname"`
	PID      int    `json:"pid"`
	// Epoch is the fencing epoch of this leadership (LEADER_EPOCH in its
	// child): etcd create revision, Consul Raft index, local counter.
	Epoch uint64 `json:"epoch"`
	// AcquiredAt is when the holder won (its own wall clock, UTC); null when
	// the key holds a value leaderrun did not write.
	AcquiredAt *time.Time `json:"acquired_at"`
	// Version is the holder's leaderrun version, when it recorded one.
	Version string `json:"version,omitempty"`
	// Priority is the holder's --priority, when it has one.
	Priority int `json:"priority,omitempty"`
	// JobReady and JobStatus are what the holder's job said over its
	// notify socket, as its term's history record says: when it first
	// sent READY=1, its last STATUS= text; absent when it said nothing.
	JobReady  *time.Time `json:"job_ready,omitempty"`
	JobStatus string     `json:"job_status,omitempty"`
	// LeaseRemainingSeconds is how long the backend keeps the lease without
	// a renewal: etcd, the lease's TimeToLive (whole seconds); Consul, the
	// session TTL, an upper bound since Consul does not say how much is
	// left. Null for the local backend, whose flock lasts as long as the
	// holder's process, and when the backend could not tell.
	LeaseRemainingSeconds *float64 `json:"lease_remaining_seconds"`
	// LeaseTTLSeconds is the TTL the holder declared, where the backend
	// keeps no expiry of its own (PostgreSQL, DynamoDB: the holder's
	// clock keeps its lease, and a standby takes over once the row stayed
	// unrenewed for that TTL and an allowance); absent elsewhere.
	LeaseTTLSeconds *float64 `json:"lease_ttl_seconds,omitempty"`
}

// newStatusReport turns the result of Locker.Leader into a report. An error
// other than locker.ErrNoLeader is returned as is.
func newStatusReport(key, backend string, h locker.Holder, err error) (statusReport, error) {
	r := statusReport{Key: key, Backend: backend}
	var nu *locker.NeverUsedError
	if errors.As(err, &nu) {
		r.NeverUsed, r.LookedAt = true, nu.Where
		r.check = fieldsAsFlags(backendNamed(backend), nu.Fields)
		return r, nil
	}
	if errors.Is(err, locker.ErrNoLeader) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	l := &leaderReport{ID: h.ID, Hostname: h.Hostname, PID: h.PID, Epoch: h.Epoch, Version: h.Version, Priority: h.Priority}
	if !h.AcquiredAt.IsZero() {
		at := h.AcquiredAt.UTC()
		l.AcquiredAt = &at
	}
	// A lease without expiry has no time left to show, whatever it says.
	if b := backendNamed(backend); h.LeaseRemaining > 0 && (b == nil || b.NoExpiry == "") {
		s := h.LeaseRemaining.Seconds()
		l.LeaseRemainingSeconds = &s
	}
	r.Leader = l
	return r, nil
}

// writeText prints the report for people: a two-column table, and under
// it the candidates waiting.
func (r statusReport) writeText(w io.Writer, now time.Time) error {
	if err := r.writeTable(w, now); err != nil {
		return err
	}
	return r.writeCandidates(w)
}

// writeTable prints the report but its candidates as a two-column table.
func (r statusReport) writeTable(w io.Writer, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// Every value may come from a record on the backend.
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, printable(v)) }
	row("key", r.Key)
	row("backend", r.Backend)
	l := r.Leader
	if l == nil && r.NeverUsed {
		row("leader", "no leader, key never used")
		row("looked at", r.LookedAt)
		r.lastRunRow(row)
		return tw.Flush()
	}
	if l == nil && r.Holders > 1 {
		row("leader", "no leader in slot 0")
		r.lastRunRow(row)
		return tw.Flush()
	}
	if l == nil {
		row("leader", "no leader")
		r.lastRunRow(row)
		return tw.Flush()
	}
	row("leader", l.ID)
	row("hostname", orUnknown(l.Hostname))
	if l.PID != 0 {
		row("pid", strconv.Itoa(l.PID))
	} else {
		row("pid", "unknown")
	}
	row("epoch", strconv.FormatUint(l.Epoch, 10))
	if l.AcquiredAt != nil {
		ago := now.Sub(*l.AcquiredAt).Round(time.Second)
		row("acquired", fmt.Sprintf("%s (%s ago)", l.AcquiredAt.Format(time.RFC3339), ago))
	} else {
		row("acquired", "unknown")
	}
	row("lease", r.leaseText())
	if l.Version != "" {
		row("version", l.Version)
	}
	if l.Priority != 0 {
		row("priority", strconv.Itoa(l.Priority))
	}
	if job := l.jobText(); job != "" {
		row("job", job)
	}
	r.lastRunRow(row)
	return tw.Flush()
}

// neverUsedLine is what status says on stderr about a key never used:
// where it looked and which settings choose that place.
func (r statusReport) neverUsedLine() string {
	opts := append([]string{"the key"}, r.check...)
	list := opts[0]
	if n := len(opts); n > 1 {
		list = strings.Join(opts[:n-1], ", ") + " and " + opts[n-1]
	}
	return fmt.Sprintf("key %q was never used at %s — check %s", r.Key, r.LookedAt, list)
}

// fieldsAsFlags words the Config fields a backend names as the options an
// operator types, as configError does, each once.
func fieldsAsFlags(b *backend, fields []string) []string {
	var out []string
	for _, f := range fields {
		flag, ok := "", false
		if b != nil {
			flag, ok = b.Fields[f]
		}
		if !ok {
			flag, ok = fieldFlags[f]
		}
		if ok && !slices.Contains(out, flag) {
			out = append(out, flag)
		}
	}
	return out
}

// lastRunRow adds the once-per record, the pause and a step-down under
// way, if any.
func (r statusReport) lastRunRow(row func(k, v string)) {
	if r.Holders > 1 {
		row("holders", r.slotsText())
	}
	if r.LastRun != nil {
		row("last run", r.LastRun.Describe()+" ("+r.LastRun.Outcome+")")
	}
	if p := r.Paused; p != nil {
		row("paused", fmt.Sprintf("by %s since %s: %s", p.By, p.Since.Format(time.RFC3339), p.Reason))
	}
	if sd := r.StepDown; sd != nil {
		v := "epoch " + stepDownText(sd)
		if r.StepDownVoid {
			v += fmt.Sprintf(" (void: more than %s ahead, candidates ignore it; resume clears it)", roundDuration(locker.MaxReservation))
		}
		row("step-down", v)
	}
}

// slotsText says that the key has slots, who holds each, and how to see
// them in full.
func (r statusReport) slotsText() string {
	var each []string
	for _, sl := range r.Slots {
		who := "free"
		if sl.Leader != nil {
			who = sl.Leader.ID
		}
		each = append(each, fmt.Sprintf("slot %d %s", sl.Slot, who))
	}
	v := fmt.Sprintf("%d (--holders %d", r.Holders, r.Holders)
	if len(each) > 0 {
		v += ": " + strings.Join(each, ", ")
	}
	return v + fmt.Sprintf("); leaderrun status --holders %d %s shows each slot", r.Holders, r.Key)
}

// stepDownText says what a step-down asks: "N of KEY to ID, asked by
// WHO, until T".
func stepDownText(sd *locker.StepDown) string {
	to := "any other candidate"
	if sd.To != "" {
		to = sd.To
	}
	return fmt.Sprintf("%d of %s to %s, asked by %s, until %s", sd.Epoch, sd.Key, to, sd.By, sd.Until.Format(time.RFC3339))
}

// withControl adds what the key's control record says now: the pause, and
// a step-down that still reserves the key, void or not.
func (r *statusReport) withControl(c locker.Control, now time.Time) {
	r.Paused = c.Pause
	if sd := c.StepDown; sd.Reserves(now) {
		r.StepDown, r.StepDownVoid = sd, sd.Void(now)
	}
}

// printable is text from a record as a terminal may be shown it.
func printable(s string) string { return logline.Printable(s) }

// writeJSON prints v as the indented JSON document of --json, with every
// rune a terminal would act on escaped (logline.PrintableJSON).
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(logline.PrintableJSON(b.Bytes()))
	return err
}

// leaseText says how long the lease lasts, in each backend's own terms.
func (r statusReport) leaseText() string {
	l := r.Leader
	b := backendNamed(r.Backend)
	switch {
	case b != nil && b.NoExpiry != "":
		if l.PID != 0 {
			return fmt.Sprintf("held while pid %d lives (%s)", l.PID, b.NoExpiry)
		}
		return "held while its process lives (" + b.NoExpiry + ")"
	case l.LeaseRemainingSeconds == nil && l.LeaseTTLSeconds != nil:
		return fmt.Sprintf("%s TTL, kept by the holder's clock (the %s row has no expiry of its own: a standby takes over once it stays unrenewed for the TTL and an allowance)",
			secs(*l.LeaseTTLSeconds), r.Backend)
	case l.LeaseRemainingSeconds == nil:
		return "unknown"
	case b != nil && b.LeaseLeft != nil:
		return b.LeaseLeft(secs(*l.LeaseRemainingSeconds))
	default:
		return fmt.Sprintf("%s left (%s lease TTL)", secs(*l.LeaseRemainingSeconds), r.Backend)
	}
}

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// jobText is what the holder's job said over its notify socket, for the
// "job" row: "ready since T: STATUS"; "" when it said nothing.
func (l *leaderReport) jobText() string {
	var parts []string
	if l.JobReady != nil {
		parts = append(parts, "ready since "+l.JobReady.Format(time.RFC3339))
	}
	if l.JobStatus != "" {
		parts = append(parts, l.JobStatus)
	}
	return strings.Join(parts, ": ")
}
