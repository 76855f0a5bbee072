package lockertest

import (
	"errors"
	"testing"

	"github.com/leaderrun/leaderrun/locker"
)

// ControlApart checks, on a backend that keeps the control record beside
// a key's other records (lease rows, lock files), that the record stays
// out of everything else: with a record written for a key nothing used
// yet (through the key and through one of its slot keys), Leader still
// says never used and the key's history and run records are empty; a
// candidate still acquires the key and each slot, and Leader names it
// with the priority its Locker was built with (want); after release
// Leader says no leader; and the record, version and all, is what was
// written. newLocker builds Lockers of that priority.
func ControlApart(t *testing.T, newLocker NewLocker, wantPriority int) {
	key := Key(t)
	slot := locker.SlotKey(key, 1)
	c := controls(t, newLocker(t, slot))
	rec := sampleControl(key)
	v, err := c.SetControl(ctx(t), rec)
	if err != nil {
		t.Fatalf("SetControl on a key never used: %v", err)
	}
	rec.Version = v
	for _, name := range []string{key, slot} {
		l := newLocker(t, name)
		if _, err := l.Leader(ctx(t)); !errors.Is(err, locker.ErrNeverUsed) {
			t.Fatalf("Leader of %s with only a control record = %v, want ErrNeverUsed", name, err)
		}
		if h, ok := locker.As[locker.History](l); ok {
			if terms, err := h.Terms(ctx(t), 0); err != nil || len(terms) != 0 {
				t.Fatalf("Terms of %s with only a control record = %+v, %v; want none", name, terms, err)
			}
		}
		if rl, ok := locker.RunLogOf(l); ok {
			if r, err := rl.LatestRun(ctx(t)); !errors.Is(err, locker.ErrNoRun) {
				t.Fatalf("LatestRun of %s with only a control record = %+v, %v; want ErrNoRun", name, r, err)
			}
		}
		lease := acquire(t, l)
		if _, err := lease.Renew(ctx(t)); err != nil {
			t.Fatalf("Renew of %s: %v", name, err)
		}
		h, err := newLocker(t, name).Leader(ctx(t))
		if err != nil || h.Epoch != lease.Epoch() || h.Priority != wantPriority {
			t.Fatalf("Leader of %s = %+v, %v; want epoch %d, priority %d", name, h, err, lease.Epoch(), wantPriority)
		}
		if err := lease.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := newLocker(t, name).Leader(ctx(t)); !errors.Is(err, locker.ErrNoLeader) || errors.Is(err, locker.ErrNeverUsed) {
			t.Fatalf("Leader of %s after a release = %v, want ErrNoLeader only", name, err)
		}
	}
	got, err := controls(t, newLocker(t, key)).Control(ctx(t))
	if err != nil || !sameControl(got, rec) {
		t.Fatalf("the control record after the leases = %s at %q, %v; want %s at %q", got.Record(), got.Version, err, rec.Record(), v)
	}
}
