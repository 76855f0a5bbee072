//go:build linux

package supervise

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/leaderrun/leaderrun/internal/clock"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/signals"
)

// HistoryConfig says what the supervisor writes to the key's run history
// (locker.History), off the renewal path: one record when a term's child
// has started, replaced by one after the term's release. Keep 0 writes
// nothing, as does a backend without History (DESIGN §5).
type HistoryConfig struct {
	// Keep is how many terms the key's history keeps (--history-keep).
	Keep int
	// ID names this leaderrun in the records (--id).
	ID string
	// Slot and Period describe a once-per run: its slot, and the
	// --once-per period when the slot is a period (zero for --run-id).
	Slot   string
	Period time.Duration
	// CatchUp marks the terms of a catch-up of Slot (--catch-up).
	CatchUp bool
}

// historyTimeout bounds each history write, on the supervisor's clock. A
// write that fails or takes longer is a warning and nothing else.
const historyTimeout = 3 * time.Second

// stopRequested is finish's reason when leaderrun itself was asked to stop.
const stopRequested = "leaderrun was asked to stop"

// historyWriter writes the records of one term.
type historyWriter struct {
	s     *Supervisor
	h     locker.History
	term  locker.Term
	start chan struct{} // closed once the start record's write is over

	// What the job said (said), written again while the term runs: at
	// most one update under way, none once the end record is due.
	mu       sync.Mutex
	updating bool
	last     time.Time // the last update's write
	done     chan struct{}
	updates  sync.WaitGroup
}

// historyUpdateEvery bounds how often a running term's record is written
// again for what its job said.
const historyUpdateEvery = 10 * time.Second

// newHistory returns the term's writer, or nil when history is off.
func (s *Supervisor) newHistory(lease locker.Lease) *historyWriter {
	c := s.cfg.History
	if c.Keep <= 0 {
		return nil
	}
	h, ok := locker.As[locker.History](s.cfg.Locker)
	if !ok {
		return nil
	}
	host, _ := os.Hostname()
	return &historyWriter{s: s, h: h, done: make(chan struct{}), term: locker.Term{
		Epoch: lease.Epoch(), ID: c.ID, Hostname: host, PID: os.Getpid(),
		Start: time.Now().UTC().Truncate(time.Millisecond), Slot: c.Slot, Period: c.Period, CatchUp: c.CatchUp,
	}}
}

// started writes the start record in the background, once the term's
// first child runs: the child never waits for it.
func (w *historyWriter) started() {
	if w == nil || w.start != nil {
		return
	}
	w.start = make(chan struct{})
	t := w.term
	if t.Slot != "" {
		t.SlotOutcome = locker.RunStarted
	}
	go func() {
		defer close(w.start)
		w.write(t, "start")
	}()
}

// ended writes the end record of a term whose child started, after the
// release: it waits for the start record's write (bounded) so that the end
// record is the one that stays. A term that ran no child (its slot already
// done, no guard, stopped first) writes nothing: retries would crowd the
// runs out of a bounded history.
func (w *historyWriter) ended(l *leadership) {
	if w == nil || w.start == nil {
		return
	}
	<-w.start
	// An update under way is written first, or given up: the end record
	// is the one that stays.
	w.mu.Lock()
	close(w.done)
	w.mu.Unlock()
	w.updates.Wait()
	t := w.term
	t.End = time.Now().UTC().Truncate(time.Millisecond)
	switch {
	case l.lost:
		t.Ended = locker.TermLost
	case l.handover:
		t.Ended = locker.TermStopped
	case l.endReason == stopRequested:
		t.Ended = locker.TermStopped
		if sig, ok := stopCause(l.ctx); ok {
			t.Reason = signals.Name(sig)
		}
	default:
		t.Ended = locker.TermExited
	}
	if t.Reason == "" && t.Ended != locker.TermExited {
		t.Reason = l.endReason
	}
	code := l.lastCode
	t.ExitCode = &code
	if t.Slot != "" {
		t.SlotOutcome = SlotFailed
		if l.succeeded {
			t.SlotOutcome = locker.RunSucceeded
		}
	}
	w.write(t, "end")
}

// said records what the running job said (its first READY=1, its last
// STATUS=) and writes the term's record again in the background, at most
// once per historyUpdateEvery, so that history and status show it while
// the term runs. Nothing waits for it.
func (w *historyWriter) said(ready time.Time, status string) {
	if w == nil || w.start == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !ready.IsZero() && w.term.Ready.IsZero() {
		w.term.Ready = ready.UTC().Truncate(time.Millisecond)
	}
	w.term.Status = status
	select {
	case <-w.done:
		return
	default:
	}
	if w.updating {
		return // the update under way takes this too
	}
	w.updating = true
	wait := time.Until(w.last.Add(historyUpdateEvery))
	w.updates.Add(1)
	go func() {
		defer w.updates.Done()
		<-w.start
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-w.done:
				t.Stop()
				return
			}
		}
		w.mu.Lock()
		t := w.term
		w.updating, w.last = false, time.Now()
		w.mu.Unlock()
		if t.Slot != "" {
			t.SlotOutcome = locker.RunStarted
		}
		w.write(t, "update")
	}()
}

// SlotFailed is the slot outcome of a once-per term whose child ran but
// did not succeed.
const SlotFailed = "failed"

func (w *historyWriter) write(t locker.Term, what string) {
	ctx, cancel := clock.WithTimeout(context.Background(), w.s.clock, historyTimeout)
	defer cancel()
	if err := w.h.RecordTerm(ctx, t, w.s.cfg.History.Keep); err != nil {
		msg := "cannot write the run history; the run goes on"
		if what == "end" {
			// Written after the release, as the term ends: nothing goes on.
			msg = "cannot write the run history; it shows this term without an end"
		}
		w.s.log.Warn(msg, "record", what, "epoch", t.Epoch, "error", err)
	}
}
