// Package observe decides when a standby may take a key over from a holder
// that stopped renewing, using nothing but the standby's own monotonic clock
// (DESIGN §1.12, "observer-clock takeover").
//
// It serves backends whose holder record can be written conditionally and
// read by everyone: a Kubernetes Lease (no server-side expiry at all) and a
// Consul heartbeat key (to fail over in one TTL instead of waiting for the
// session to be invalidated and the lock-delay to pass).
//
// # The contract
//
// A holder that follows it (its record carries Contract and its TTL):
//
//   - renews with a write conditioned on the version it last wrote, so every
//     successful renewal changes the version everyone can read;
//   - counts its deadline from the send time of its last successful write:
//     deadline = send + TTL, and its job is dead by deadline - margin
//     (DESIGN §1.2-1.3), whatever its backend says.
//
// A standby observes the record and notes, on its own monotonic clock, when
// it first saw the current version. Once it has seen that version unchanged
// for TTL + Allowance(TTL), it may take over with a write conditioned on that
// same version.
//
// # Why the old job is dead when the takeover write succeeds
//
// Let W be the holder's write that produced version v, sent at time s. The
// standby cannot see v before W was sent, so it first saw v at f >= s. The
// takeover write is conditioned on v, so it succeeds only if no later write
// of the holder succeeded: the holder's last successful renewal is W, and its
// deadline is s + TTL by the holder's clock. The standby writes no earlier
// than f + TTL + Allowance(TTL) by its own clock. With both clocks' rates
// within ±rho of true time, the holder's TTL lasts at most TTL*(1+rho) and the
// standby's wait at least (TTL+A)*(1-rho), which is later as long as
// A >= 2*rho*TTL/(1-rho). Allowance gives A = TTL/20 (at least 250ms): it
// covers a rate difference of up to 2.5% between the two hosts, about a
// hundred times what an unsynchronised quartz oscillator drifts; on top of it
// the holder kills its job a safety margin before its deadline.
//
// What this cannot cover: a holder whose whole host (or VM) is paused past
// the TTL runs its job again for a moment when it resumes, before its own
// deadline check stops it. Only fencing with the epoch protects against that
// (DESIGN §1, last paragraph).
package observe

import (
	"sync"
	"time"
)

// Contract is the value a holder's record carries to declare that it follows
// the observer-clock contract. A standby takes over only holders whose record
// declares it; any other holder (an older leaderrun, another tool) is waited
// out as the backend's own expiry rules say.
const Contract = "observer-clock/1"

// minAllowance is the smallest drift allowance: it also absorbs the
// scheduling delay between a read and the standby noting it.
const minAllowance = 250 * time.Millisecond

// Allowance is the drift allowance a standby adds to the holder's TTL before
// it may take over; see the package comment for the reasoning.
func Allowance(ttl time.Duration) time.Duration {
	return max(ttl/20, minAllowance)
}

// Watch tracks one holder's record as a standby sees it. The zero value is
// ready to use with the real monotonic clock. It is safe for concurrent use.
type Watch struct {
	// Now, when set, replaces time.Now (tests inject a fake clock). It must
	// be monotonic.
	Now func() time.Time

	mu      sync.Mutex
	known   bool
	version string
	ttl     time.Duration
	since   time.Time
}

func (w *Watch) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// Observe records that the holder's record was just read with the given
// version and declared TTL. A new version, or a changed TTL, starts the wait
// over; the same version read again changes nothing. Call it with every
// read, before asking Due.
func (w *Watch) Observe(version string, ttl time.Duration) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.known && w.version == version && w.ttl == ttl {
		return
	}
	w.known, w.version, w.ttl, w.since = true, version, ttl, now
}

// Reset forgets the holder: the key became free, or holds a record that does
// not follow the contract.
func (w *Watch) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.known, w.version, w.ttl, w.since = false, "", 0, time.Time{}
}

// Due reports the version a takeover write must be conditioned on and how
// long the standby must still wait before it may send it (zero or less: it
// may now). ok is false when no holder has been observed.
func (w *Watch) Due() (version string, wait time.Duration, ok bool) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.known {
		return "", 0, false
	}
	at := w.since.Add(w.ttl + Allowance(w.ttl))
	return w.version, at.Sub(now), true
}
