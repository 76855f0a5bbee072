package lockertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// Lock is what LockContract needs of a backend on its real server.
type Lock struct {
	// New builds a fresh candidate for key (its own client, its own ID
	// where the backend's tests give one), with Options.NoWait set to
	// noWait, closed when the test ends.
	New func(t *testing.T, key string, noWait bool) locker.Locker

	// Delete, when set, deletes the record by which holder's lease held
	// leads key, by hand, as an operator would (the key, the lock file,
	// the row, the item, the Lease object, the candidates' znodes). Nil
	// skips the hand-delete case.
	Delete func(t *testing.T, key string, holder locker.Locker, held locker.Lease)

	// LostWithin bounds how long after the hand delete the holder's
	// lease may take to report the loss; 0 means 30s.
	LostWithin time.Duration
}

// LockContract checks a backend's core promises on observable outcomes
// (DESIGN §1.1): while one candidate holds a key a single attempt
// (NoWait) of another gets ErrHeld and no lease, and a waiting one gets
// nothing; a release lets a waiting candidate lead, with a higher epoch,
// and the epoch grows again when the first leads anew; and after the
// key is deleted by hand the holder's lease reports the loss (Lost
// closed, or a Renew that says ErrLost), and the next leader's epoch is
// still higher. Each case uses its own key; deadlines are generous and
// nothing is asserted on timing.
func LockContract(t *testing.T, b Lock) {
	lostWithin := b.LostWithin
	if lostWithin == 0 {
		lostWithin = 30 * time.Second
	}
	t.Run("two holders exclude each other", func(t *testing.T) {
		key := Key(t)
		held := MustAcquire(t, b.New(t, key, false))
		ls, err := b.New(t, key, true).Acquire(Ctx(t, 20*time.Second))
		if err == nil || ls != nil {
			if ls != nil {
				Release(ls)
			}
			t.Fatalf("a single attempt while another holds = %v, %v; want ErrHeld and no lease", ls, err)
		}
		if !errors.Is(err, locker.ErrHeld) {
			t.Fatalf("a single attempt while another holds: %v, want ErrHeld", err)
		}
		// A waiting candidate gets nothing while the holder renews.
		waiting, cancel := context.WithCancel(context.Background())
		got := AcquireAsync(t, waiting, b.New(t, key, false))
		for range 3 {
			if _, err := held.Renew(Ctx(t, 10*time.Second)); err != nil {
				cancel()
				t.Fatalf("the holder's Renew while others try: %v", err)
			}
			select {
			case r := <-got:
				cancel()
				t.Fatalf("a waiting candidate returned while another holds: %+v", r)
			case <-time.After(300 * time.Millisecond):
			}
		}
		cancel()
		if r := <-got; r.Err == nil || r.Lease != nil {
			t.Fatalf("a cancelled wait while another holds = %+v; want an error and no lease", r)
		}
		if testsupport.IsClosed(held.Lost()) {
			t.Fatalf("the holder lost its lease to others' attempts: %s", held.LostReason())
		}
	})
	t.Run("release lets another lead, epochs grow", func(t *testing.T) {
		key := Key(t)
		first := b.New(t, key, false)
		a := MustAcquire(t, first)
		got := AcquireAsync(t, Ctx(t, 60*time.Second), b.New(t, key, false))
		if _, err := a.Renew(Ctx(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			t.Fatalf("the waiting candidate returned before the release: %+v", r)
		default:
		}
		if err := a.Release(Ctx(t, 10*time.Second)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		r := <-got
		if r.Err != nil {
			t.Fatalf("the waiting candidate after the release: %v", r.Err)
		}
		if r.Lease.Epoch() <= a.Epoch() {
			t.Fatalf("epoch %d after a release of epoch %d, want strictly greater", r.Lease.Epoch(), a.Epoch())
		}
		if err := r.Lease.Release(Ctx(t, 10*time.Second)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		again := MustAcquire(t, first)
		if again.Epoch() <= r.Lease.Epoch() {
			t.Fatalf("epoch %d on re-acquiring after epoch %d, want strictly greater", again.Epoch(), r.Lease.Epoch())
		}
	})
	t.Run("a hand delete is a loss", func(t *testing.T) {
		if b.Delete == nil {
			t.Skip("the backend's test harness deletes nothing by hand")
		}
		key := Key(t)
		holder := b.New(t, key, false)
		held := MustAcquire(t, holder)
		b.Delete(t, key, holder, held)
		var renewed time.Time
		testsupport.WaitFor(t, lostWithin, "the holder's lease to report the hand delete", func() bool {
			if testsupport.IsClosed(held.Lost()) {
				return true
			}
			if time.Since(renewed) < 200*time.Millisecond {
				return false
			}
			renewed = time.Now()
			_, err := held.Renew(Ctx(t, 10*time.Second))
			return errors.Is(err, locker.ErrLost)
		})
		// The supervisor releases once the job is gone; the next leader's
		// epoch is above the deleted one's.
		Release(held)
		next := MustAcquireWithin(t, b.New(t, key, false), 60*time.Second)
		if next.Epoch() <= held.Epoch() {
			t.Fatalf("epoch %d after the key of epoch %d was deleted by hand, want strictly greater", next.Epoch(), held.Epoch())
		}
	})
}
