package kubernetes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestLease runs the backend's tests against one shared kube-apiserver;
// each subtest uses its own key.
func TestLease(t *testing.T) {
	srv := startServer(t)

	// The first candidate creates the Lease; its epoch is the create's
	// resourceVersion, and status reads holder and epoch back.
	t.Run("AcquireAndLeader", func(t *testing.T) {
		l := srv.newLocker(t, lockertest.Key(t))
		lease := mustAcquire(t, l)
		if lease.Epoch() == 0 {
			t.Fatal("epoch 0")
		}
		h, err := l.Leader(lockertest.Ctx(t, 5*time.Second))
		if err != nil {
			t.Fatalf("Leader: %v", err)
		}
		if h.ID != l.opts.ID || h.Epoch != lease.Epoch() || h.PID == 0 || h.Hostname == "" || h.LeaseRemaining <= 0 {
			t.Fatalf("Leader = %+v, want ID %s epoch %d with pid, host and time left", h, l.opts.ID, lease.Epoch())
		}
		ls, err := l.client.Get(lockertest.Ctx(t, 5*time.Second), l.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ls.Annotations[annContract] != observe.Contract || ls.Annotations[annKey] != l.opts.Key || *ls.Spec.LeaseDurationSeconds != 2 {
			t.Fatalf("Lease does not carry the holder record: %+v", ls)
		}
	})

	// Release hands over at once to a waiting candidate, with a higher
	// epoch.
	t.Run("HandOverOnRelease", func(t *testing.T) {
		key := lockertest.Key(t)
		a := mustAcquire(t, srv.newLocker(t, key))
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), srv.newLocker(t, key))
		time.Sleep(300 * time.Millisecond) // let b watch
		select {
		case r := <-ch:
			t.Fatalf("second candidate acquired while the first held the Lease: %+v", r)
		default:
		}
		released := time.Now()
		lockertest.Release(a)
		r := <-ch
		if r.Err != nil {
			t.Fatalf("second Acquire: %v", r.Err)
		}
		if d := r.At.Sub(released); d > 2*time.Second {
			t.Errorf("hand-over took %v after release, want it at once", d)
		}
		if r.Lease.Epoch() <= a.Epoch() {
			t.Fatalf("epoch %d after hand-over, want > %d", r.Lease.Epoch(), a.Epoch())
		}
	})

	// Cancelling a waiting Acquire returns promptly.
	t.Run("CancelWhileWaiting", func(t *testing.T) {
		key := lockertest.Key(t)
		mustAcquire(t, srv.newLocker(t, key))
		ctx, cancel := context.WithCancel(context.Background())
		ch := lockertest.AcquireAsync(t, ctx, srv.newLocker(t, key))
		time.Sleep(300 * time.Millisecond)
		cancelled := time.Now()
		cancel()
		select {
		case r := <-ch:
			if !errors.Is(r.Err, context.Canceled) {
				t.Fatalf("Acquire = %v, want context.Canceled", r.Err)
			}
			if d := r.At.Sub(cancelled); d > time.Second {
				t.Errorf("Acquire returned %v after cancel", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Acquire still waiting 5s after cancel")
		}
	})

	// Deleting the Lease by hand closes Lost and makes Renew report the
	// loss; a Lease created again gives a higher epoch, although
	// leaseTransitions starts over.
	t.Run("DeletedByHandAndRecreated", func(t *testing.T) {
		key := lockertest.Key(t)
		l := srv.newLocker(t, key)
		a := mustAcquire(t, l)
		if err := l.client.Delete(lockertest.Ctx(t, 5*time.Second), l.name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		select {
		case <-a.Lost():
			if !strings.Contains(a.LostReason(), "deleted") {
				t.Errorf("LostReason = %q, want it to say the Lease was deleted", a.LostReason())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Lost still open 5s after the Lease was deleted")
		}
		if _, err := a.Renew(lockertest.Ctx(t, 5*time.Second)); !errors.Is(err, locker.ErrLost) {
			t.Fatalf("Renew after delete = %v, want ErrLost", err)
		}
		b := mustAcquire(t, srv.newLocker(t, key))
		if b.Epoch() <= a.Epoch() {
			t.Fatalf("epoch %d after the Lease was re-created, want > %d", b.Epoch(), a.Epoch())
		}
		ls, err := l.client.Get(lockertest.Ctx(t, 5*time.Second), l.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := ls.Spec.LeaseTransitions; n == nil || *n != 0 {
			t.Logf("leaseTransitions = %v", n)
		}
	})

	// Renew's own round trip reports a Lease deleted behind its back as
	// lost, even with the watch stopped.
	t.Run("RenewSeesDelete", func(t *testing.T) {
		l := srv.newLocker(t, lockertest.Key(t))
		a := mustAcquire(t, l).(*lease)
		a.stopWatch()
		<-a.watchDone
		if err := l.client.Delete(lockertest.Ctx(t, 5*time.Second), l.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Renew(lockertest.Ctx(t, 5*time.Second)); !errors.Is(err, locker.ErrLost) {
			t.Fatalf("Renew = %v, want ErrLost", err)
		}
	})

	// A holder that stops renewing is taken over by observation: never
	// before its last renewal's send time + TTL, and soon after TTL plus
	// the allowance. The old holder then sees the takeover.
	t.Run("TakeOverSilentHolder", func(t *testing.T) {
		key := lockertest.Key(t)
		a := mustAcquire(t, srv.newLocker(t, key))
		b := srv.newLocker(t, key)
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 60*time.Second), b)
		// a renews for three TTLs: b must not take over meanwhile.
		var lastSent time.Time
		for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			sent := time.Now()
			if _, err := a.Renew(lockertest.Ctx(t, 2*time.Second)); err != nil {
				t.Fatalf("Renew: %v", err)
			}
			lastSent = sent
			select {
			case r := <-ch:
				t.Fatalf("standby took over a renewing holder: %+v", r)
			default:
			}
		}
		r := <-ch
		if r.Err != nil {
			t.Fatalf("standby Acquire: %v", r.Err)
		}
		ttl := 2 * time.Second
		waited := r.At.Sub(lastSent)
		t.Logf("taken over %v after the last renewal was sent (TTL %v, allowance %v)", waited, ttl, observe.Allowance(ttl))
		if waited < ttl {
			t.Fatalf("taken over %v after the holder's last renewal, before its TTL of %v", waited, ttl)
		}
		if waited > ttl+observe.Allowance(ttl)+5*time.Second {
			t.Errorf("takeover took %v", waited)
		}
		if r.Lease.Epoch() <= a.Epoch() {
			t.Fatalf("epoch %d after takeover, want > %d", r.Lease.Epoch(), a.Epoch())
		}
		select {
		case <-a.Lost():
			t.Logf("old holder: %s", a.LostReason())
		case <-time.After(5 * time.Second):
			t.Fatal("old holder's Lost still open 5s after the takeover")
		}
		if _, err := a.Renew(lockertest.Ctx(t, 5*time.Second)); !errors.Is(err, locker.ErrLost) {
			t.Fatalf("old holder's Renew = %v, want ErrLost", err)
		}
	})

	// A Lease held by something that does not declare the observer-clock
	// contract (another tool) is never taken over by observation.
	t.Run("ForeignHolderNotTakenOver", func(t *testing.T) {
		l := srv.newLocker(t, lockertest.Key(t))
		id, secs := "other-tool", int32(1)
		old := metav1.NewMicroTime(time.Now().Add(-time.Hour))
		_, err := l.client.Create(lockertest.Ctx(t, 5*time.Second), &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: l.name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, RenewTime: &old},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Acquire(lockertest.Ctx(t, 4*time.Second))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire over a foreign holder = %v, want it still waiting at the deadline", err)
		}
		if _, err := srv.newLocker(t, l.opts.Key, func(c *Config) { c.NoWait = true }).Acquire(lockertest.Ctx(t, 4*time.Second)); !errors.Is(err, locker.ErrHeld) {
			t.Fatalf("NoWait over a foreign holder = %v, want ErrHeld", err)
		}
	})

	// A takeover written by someone else makes our next Renew report the
	// loss (conditional update conflict).
	t.Run("RenewConflictIsLost", func(t *testing.T) {
		l := srv.newLocker(t, lockertest.Key(t))
		a := mustAcquire(t, l).(*lease)
		a.stopWatch()
		<-a.watchDone
		ls, err := l.client.Get(lockertest.Ctx(t, 5*time.Second), l.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.client.Update(lockertest.Ctx(t, 5*time.Second), l.claim(ls, newTerm()), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Renew(lockertest.Ctx(t, 5*time.Second)); !errors.Is(err, locker.ErrLost) {
			t.Fatalf("Renew after a takeover = %v, want ErrLost", err)
		}
	})

	// A renewal whose answer was lost leaves our last resourceVersion
	// stale; the next renewal's conflict must be recognised as our own
	// write, not a loss.
	t.Run("RenewAfterLostAnswer", func(t *testing.T) {
		l := srv.newLocker(t, lockertest.Key(t))
		a := mustAcquire(t, l).(*lease)
		stale := a.cur
		if _, err := a.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		a.cur = stale
		if _, err := a.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatalf("Renew after our own unseen write = %v, want success", err)
		}
		if testsupport.IsClosed(a.Lost()) {
			t.Fatalf("Lost closed: %s", a.LostReason())
		}
	})

	// The dead-man guard's ReleaseHandle, from another Locker, frees the
	// Lease for a waiting candidate; a stale handle does nothing.
	t.Run("ReleaseHandle", func(t *testing.T) {
		key := lockertest.Key(t)
		a := mustAcquire(t, srv.newLocker(t, key)).(*lease)
		a.stopWatch()
		guard := srv.newLocker(t, key)
		if err := guard.ReleaseHandle(lockertest.Ctx(t, 5*time.Second), "default/"+guard.name+"/not-our-term"); err != nil {
			t.Fatalf("stale handle: %v", err)
		}
		if _, err := guard.Leader(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatalf("a stale handle released the Lease: %v", err)
		}
		if err := guard.ReleaseHandle(lockertest.Ctx(t, 5*time.Second), "default/other/x"); !errors.Is(err, locker.ErrRefused) {
			t.Fatalf("a handle for another Lease = %v, want ErrRefused", err)
		}
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), srv.newLocker(t, key))
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		if err := guard.ReleaseHandle(lockertest.Ctx(t, 5*time.Second), a.Handle()); err != nil {
			t.Fatalf("ReleaseHandle: %v", err)
		}
		r := <-ch
		if r.Err != nil || r.At.Sub(start) > 2*time.Second {
			t.Fatalf("standby after ReleaseHandle: %v after %v", r.Err, r.At.Sub(start))
		}
		if _, err := guard.Leader(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatalf("Leader: %v", err)
		}
	})

	// Leader says "no leader" for a missing and for a released Lease, and
	// for the missing one also that the key was never used, naming the
	// Lease and the server.
	t.Run("NoLeader", func(t *testing.T) {
		l := srv.newLocker(t, lockertest.Key(t))
		lockertest.NeverUsed(t, l, func() { lockertest.Release(mustAcquire(t, l)) },
			"Lease "+testNamespace+"/"+l.Name()+" on ", l.host)
	})
}
