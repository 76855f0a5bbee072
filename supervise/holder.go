//go:build linux

package supervise

import (
	"context"
	"errors"
	"os"
	"sync"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/signals"
)

// holderWatch names, while a campaign waits, the holder it waits for: an
// INFO line "waiting for the holder" (id, host, pid, epoch) when the
// campaign starts and whenever the holder changes. The Locker interface has
// no change notification, so the holder is read with Locker.Leader once at
// the start and then every holderReread (or a TTL, or a renew interval,
// when longer): the line is news for a person, who can wait a minute for
// it, and a fleet of standbys would otherwise add one read each a TTL,
// landing in every failover, to what it costs the backend (DESIGN §5). The
// last error the read met is kept for an --acquire-timeout that passes
// (timedOut), and whether a holder was seen at all.
type holderWatch struct {
	mu      sync.Mutex
	seen    bool          // some holder was read during the campaign
	last    locker.Holder // the last one
	lastErr error         // the last failed read, nil after a good one
	stop    func()
}

// watchHolder starts the watch of one campaign; its stop waits until the
// watch is over. A single attempt (--no-wait) waits for no one: it names
// the holder in its own line, and no watch runs.
func (s *Supervisor) watchHolder(ctx context.Context) *holderWatch {
	w := &holderWatch{stop: func() {}}
	if _, ok := locker.As[locker.SingleAttempt](s.cfg.Locker); ok {
		return w
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	w.stop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		var last locker.Holder
		for {
			if h, ok := w.read(ctx, s.cfg.Locker); ok && (h.ID != last.ID || h.Epoch != last.Epoch) {
				last = h
				s.log.Info("waiting for the holder", holderFields(h, "host", h.Hostname, "pid", h.PID)...)
			}
			if !s.sleep(ctx, max(s.cfg.RenewInterval, s.cfg.TTL, holderReread)) {
				return
			}
		}
	}()
	return w
}

// read reads the holder once and reports whether it is another candidate.
func (w *holderWatch) read(ctx context.Context, lk locker.Locker) (locker.Holder, bool) {
	rctx, cancel := context.WithTimeout(ctx, holderReadTimeout)
	defer cancel()
	h, err := lk.Leader(rctx)
	if ctx.Err() != nil {
		return h, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil:
		w.lastErr = nil
	case errors.Is(err, locker.ErrNoLeader):
		w.lastErr = nil
		return h, false
	default:
		w.lastErr = err
		return h, false
	}
	if h.Hostname == hostname() && (h.PID == os.Getpid() || !signals.ProcessAlive(h.PID)) {
		// This campaign's own record, read as it won, or a dead one's
		// that the lock's new holder (maybe this campaign) has not
		// replaced yet.
		return h, false
	}
	w.seen, w.last = true, h
	return h, true
}

// result is what the watch saw: the last holder read, if one was, and the
// last read's error.
func (w *holderWatch) result() (last locker.Holder, seen bool, lastErr error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.seen, w.lastErr
}

var hostname = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

// holderFields are a log line's fields naming holder h, extra after its
// id, and its epoch only once it has one: a holder that took the lock and
// has no epoch granted yet (the local backend's pending record) reads as
// epoch 0, which no term has.
func holderFields(h locker.Holder, extra ...any) []any {
	f := append([]any{"holder", h.ID}, extra...)
	if h.Epoch != 0 {
		f = append(f, "epoch", h.Epoch)
	}
	return f
}
