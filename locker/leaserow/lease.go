package leaserow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// lease is one leadership of the key's row. It keeps no deadline: the
// supervisor times every renewal itself (DESIGN §1.2). Renew is not called
// concurrently; Release may be called from another goroutine.
type lease struct {
	l    *Locker
	term string

	mu       sync.Mutex
	row      Row   // as our last successful write left it
	tried    []Row // our writes since then whose answer never came
	released bool

	locker.LostSignal

	confirmed time.Time // the claim's send time, until Confirmation takes it
}

var (
	_ locker.Lease     = (*lease)(nil)
	_ locker.Confirmed = (*lease)(nil)
)

// Confirmation hands over the claim's send time, once: the claim wrote the
// whole row, as a renewal does, and was answered.
func (s *lease) Confirmation() (time.Time, time.Duration, bool) {
	sent := s.confirmed
	s.confirmed = time.Time{}
	return sent, s.l.opts.TTL, !sent.IsZero()
}

// Epoch is the epoch the store's counter gave our acquire.
func (s *lease) Epoch() uint64 { return s.row.Epoch }

// Handle names the key and our term; see Locker.ReleaseHandle.
func (s *lease) Handle() string { return handle(s.l.opts.Name(), s.term) }

// Renew makes one write of our row conditioned on every field of our own
// last successful write, and returns our TTL. It succeeds only when that
// write did. A conflict is read back: see the package comment.
func (s *lease) Renew(ctx context.Context) (time.Duration, error) {
	select {
	case <-s.Lost():
		return 0, fmt.Errorf("%s: renew: %w: %s", s.l.name, locker.ErrLost, s.LostReason())
	default:
	}
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return 0, fmt.Errorf("%s: renew: %w: the lease was released", s.l.name, locker.ErrLost)
	}
	prev, next := s.row, s.row
	s.mu.Unlock()
	next.Version, next.RenewedAt, next.HolderRecord = token(), time.Now().UTC(), ""

	err := s.l.store.Renew(ctx, prev, next)
	switch {
	case err == nil:
		s.mu.Lock()
		s.row, s.tried = next, nil
		s.mu.Unlock()
		return s.l.opts.TTL, nil
	case !errors.Is(err, ErrConflict):
		// The write may still have happened: remember it, so that the
		// conflict our next write meets is recognised as ours.
		s.mu.Lock()
		s.tried = append(s.tried, next)
		s.mu.Unlock()
		return 0, err
	}
	cur, err := s.l.store.Read(ctx)
	if err != nil && !errors.Is(err, ErrNoRow) {
		return 0, fmt.Errorf("%s: renew rolled back; reading the row back: %w", s.l.name, err)
	}
	if lost := s.check(cur, err == nil); lost != "" {
		s.markLost(lost)
		return 0, fmt.Errorf("%s: renew: %w: %s", s.l.name, locker.ErrLost, lost)
	}
	// One of our own writes whose answer got lost: adopt it. This attempt
	// still fails; the next one is conditioned on that version.
	s.mu.Lock()
	s.row, s.tried = cur, nil
	s.mu.Unlock()
	return 0, fmt.Errorf("%s: renew rolled back: an earlier renewal whose answer was lost had been written; adopted it, retrying", s.l.name)
}

// check says why the row as read (exists false: there is none) shows our
// leadership over; empty when it is exactly as one of our own writes
// left it.
func (s *lease) check(cur Row, exists bool) string {
	switch {
	case !exists:
		return "the lease row was deleted"
	case cur.Term == "":
		return "the lease row was released by someone else"
	case cur.Term != s.term:
		return fmt.Sprintf("the lease row was taken over by %q (epoch %d)", cur.Holder.ID, cur.Epoch)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ours := range append([]Row{s.row}, s.tried...) {
		if sameOwned(cur, ours) {
			return ""
		}
	}
	return "the lease row was written by someone else (edited by hand?): standbys now count from that write"
}

// sameOwned reports whether two rows agree on every field a holder owns:
// what its renewals are conditioned on.
func sameOwned(a, b Row) bool {
	return a.Term == b.Term && a.Contract == b.Contract && a.TTL == b.TTL && a.Epoch == b.Epoch &&
		a.Version == b.Version && a.StoredHolder() == b.StoredHolder()
}

// StoredHolder is the holder as a store keeps it: its record without the
// epoch, which the row keeps apart; empty for a free row.
func (r Row) StoredHolder() string {
	if r.Term == "" {
		return ""
	}
	h := r.Holder
	h.Epoch = 0
	return string(h.Record())
}

func (s *lease) markLost(reason string) {
	if s.Mark(reason) {
		s.l.log.Debug("leadership lost", "key", s.l.opts.Name(), "reason", reason)
	}
}

// Release frees the row with a clear conditioned on our last write (read
// back when that fails, and cleared only while it still carries our term,
// as read).
// No write of ours follows it.
func (s *lease) Release(ctx context.Context) error {
	s.mu.Lock()
	last, known := s.row, len(s.tried) == 0 // else our last write is not known: read it back
	s.released = true
	s.mu.Unlock()
	return s.l.clear(ctx, s.term, last, known)
}
