// Package retry paces repeated attempts: a doubling backoff and a sleep
// that ends early when its context does. The supervisor uses it for
// campaigns and restarts, the backends for their own reconnects; it keeps
// no deadline (that is package supervise's alone, DESIGN §1.2).
package retry

import (
	"context"
	"time"
)

// Backoff yields pauses that double from Min up to Max. The zero value of
// its state starts at Min; Reset starts over.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Next returns the next pause.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.Min
	} else {
		b.cur = min(2*b.cur, b.Max)
	}
	return b.cur
}

// Reset makes the next pause Min again.
func (b *Backoff) Reset() { b.cur = 0 }

// Clock is the time a backend core's rules run on (the queue's, the
// records'): RealClock, unless a test injects its own.
type Clock interface {
	Now() time.Time
	// Sleep pauses for d and reports true, or false as soon as ctx ends.
	Sleep(ctx context.Context, d time.Duration) bool
}

// RealClock is Clock on time.Now and Sleep.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// Sleep is the package's Sleep.
func (RealClock) Sleep(ctx context.Context, d time.Duration) bool { return Sleep(ctx, d) }

// Sleep pauses for d and reports true, or reports false as soon as ctx
// ends.
func Sleep(ctx context.Context, d time.Duration) bool { return SleepUnless(ctx, d, nil) }

// SleepUnless is Sleep cut short, reporting true, when woken closes (a nil
// woken never does).
func SleepUnless(ctx context.Context, d time.Duration, woken <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-woken:
	}
	return true
}

// Run measures a run of failures that come back to back. The zero value
// is no run.
type Run struct{ began time.Time }

// Again records a failure and reports whether another try fits: the run,
// counted from its first failure, has lasted less than limit and less
// than what ctx has left, so that a caller with a deadline gives up at the
// latest half way to it and keeps the other half for what it does next.
func (r *Run) Again(ctx context.Context, limit time.Duration) bool {
	if r.began.IsZero() {
		r.began = time.Now()
	}
	lasted := time.Since(r.began)
	if dl, ok := ctx.Deadline(); ok && lasted >= time.Until(dl) {
		return false
	}
	return lasted < limit
}

// Reset ends the run: a call succeeded.
func (r *Run) Reset() { r.began = time.Time{} }

// Logger is what SayFailure logs on (an hclog.Logger is one).
type Logger interface {
	Warn(msg string, args ...any)
	Info(msg string, args ...any)
}

// SayFailure logs err, the failure of an attempt that will be retried,
// with msg and args: at WARN when it is the first (prev nil) or differs
// from prev, the previous attempt's; at INFO when it is the same again.
// The same failure again is news for the journal, not a warning: -q
// shows warnings, and cron would mail one every retry of a long wait.
func SayFailure(log Logger, prev, err error, msg string, args ...any) {
	if prev != nil && err != nil && prev.Error() == err.Error() {
		log.Info(msg, args...)
		return
	}
	log.Warn(msg, args...)
}
