package kubernetes

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/observe"
)

// TestHandEdits changes a renewing holder's Lease by hand while a standby
// waits (DESIGN §1.12, "A record edited by hand"). The holder loses its
// leadership; the standby never takes the Lease before the holder's own
// release (which the supervisor makes once the job is gone), and takes it
// at once after that release — or, where the edit left nothing the
// release may mark as its own, once the holder's first TTL has passed
// since the edit.
func TestHandEdits(t *testing.T) {
	srv := startServer(t)
	const ttl = 4 * time.Second
	longTTL := func(c *Config) { c.TTL = ttl }
	for _, tc := range []struct {
		name   string
		edit   func(ls *coordinationv1.Lease) (del bool)
		marked bool // the holder's release can mark what the edit left
	}{
		{"Deleted", func(*coordinationv1.Lease) bool { return true }, true},
		{"HolderCleared", func(ls *coordinationv1.Lease) bool { ls.Spec.HolderIdentity = nil; return false }, true},
		{"TTLLowered", func(ls *coordinationv1.Lease) bool {
			one := int32(1)
			ls.Spec.LeaseDurationSeconds = &one
			ls.Annotations[annTTL] = "1s"
			return false
		}, true},
		{"Emptied", func(ls *coordinationv1.Lease) bool {
			ls.Annotations = nil
			ls.Spec = coordinationv1.LeaseSpec{}
			return false
		}, true},
		{"AnnotationsRemoved", func(ls *coordinationv1.Lease) bool { ls.Annotations = nil; return false }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := lockertest.Key(t)
			l := srv.newLocker(t, key, longTTL)
			a := mustAcquire(t, l)
			renewing(t, a)
			ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 60*time.Second), srv.newLocker(t, key, longTTL))
			time.Sleep(time.Second) // the standby sees the holder renew

			for i := 0; ; i++ {
				cur, err := l.client.Get(lockertest.Ctx(t, 5*time.Second), l.name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if tc.edit(cur) {
					err = l.client.Delete(lockertest.Ctx(t, 5*time.Second), l.name, metav1.DeleteOptions{})
				} else {
					_, err = l.client.Update(lockertest.Ctx(t, 5*time.Second), cur, metav1.UpdateOptions{})
				}
				if err == nil {
					break
				}
				if !apierrors.IsConflict(err) || i == 10 {
					t.Fatalf("edit: %v", err)
				}
			}
			edited := time.Now()
			select {
			case <-a.Lost():
				t.Logf("holder: %s", a.LostReason())
			case <-time.After(5 * time.Second):
				t.Fatal("the holder did not see the edit")
			}
			// The job takes its time to stop; the standby must wait.
			select {
			case r := <-ch:
				t.Fatalf("the standby took the Lease %v after the edit, before the holder's release: %v", r.At.Sub(edited), r.Err)
			case <-time.After(2 * time.Second):
			}
			released := time.Now()
			lockertest.Release(a)
			var r lockertest.Acquired
			select {
			case r = <-ch:
			case <-time.After(ttl + observe.Allowance(ttl) + 5*time.Second):
				t.Fatal("the standby never took the Lease")
			}
			if r.Err != nil {
				t.Fatalf("standby Acquire: %v", r.Err)
			}
			t.Logf("standby took the Lease %v after the edit, %v after the release", r.At.Sub(edited), r.At.Sub(released))
			if tc.marked && r.At.Sub(released) > 2*time.Second {
				t.Errorf("the standby took the Lease %v after the holder's release, want at once", r.At.Sub(released))
			}
			if !tc.marked && r.At.Sub(edited) < ttl {
				t.Errorf("the standby took the Lease %v after the edit, before the holder's TTL %v", r.At.Sub(edited), ttl)
			}
			if r.Lease.Epoch() <= a.Epoch() {
				t.Errorf("epoch %d after %d: not increasing", r.Lease.Epoch(), a.Epoch())
			}
		})
	}
}

// TestSilentIn: which Leases show the holder a standby saw gone silent,
// and which TTL it is waited out with.
func TestSilentIn(t *testing.T) {
	h := liveHolder{term: "t1", id: "a", ttl: 6 * time.Second}
	held := func(id, term string, ttl string) *coordinationv1.Lease {
		secs := int32(6)
		ls := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if id != "" {
			ls.Spec.HolderIdentity = &id
		}
		if term != "" {
			ls.Annotations[annTerm] = term
		}
		if ttl != "" {
			ls.Annotations[annContract] = observe.Contract
			ls.Annotations[annTTL] = ttl
			ls.Spec.LeaseDurationSeconds = &secs
		}
		return ls
	}
	freed := func(released string) *coordinationv1.Lease {
		ls := held("", "", "")
		if released != "" {
			ls.Annotations[annReleased] = released
		}
		return ls
	}
	for _, tc := range []struct {
		name string
		ls   *coordinationv1.Lease
		want bool
	}{
		{"deleted", nil, true},
		{"released by it", freed("t1"), false},
		{"freed without a release", freed(""), true},
		{"released by another term", freed("t0"), true},
		{"renewing", held("a", "t1", "6s"), false},
		{"contract removed", held("a", "t1", ""), true},
		{"annotations removed", held("a", "", ""), true},
		{"another tool's holder", held("x", "", ""), false},
		{"a new leaderrun holder", held("b", "t2", "6s"), false},
	} {
		if got := h.silentIn(tc.ls); got != tc.want {
			t.Errorf("%s: silentIn = %v, want %v", tc.name, got, tc.want)
		}
	}
	lowered := held("a", "t1", "1s")
	one := int32(1)
	lowered.Spec.LeaseDurationSeconds = &one
	if got := h.longest(lowered, time.Second); got != 6*time.Second {
		t.Errorf("TTL lowered to 1s: waited out with %v, want the term's 6s", got)
	}
	if got := h.longest(held("a", "t1", "9s"), 9*time.Second); got != 9*time.Second {
		t.Errorf("TTL raised to 9s: waited out with %v, want 9s", got)
	}
}
