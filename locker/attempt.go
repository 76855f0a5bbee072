package locker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// HeldError is the ErrHeld of a single attempt, naming who holds the key,
// so that a skipped run says in one line whom it yielded to.
type HeldError struct {
	Key    string
	Holder Holder // zero when the holder could not be read
}

// Error names the holder: id, host, pid, since when, epoch.
func (e *HeldError) Error() string {
	h := e.Holder
	if h.ID == "" {
		return fmt.Sprintf("key %q is held by another candidate", e.Key)
	}
	s := fmt.Sprintf("key %q is held by %s", e.Key, h.ID)
	if h.Hostname != "" {
		s += fmt.Sprintf(" (host %s, pid %d)", h.Hostname, h.PID)
	}
	if !h.AcquiredAt.IsZero() {
		s += " since " + h.AcquiredAt.UTC().Format(time.RFC3339)
	}
	if h.Epoch != 0 {
		s += fmt.Sprintf(", epoch %d", h.Epoch)
	}
	return s
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Unwrap() error { return ErrHeld }

// holderReadTimeout bounds the read that names the holder of a held key.
const holderReadTimeout = 2 * time.Second

// OneAttempt wraps a Locker whose Options.NoWait is set so that Acquire is
// one attempt in every case, not only when the key is held: it is bounded
// by timeout (the backend's dial timeout), and a backend that cannot be
// reached or fails is reported as an error wrapping ErrRefused that names
// addr, so the supervisor stops at once instead of retrying (exit 125). A
// held key is reported as a *HeldError naming the holder.
func OneAttempt(l Locker, key, addr string, timeout time.Duration) Locker {
	return oneAttempt{Locker: l, key: key, addr: addr, timeout: timeout}
}

// SingleAttempt is the capability of a Locker made by OneAttempt: its
// Acquire waits for no holder, so nothing is logged about one it waits for.
type SingleAttempt interface{ OneAttempt() }

type oneAttempt struct {
	Locker
	key, addr string
	timeout   time.Duration
}

// Acquire makes one attempt; see OneAttempt.
func (o oneAttempt) Acquire(ctx context.Context) (Lease, error) {
	actx, cancel := ctx, context.CancelFunc(func() {})
	if o.timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, o.timeout)
	}
	defer cancel()
	lease, err := o.Locker.Acquire(actx)
	switch {
	case err == nil, ctx.Err() != nil:
		return lease, err
	case errors.Is(err, ErrHeld):
		var he *HeldError
		if errors.As(err, &he) {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, holderReadTimeout)
		defer cancel()
		h, lerr := o.Locker.Leader(rctx)
		if lerr != nil {
			h = Holder{}
		}
		return nil, &HeldError{Key: o.key, Holder: h}
	case actx.Err() != nil:
		err = fmt.Errorf("no answer within %v: %w", o.timeout, err)
	}
	return nil, attemptError{addr: o.addr, err: err}
}

// OneAttempt marks the wrapper (SingleAttempt).
func (o oneAttempt) OneAttempt() {}

// Unwrap returns the wrapped Locker, so that As finds the capabilities
// (RunLog, HostLocal, ...) of the backend behind the wrapper.
func (o oneAttempt) Unwrap() Locker { return o.Locker }

// attemptError is a failed single attempt: it counts as ErrRefused (no
// retry, exit 125) without saying "refused" of a backend that never answered.
type attemptError struct {
	addr string
	err  error
}

func (e attemptError) Error() string {
	return "one attempt at " + e.addr + " failed, not retried: " + e.err.Error()
}
func (e attemptError) Unwrap() []error { return []error{ErrRefused, e.err} }

// Unreached reports whether err is a single attempt's failure that is no
// refusal by the backend (ACL, authentication, TLS): the backend could
// not be reached or did not answer. Such an error still wraps ErrRefused,
// so nothing retries it, but it is not to be logged as a refusal.
func Unreached(err error) bool {
	var ae attemptError
	return errors.As(err, &ae) && !errors.Is(ae.err, ErrRefused)
}
