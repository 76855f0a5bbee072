// Package rowtest holds the lease-row backends' shared tests of hand
// edits (DESIGN §1.12, "hand edits"), run by each backend on its real
// server.
package rowtest

import (
	"errors"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

// The hand edits Edit must make, the way an operator makes them: plain
// SQL, a raw DeleteItem or UpdateItem, the version left as it was.
const (
	Delete   = "delete"    // the row removed
	Empty    = "empty"     // term and holder set empty
	LowerTTL = "lower-ttl" // the TTL set to 100ms
)

// Edits are the hand edits, in the order HandEdits runs them.
var Edits = []string{Delete, Empty, LowerTTL}

// HandEdits checks, for each hand edit of a held row, that a waiting
// standby takes the key no earlier than the holder's TTL after the edit
// (it cannot have seen the edit before it was made, so a takeover sooner
// than TTL after it would be sooner than TTL after the holder's last
// renewal too, which may have come just before the edit), that the
// holder's next renewal is a loss, and that the epoch grows. open returns
// a candidate for key with the given TTL; edit makes the edit of key's
// row (noWait: a single attempt, Options.NoWait). Then it checks that a
// release is told apart from a hand edit.
func HandEdits(t *testing.T, ttl time.Duration, open func(t *testing.T, key string, noWait bool) locker.Locker, edit func(t *testing.T, key, kind string)) {
	for _, kind := range Edits {
		t.Run(kind, func(t *testing.T) {
			key := lockertest.Key(t)
			holder := lockertest.MustAcquire(t, open(t, key, false))
			got := lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), open(t, key, false))
			time.Sleep(ttl / 4) // the standby has seen the live holder
			select {
			case r := <-got:
				t.Fatalf("the standby took a live holder's key: %+v", r)
			default:
			}
			edited := time.Now()
			edit(t, key, kind)
			var r lockertest.Acquired
			select {
			case r = <-got:
			case <-time.After(4*ttl + 10*time.Second):
				t.Fatal("the standby never took the key after the edit")
			}
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			defer lockertest.Release(r.Lease)
			if after := r.At.Sub(edited); after < ttl {
				t.Fatalf("the standby took the key %v after the %s edit, before the holder's TTL %v", after, kind, ttl)
			}
			if _, err := holder.Renew(lockertest.Ctx(t, 10*time.Second)); !errors.Is(err, locker.ErrLost) {
				t.Fatalf("the holder's renewal after the %s edit: %v, want ErrLost", kind, err)
			}
			if r.Lease.Epoch() <= holder.Epoch() {
				t.Fatalf("epoch %d after %d", r.Lease.Epoch(), holder.Epoch())
			}
		})
	}
	t.Run("release", func(t *testing.T) {
		// A single attempt, which never waits, takes a released key; it
		// gives up on a row edited by hand.
		key := lockertest.Key(t)
		holder := lockertest.MustAcquire(t, open(t, key, false))
		if err := holder.Release(lockertest.Ctx(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		once := open(t, key, true)
		lockertest.MustAcquire(t, once)
		key2 := key + "-edited"
		lockertest.MustAcquire(t, open(t, key2, false))
		edit(t, key2, Empty)
		if _, err := open(t, key2, true).Acquire(lockertest.Ctx(t, 10*time.Second)); !errors.Is(err, locker.ErrHeld) {
			t.Fatalf("a single attempt on a row emptied by hand: %v, want ErrHeld", err)
		}
	})
}
