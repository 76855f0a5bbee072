package kubernetes

import (
	"errors"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

func TestHistoryContract(t *testing.T) {
	srv := startServer(t)
	lockertest.HistoryContract(t, func(t *testing.T, key string) locker.Locker {
		return srv.newLocker(t, key)
	})
}

// A record written while another candidate leads leaves the leadership
// Lease as it was (same resourceVersion: the holder's conditional renewals
// and the epoch depend on it), and the holder renews on; the history Lease
// is no key's Lease, not even that of "<key>-history" or "<key>.history".
func TestHistoryLeavesTheLeadershipLease(t *testing.T) {
	srv := startServer(t)
	key := lockertest.Key(t)
	writer := srv.newLocker(t, key)
	old := mustAcquire(t, writer)
	if err := old.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	holder := srv.newLocker(t, key)
	ls := mustAcquire(t, holder)
	before, err := holder.get(lockertest.Ctx(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	term := locker.Term{Epoch: old.Epoch(), ID: "writer", Start: time.Now().UTC().Truncate(time.Millisecond)}
	for range 3 {
		if err := writer.RecordTerm(lockertest.Ctx(t, 5*time.Second), term, 5); err != nil {
			t.Fatalf("RecordTerm: %v", err)
		}
	}
	after, err := holder.get(lockertest.Ctx(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("the leadership Lease went from resourceVersion %s to %s under its holder", before.ResourceVersion, after.ResourceVersion)
	}
	if _, ok := after.Annotations[annTerms]; ok {
		t.Fatal("the leadership Lease carries the history")
	}
	if _, err := ls.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
		t.Fatalf("Renew after history records: %v", err)
	}
	for _, other := range []string{key + "-history", key + ".history"} {
		var nu *locker.NeverUsedError
		if _, err := srv.newLocker(t, other).Leader(lockertest.Ctx(t, 5*time.Second)); !errors.As(err, &nu) {
			t.Errorf("Leader of %q after %q's history was written: %v, want never used", other, key, err)
		}
	}
}

// Writers that race on the history Lease (a term's holder and the next
// term's, a guard) all land: a conflict is read again and retried.
func TestHistoryConcurrentWriters(t *testing.T) {
	srv := startServer(t)
	key := lockertest.Key(t)
	const n = 6
	errs := make(chan error, n)
	for i := range n {
		l := srv.newLocker(t, key)
		go func() {
			errs <- l.RecordTerm(lockertest.Ctx(t, 10*time.Second), locker.Term{Epoch: uint64(100 + i), ID: "w"}, n)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("RecordTerm: %v", err)
		}
	}
	terms, err := srv.newLocker(t, key).Terms(lockertest.Ctx(t, 5*time.Second), 0)
	if err != nil || len(terms) != n {
		t.Fatalf("Terms after %d racing writers = %d terms, %v", n, len(terms), err)
	}
}
