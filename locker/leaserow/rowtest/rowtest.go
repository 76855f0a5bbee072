// Package rowtest holds the lease-row backends' shared tests, run by each
// backend on its real server: hand edits (DESIGN §1.12, "hand edits") and
// the scenarios of ServerContract.
package rowtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/observe"
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

// The fields of a row its holder owns, as StoreEdits edits them one by
// one.
const (
	FieldTTL      = "ttl"
	FieldTerm     = "term"
	FieldHolder   = "holder"
	FieldContract = "contract"
	FieldEpoch    = "epoch"
)

// Fields are the owned fields, in the order StoreEdits edits them.
var Fields = []string{FieldTTL, FieldTerm, FieldHolder, FieldContract, FieldEpoch}

// TracedStore is a lease-row store that tells whether a deleted row's key
// was ever held.
type TracedStore interface {
	leaserow.Store
	leaserow.Tracer
}

// StoreEdits is the stores' contract for hand edits, run on the real
// server: a renewal or release conditioned on the row as its holder wrote
// it fails once any field it owns was edited with the version left as it
// was (field sets that field of st's row to another value: the TTL to
// 100ms, the texts empty, the epoch one higher); a release marks the row
// released and keeps its epoch; and a key whose row was deleted (del)
// shows a trace once trace has written what a used key keeps beside its
// row (nothing where the store needs nothing).
func StoreEdits(t *testing.T, st TracedStore, field func(t *testing.T, name string), del func(t *testing.T), trace func(t *testing.T, epoch uint64)) {
	ctx := func() context.Context { return lockertest.Ctx(t, 10*time.Second) }
	row := leaserow.Row{Term: "t1", Holder: locker.Holder{ID: "a"}, Contract: observe.Contract, TTL: time.Second, Version: "v1", RenewedAt: time.Now()}
	if traced, err := st.Traced(ctx()); err != nil || traced {
		t.Fatalf("Traced on a fresh key = %v, %v", traced, err)
	}
	var err error
	if row.Epoch, err = st.Create(ctx(), row); err != nil {
		t.Fatal(err)
	}
	next := row
	next.Version = "v2"
	for _, name := range Fields {
		field(t, name)
		if err := st.Renew(ctx(), row, next); !errors.Is(err, leaserow.ErrConflict) {
			t.Fatalf("Renew after %s was edited: %v, want ErrConflict", name, err)
		}
		if err := st.Clear(ctx(), row, "v3"); !errors.Is(err, leaserow.ErrConflict) {
			t.Fatalf("Clear after %s was edited: %v, want ErrConflict", name, err)
		}
		// Put the row back as the holder wrote it.
		del(t)
		if row.Epoch, err = st.Create(ctx(), row); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Renew(ctx(), row, next); err != nil {
		t.Fatalf("Renew of the row as written: %v", err)
	}
	got, err := st.Read(ctx())
	if err != nil || got.Version != "v2" {
		t.Fatalf("Read = %+v, %v", got, err)
	}
	// A row read back conditions as well as one written.
	if err := st.Clear(ctx(), got, "v3"); err != nil {
		t.Fatal(err)
	}
	got, err = st.Read(ctx())
	if err != nil || got.Term != "" || got.Contract != leaserow.Released || got.Version != "v3" || got.Epoch != row.Epoch {
		t.Fatalf("after Clear: %+v, %v; want a released row with the epoch %d", got, err, row.Epoch)
	}
	del(t)
	trace(t, row.Epoch)
	if traced, err := st.Traced(ctx()); err != nil || !traced {
		t.Fatalf("Traced on a deleted row of a used key = %v, %v", traced, err)
	}
}
