//go:build linux

package supervise

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// historyLocker is a backend whose History is kept in memory; block, when
// set, holds every write until it is closed or the write's time is up, and
// fail makes every write fail.
type historyLocker struct {
	locker.Locker
	mu     sync.Mutex
	writes []locker.Term
	block  chan struct{}
	fail   bool
}

func (h *historyLocker) RecordTerm(ctx context.Context, t locker.Term, keep int) error {
	if h.block != nil {
		select {
		case <-h.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if h.fail {
		return errors.New("history store unreachable")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.writes = append(h.writes, t)
	return nil
}

func (h *historyLocker) Terms(context.Context, int) ([]locker.Term, error) { return nil, nil }

func (h *historyLocker) recorded() []locker.Term {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]locker.Term(nil), h.writes...)
}

func withHistory(h *historyLocker, c HistoryConfig) func(*Config) {
	return func(cfg *Config) {
		h.Locker = cfg.Locker
		cfg.Locker = h
		cfg.History = c
	}
}

// TestHistoryRecordsStartAndEnd: a once-per term whose child fails writes
// a start record (no end) and then an end record with the exit code, after
// the release.
func TestHistoryRecordsStartAndEnd(t *testing.T) {
	h := &historyLocker{}
	lease := newTestLease(7, 15*time.Second)
	clock, rec, done := harness(t, "exit 3", lease, withHistory(h, HistoryConfig{Keep: 5, ID: "me", Slot: "s1", Period: time.Hour}))
	if code := advanceUntilDone(t, clock, done, 100*time.Millisecond); code != 3 {
		t.Fatalf("exit code %d, want 3", code)
	}
	if _, ok := rec.find("released"); !ok {
		t.Fatal("not released")
	}
	w := h.recorded()
	if len(w) != 2 {
		t.Fatalf("%d history writes (%+v), want start and end", len(w), w)
	}
	start, end := w[0], w[1]
	if start.Epoch != 7 || !start.End.IsZero() || start.SlotOutcome != locker.RunStarted || start.ID != "me" || start.Period != time.Hour {
		t.Errorf("start record %+v", start)
	}
	if end.Epoch != 7 || end.End.IsZero() || end.Ended != locker.TermExited || end.ExitCode == nil || *end.ExitCode != 3 ||
		end.SlotOutcome != SlotFailed || !end.Start.Equal(start.Start) {
		t.Errorf("end record %+v", end)
	}
}

// TestHistoryMarksACatchUp: the terms of a catch-up say so, start and end.
func TestHistoryMarksACatchUp(t *testing.T) {
	h := &historyLocker{}
	lease := newTestLease(8, 15*time.Second)
	clock, _, done := harness(t, "exit 0", lease, withHistory(h, HistoryConfig{Keep: 5, ID: "me", Slot: "s0", Period: time.Hour, CatchUp: true}))
	if code := advanceUntilDone(t, clock, done, 100*time.Millisecond); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	w := h.recorded()
	if len(w) != 2 || !w[0].CatchUp || !w[1].CatchUp || w[1].Slot != "s0" || w[1].SlotOutcome != locker.RunSucceeded {
		t.Fatalf("history writes %+v, want a start and an end marked as a catch-up of s0", w)
	}
}

// TestHistoryRecordsLoss: a term stopped by a loss ends "lost" with the
// reason.
func TestHistoryRecordsLoss(t *testing.T) {
	h := &historyLocker{}
	lease := newTestLease(9, 15*time.Second)
	clock, _, done := harness(t, "sleep 1000", lease, withHistory(h, HistoryConfig{Keep: 5}))
	lease.markLost()
	if code := advanceUntilDone(t, clock, done, 100*time.Millisecond); code != ExitLost {
		t.Fatalf("exit code %d, want %d", code, ExitLost)
	}
	w := h.recorded()
	if len(w) != 2 || w[1].Ended != locker.TermLost || w[1].Reason == "" {
		t.Fatalf("history writes %+v, want a start and a lost end", w)
	}
}

// TestHistoryNeverDelaysNorFailsTheRun: a history store that hangs holds
// back neither the child's start nor the leader's loop (a loss is acted on
// at once), and one that fails changes neither the exit code nor the
// release.
func TestHistoryNeverDelaysNorFailsTheRun(t *testing.T) {
	h := &historyLocker{block: make(chan struct{})} // never closed
	lease := newTestLease(4, 15*time.Second)
	// harness returns once the child started: it did while the start
	// record's write hangs.
	clock, rec, done := harness(t, "sleep 1000", lease, withHistory(h, HistoryConfig{Keep: 5}))
	lost := time.Now()
	lease.markLost()
	waitUntil(t, "the stop signal", func() bool { return rec.count(syscall.SIGTERM.String()) > 0 })
	if d := time.Since(lost); d > time.Second {
		t.Errorf("the stop signal came %v after the loss while a history write hung", d)
	}
	// Steps of a second: the two hanging writes (start, then end) are given
	// up after historyTimeout each, on the fake clock, while the stopped
	// term's job poll keeps a timer due within every step.
	if code := advanceUntilDone(t, clock, done, time.Second); code != ExitLost {
		t.Fatalf("exit code %d with a hanging history, want %d", code, ExitLost)
	}
	select {
	case <-lease.released:
	default:
		t.Fatal("not released")
	}

	h = &historyLocker{fail: true}
	lease = newTestLease(5, 15*time.Second)
	clock, _, done = harness(t, "exit 2", lease, withHistory(h, HistoryConfig{Keep: 5}))
	if code := advanceUntilDone(t, clock, done, 100*time.Millisecond); code != 2 {
		t.Fatalf("exit code %d with a failing history, want the child's 2", code)
	}
}

// TestHistoryKeepZeroWritesNothing: --history-keep 0 turns history off.
func TestHistoryKeepZeroWritesNothing(t *testing.T) {
	h := &historyLocker{}
	clock, _, done := harness(t, "exit 0", newTestLease(2, 15*time.Second), withHistory(h, HistoryConfig{Keep: 0}))
	advanceUntilDone(t, clock, done, 100*time.Millisecond)
	if w := h.recorded(); len(w) != 0 {
		t.Fatalf("history written with keep 0: %+v", w)
	}
}
