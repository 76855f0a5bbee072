package locker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrNoRun is returned by RunLog lookups when no live record exists.
var ErrNoRun = errors.New("no run recorded")

// Outcomes a Run can record.
const (
	// RunSucceeded: the child exited 0 on its own in this slot.
	RunSucceeded = "succeeded"
	// RunStarted: the child was about to start (at-most-once mode).
	RunStarted = "started"
)

// Run is the record that a slot of a key was run, kept on the backend so
// that every candidate of the slot, on any host, can see it (once-per
// mode: `--once-per`, `--run-id`).
type Run struct {
	// Slot names the period or run: "2026-11-30T03:00:00Z", or a --run-id.
	Slot string `json:"slot"`
	// Outcome is RunSucceeded or RunStarted.
	Outcome string `json:"outcome"`
	// ID, Hostname and PID name the leaderrun that ran it; Epoch is its
	// leadership's epoch.
	ID       string `json:"id"`
	Hostname string `json:"hostname"`
	PID      int    `json:"pid"`
	Epoch    uint64 `json:"epoch"`
	// At is when the record was written, on the writer's wall clock (UTC).
	At time.Time `json:"at"`
	// Expires is when the record stops counting; a backend deletes it at
	// or after this time, on its own or at the latest on a later
	// RecordRun, and lookups never return it past this time.
	Expires time.Time `json:"expires"`
	// CatchUp marks a catch-up run (--catch-up): Slot is the missed
	// period it stood for, and the run happened after that period ended.
	// Absent from records of ordinary runs, so that releases that do not
	// know it read every record as before.
	CatchUp bool `json:"catch_up,omitempty"`
}

// RunLog is the once-per seam: the records of which slots already ran. A
// backend's Locker implements it next to Locker; the once-per gate finds it
// with RunLogOf, through any wrapper. Every implementation must pass the
// shared contract test, locker/lockertest.RunLogContract.
type RunLog interface {
	// RecordRun writes run under the key of run.Slot, replacing any record
	// of that slot, as one write conditioned on lease still leading the key
	// on the backend (etcd: a transaction on the election key's revision;
	// Consul: a transaction checking the lock's session; local: the flock
	// and the lock file still at its path). If the lease no longer leads,
	// nothing is written and the error wraps ErrLost. The record must be
	// durable (survive a backend restart or a reboot of the host) and
	// disappear by itself some time after run.Expires, so that records
	// do not pile up. lease is one this Locker's Acquire returned.
	RecordRun(ctx context.Context, lease Lease, run Run) error

	// LookupRun reads the record of slot with a linearizable read. It
	// returns an error wrapping ErrNoRun when there is none, or only an
	// expired one.
	LookupRun(ctx context.Context, slot string) (Run, error)

	// LatestRun returns the live record with the latest At among all
	// slots of the key, for `leaderrun status`; ErrNoRun when none.
	LatestRun(ctx context.Context) (Run, error)
}

// RunLogOf returns the RunLog of a backend, looking through wrappers such as
// OneAttempt: As[RunLog].
func RunLogOf(l Locker) (RunLog, bool) { return As[RunLog](l) }

// ValidateSlot checks a slot name (a --run-id): it starts with a letter or
// digit, uses only letters, digits and . _ : + -, at most 128 characters. It
// is used as a file name and a key segment, so it has no slash.
func ValidateSlot(slot string) error {
	if !simpleName(slot, "._:+-") {
		return fmt.Errorf("%q must match [A-Za-z0-9][A-Za-z0-9._:+-]{0,127}", slot)
	}
	return nil
}

// NewRun describes this process running slot under a leadership of epoch,
// the record to live for keep.
func NewRun(opts Options, slot, outcome string, epoch uint64, keep time.Duration) Run {
	host, _ := os.Hostname()
	now := time.Now().UTC().Truncate(time.Millisecond)
	return Run{Slot: slot, Outcome: outcome, ID: opts.ID, Hostname: host, PID: os.Getpid(),
		Epoch: epoch, At: now, Expires: now.Add(keep)}
}

// Live reports whether the record still counts at now.
func (r Run) Live(now time.Time) bool { return now.Before(r.Expires) }

// Record encodes the run as the value stored on the backend.
func (r Run) Record() []byte { return Encode(r, "run record") }

// ParseRun decodes a value written by Record.
func ParseRun(value []byte) (Run, error) {
	var r Run
	if err := json.Unmarshal(value, &r); err != nil || r.Slot == "" {
		return Run{}, fmt.Errorf("not a run record: %q", value)
	}
	return r, nil
}

// Describe is the run in words, for skip lines and status: "slot S ran on
// host H (id I, epoch E) at T".
func (r Run) Describe() string {
	verb := "ran"
	if r.Outcome == RunStarted {
		verb = "was started"
	}
	if r.CatchUp {
		verb += " as a catch-up"
	}
	return fmt.Sprintf("slot %s %s on host %s (id %s, pid %d, epoch %d) at %s",
		r.Slot, verb, r.Hostname, r.ID, r.PID, r.Epoch, r.At.UTC().Format(time.RFC3339))
}

// LatestOf picks the live run with the latest At; ErrNoRun when none.
// Backends that list their records use it for LatestRun.
func LatestOf(runs []Run, now time.Time) (Run, error) {
	var best Run
	for _, r := range runs {
		if r.Live(now) && (best.Slot == "" || r.At.After(best.At)) {
			best = r
		}
	}
	if best.Slot == "" {
		return Run{}, ErrNoRun
	}
	return best, nil
}
