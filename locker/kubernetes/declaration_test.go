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

// declarationEdits are hand edits of a held Lease that keep the holder's
// term but change what it declares to standbys (DESIGN §1.12), each with a
// word the holder's loss reason must name.
var declarationEdits = []struct {
	name, field string
	edit        func(*coordinationv1.Lease)
}{
	{"LowerLeaseDuration", "leaseDurationSeconds", func(ls *coordinationv1.Lease) {
		one := int32(1)
		ls.Spec.LeaseDurationSeconds = &one
	}},
	{"RemoveLeaseDuration", "leaseDurationSeconds", func(ls *coordinationv1.Lease) { ls.Spec.LeaseDurationSeconds = nil }},
	{"LowerTTLAnnotation", annTTL, func(ls *coordinationv1.Lease) { ls.Annotations[annTTL] = "1s" }},
	{"RemoveContract", annContract, func(ls *coordinationv1.Lease) { delete(ls.Annotations, annContract) }},
}

// editLease applies edit to the Lease as the server has it now, retrying
// when a renewal came between, and returns the Lease as the edit left it.
func editLease(t *testing.T, l *Locker, edit func(*coordinationv1.Lease)) *coordinationv1.Lease {
	t.Helper()
	for range 5 {
		ls, err := l.client.Get(lockertest.Ctx(t, 5*time.Second), l.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		edit(ls)
		if got, err := l.client.Update(lockertest.Ctx(t, 5*time.Second), ls, metav1.UpdateOptions{}); err == nil {
			return got
		}
	}
	t.Fatal("could not edit the Lease")
	return nil
}

// TestDeclarationEdited: a hand edit that changes the held Lease's TTL or
// contract ends the leadership, seen both by the watch (at once) and by a
// renewal whose conditional update conflicts (the holder never adopts the
// edited declaration, and never dereferences a field that is gone). An
// edit of anything else is still adopted.
func TestDeclarationEdited(t *testing.T) {
	srv := startServer(t)
	for _, tc := range declarationEdits {
		t.Run(tc.name+"/Watch", func(t *testing.T) {
			l := srv.newLocker(t, lockertest.Key(t))
			a := mustAcquire(t, l)
			editLease(t, l, tc.edit)
			select {
			case <-a.Lost():
				if !strings.Contains(a.LostReason(), tc.field) {
					t.Errorf("LostReason = %q, want it to name %s", a.LostReason(), tc.field)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Lost still open 5s after %s was edited by hand", tc.field)
			}
			if _, err := a.Renew(lockertest.Ctx(t, 5*time.Second)); !errors.Is(err, locker.ErrLost) {
				t.Fatalf("Renew after the edit = %v, want ErrLost", err)
			}
		})
		t.Run(tc.name+"/Renew", func(t *testing.T) {
			l := srv.newLocker(t, lockertest.Key(t))
			a := mustAcquire(t, l).(*lease)
			a.stopWatch()
			<-a.watchDone
			edited := editLease(t, l, tc.edit)
			if _, err := a.Renew(lockertest.Ctx(t, 5*time.Second)); !errors.Is(err, locker.ErrLost) {
				t.Fatalf("Renew after %s was edited = %v, want ErrLost", tc.field, err)
			}
			// The holder wrote nothing over the edit.
			ls, err := l.client.Get(lockertest.Ctx(t, 5*time.Second), l.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if ls.ResourceVersion != edited.ResourceVersion {
				t.Fatalf("the holder wrote the Lease after the edit: %+v", ls)
			}
		})
	}

	t.Run("OtherEditAdopted", func(t *testing.T) {
		l := srv.newLocker(t, lockertest.Key(t))
		a := mustAcquire(t, l)
		editLease(t, l, func(ls *coordinationv1.Lease) { ls.Annotations["example.com/owner"] = "ops" })
		if _, err := a.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatalf("Renew after an unrelated edit = %v, want success", err)
		}
		if testsupport.IsClosed(a.Lost()) {
			t.Fatalf("Lost closed: %s", a.LostReason())
		}
	})
}

// TestIncompleteLease: Leases that lack fields a leaderrun holder always
// writes are never taken over by observation and crash nothing: a holder
// with the contract and leaderrun/ttl but no leaseDurationSeconds, and one
// with no annotations at all. Leader still describes them.
func TestIncompleteLease(t *testing.T) {
	srv := startServer(t)
	old := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	for _, tc := range []struct {
		name string
		ann  map[string]string
	}{
		{"NoLeaseDuration", map[string]string{annContract: observe.Contract, annTTL: "1s", annTerm: "t", annEpoch: "7"}},
		{"NoAnnotations", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := srv.newLocker(t, lockertest.Key(t))
			id := "someone"
			_, err := l.client.Create(lockertest.Ctx(t, 5*time.Second), &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: l.name, Annotations: tc.ann},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, RenewTime: &old},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Acquire(lockertest.Ctx(t, 4*time.Second)); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire over an incomplete Lease = %v, want it still waiting at the deadline", err)
			}
			nw := srv.newLocker(t, l.opts.Key, func(c *Config) { c.NoWait = true })
			if _, err := nw.Acquire(lockertest.Ctx(t, 4*time.Second)); !errors.Is(err, locker.ErrHeld) {
				t.Fatalf("NoWait over an incomplete Lease = %v, want ErrHeld", err)
			}
			h, err := l.Leader(lockertest.Ctx(t, 5*time.Second))
			if err != nil || h.ID != id || h.LeaseRemaining != 0 {
				t.Fatalf("Leader = %+v, %v; want holder %q with no time left known", h, err, id)
			}
		})
	}

	// No holderIdentity, whatever else is there: free, taken at once.
	t.Run("NoHolder", func(t *testing.T) {
		l := srv.newLocker(t, lockertest.Key(t))
		_, err := l.client.Create(lockertest.Ctx(t, 5*time.Second), &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: l.name, Annotations: map[string]string{annContract: observe.Contract, annTerm: "t"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Leader(lockertest.Ctx(t, 5*time.Second)); !errors.Is(err, locker.ErrNoLeader) {
			t.Fatalf("Leader of a Lease without holder = %v, want ErrNoLeader", err)
		}
		mustAcquire(t, l)
	})
}
