package kubernetes

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

func TestControlContract(t *testing.T) {
	srv := startServer(t)
	lockertest.ControlContract(t, func(t *testing.T, key string) locker.Locker {
		return srv.newLocker(t, key)
	})
}

func pauseRecord(version string) locker.Control {
	return locker.Control{Version: version, Pause: &locker.Pause{By: "ops@admin", Since: time.Now().UTC(), Reason: "test"}}
}

type waited struct {
	c   locker.Control
	err error
}

// waitAsync runs WaitControl(version) in the background.
func waitAsync(t *testing.T, l *Locker, version string) <-chan waited {
	done := make(chan waited, 1)
	go func() {
		c, err := l.WaitControl(lockertest.Ctx(t, 20*time.Second), version)
		done <- waited{c, err}
	}()
	return done
}

// A control record changes nothing of the election: a key paused before
// anyone ran it is still never used, the first candidate leads (with its
// priority in the holder record) while the next one waits in the queue,
// which does not count the control Lease, and a released key has no
// leader but was used. The control Lease is no key's Lease.
func TestControlLeavesElectionAlone(t *testing.T) {
	srv := startServer(t)
	key := lockertest.Key(t)
	// Written through a slot key's Locker: the record is the key's.
	v, err := srv.newLocker(t, locker.SlotKey(key, 3)).SetControl(lockertest.Ctx(t, 5*time.Second), pauseRecord(""))
	if err != nil {
		t.Fatal(err)
	}
	l := srv.newLocker(t, key)
	if _, err := l.client.Get(lockertest.Ctx(t, 5*time.Second), l.Name()+controlSuffix, metav1.GetOptions{}); err != nil {
		t.Fatalf("the record is not on the Lease %s%s: %v", l.Name(), controlSuffix, err)
	}
	for _, other := range []string{key + ".control", key + "-control", locker.SlotKey(key, 3)} {
		var nu *locker.NeverUsedError
		if _, err := srv.newLocker(t, other).Leader(lockertest.Ctx(t, 5*time.Second)); !errors.As(err, &nu) {
			t.Errorf("Leader of %q after %q's control record was written: %v, want never used", other, key, err)
		}
	}
	lockertest.NeverUsed(t, l, func() {
		first := mustAcquire(t, srv.newLocker(t, key, func(c *Config) { c.Priority = 5 }))
		h, err := l.Leader(lockertest.Ctx(t, 5*time.Second))
		if err != nil || h.Epoch != first.Epoch() || h.Priority != 5 {
			t.Fatalf("Leader = %+v, %v; want epoch %d and priority 5", h, err, first.Epoch())
		}
		second := srv.newLocker(t, key)
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), second)
		select {
		case r := <-ch:
			t.Fatalf("a second candidate led (%v) while the first holds the key", r.Err)
		case <-time.After(time.Second):
		}
		if n := queued(t, l); n != 1 {
			t.Errorf("%d entries in the queue with one candidate waiting, want 1", n)
		}
		lockertest.Release(first)
		r := <-ch
		if r.Err != nil {
			t.Fatalf("the waiting candidate after the release: %v", r.Err)
		}
		if _, err := r.Lease.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if h, err := l.Leader(lockertest.Ctx(t, 5*time.Second)); err != nil || h.Priority != 0 || h.Epoch != r.Lease.Epoch() {
			t.Fatalf("Leader after the hand-over = %+v, %v; want epoch %d, no priority", h, err, r.Lease.Epoch())
		}
		lockertest.Release(r.Lease)
	}, "Lease "+testNamespace+"/"+l.Name()+" on ")
	c, err := l.Control(lockertest.Ctx(t, 5*time.Second))
	if err != nil || c.Version != v || !c.Paused() {
		t.Fatalf("the record after the election = %+v, %v; want the pause at %q", c, err, v)
	}
}

// WaitControl on a key with no record returns when one is created, and
// on a record deleted by hand returns the empty record.
func TestWaitControlCreatedAndDeleted(t *testing.T) {
	srv := startServer(t)
	key := lockertest.Key(t)
	w, writer := srv.newLocker(t, key), srv.newLocker(t, key)
	done := waitAsync(t, w, "")
	time.Sleep(500 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("WaitControl returned with no record written: %+v, %v", r.c, r.err)
	default:
	}
	v, err := writer.SetControl(lockertest.Ctx(t, 5*time.Second), pauseRecord(""))
	if err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.c.Version != v || !r.c.Paused() {
		t.Fatalf("WaitControl after the create = %+v, %v; want the pause at %q", r.c, r.err, v)
	}
	done = waitAsync(t, w, v)
	time.Sleep(500 * time.Millisecond)
	if err := writer.client.Delete(lockertest.Ctx(t, 5*time.Second), w.Name()+controlSuffix, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.c.Version != "" || r.c.Paused() {
		t.Fatalf("WaitControl after the delete = %+v, %v; want the empty record", r.c, r.err)
	}
}
