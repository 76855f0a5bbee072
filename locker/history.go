package locker

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// How a term ended, as History records it (Term.Ended).
const (
	// TermExited: the child exited on its own (Term.ExitCode says how) and
	// leaderrun released the key.
	TermExited = "exited"
	// TermStopped: leaderrun stopped the child on a signal of its own
	// (SIGTERM from systemd, Ctrl-C) and released the key.
	TermStopped = "stopped"
	// TermLost: leadership was lost or could not be confirmed in time; the
	// child was stopped by the deadline (DESIGN §1.3).
	TermLost = "lost"
	// TermReleased: the term ended without a child to stop (a once-per
	// slot that had already run, or the child was never started).
	TermReleased = "released"
)

// DefaultHistoryKeep is how many terms a key's history keeps when the
// operator does not choose (--history-keep).
const DefaultHistoryKeep = 30

// Term is one leadership of a key as its history keeps it: written by the
// holder when the term begins (End zero) and again when it ends. A term
// whose holder died without writing its end keeps a zero End; the next
// term's Start bounds it.
type Term struct {
	Epoch    uint64    `json:"epoch"`
	ID       string    `json:"id"`
	Hostname string    `json:"hostname"`
	PID      int       `json:"pid"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end,omitzero"`
	// Ended is one of the Term* constants; empty while End is zero.
	Ended string `json:"ended,omitempty"`
	// ExitCode is the child's last status as a shell reports it (128+N
	// for signal N), when a child ran in the term.
	ExitCode *int `json:"exit_code,omitempty"`
	// Reason is a short free text: the loss's reason, the signal.
	Reason string `json:"reason,omitempty"`
	// Slot, SlotOutcome and Period describe a once-per run: the slot the
	// term ran (or skipped), its outcome (a Run* constant, or "skipped"),
	// and the --once-per period (zero for --run-id), from which a reader
	// tells which slots between two recorded ones nobody ran.
	Slot        string        `json:"slot,omitempty"`
	SlotOutcome string        `json:"slot_outcome,omitempty"`
	Period      time.Duration `json:"period,omitempty"`
	// CatchUp marks a term that ran Slot after its period had ended, as a
	// catch-up of a missed period (--catch-up). Absent otherwise, so that
	// older releases read the record as before.
	CatchUp bool `json:"catch_up,omitempty"`
	// Ready is when the term's job first sent READY=1 to its notify
	// socket, and Status its last STATUS= text; both absent when it sent
	// none (and from older releases).
	Ready  time.Time `json:"ready,omitzero"`
	Status string    `json:"status,omitempty"`
}

// History is the run history of a key kept on the backend: the last terms,
// bounded. A backend's Locker implements it next to Locker; find it with
// As[History]. Every implementation must pass
// locker/lockertest.HistoryContract.
type History interface {
	// RecordTerm creates or replaces the record of term.Epoch and prunes
	// the key's history to its newest keep terms (by epoch). It is one
	// write that needs no lease: only the holder of an epoch (or its guard)
	// writes that epoch's record, before and after its release. It is
	// never called on the renewal path, but may run concurrently with the
	// term's Lease.Renew (the start record is written in the background).
	RecordTerm(ctx context.Context, term Term, keep int) error

	// Terms returns up to limit terms of the key (limit <= 0: all kept),
	// newest (highest epoch) first, with a linearizable read where the
	// backend has one. A key with no history gives an empty slice.
	Terms(ctx context.Context, limit int) ([]Term, error)
}

// Record encodes the term as the value stored on the backend.
func (t Term) Record() []byte { return Encode(t, "term record") }

// ParseTerm decodes a value written by Record.
func ParseTerm(value []byte) (Term, error) {
	var t Term
	if err := json.Unmarshal(value, &t); err != nil || t.Epoch == 0 {
		return Term{}, fmt.Errorf("not a term record: %q", value)
	}
	return t, nil
}

// TermName is the name under which a backend stores the record of epoch:
// zero-padded so that names sort as epochs do.
func TermName(epoch uint64) string { return fmt.Sprintf("%020d", epoch) }

// NewestTerms sorts terms newest first and cuts them to limit (limit <= 0:
// all). Backends that list their records use it for Terms.
func NewestTerms(terms []Term, limit int) []Term {
	sort.Slice(terms, func(i, j int) bool { return terms[i].Epoch > terms[j].Epoch })
	if limit > 0 && len(terms) > limit {
		terms = terms[:limit]
	}
	return terms
}

// Pruned returns the epochs of terms beyond the newest keep, to delete.
func Pruned(terms []Term, keep int) []uint64 {
	if keep <= 0 {
		keep = DefaultHistoryKeep
	}
	sorted := NewestTerms(append([]Term(nil), terms...), 0)
	var out []uint64
	for _, t := range sorted[min(keep, len(sorted)):] {
		out = append(out, t.Epoch)
	}
	return out
}
