package kubernetes

import (
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestQueueSkewedWriterNotPassedOver: a candidate on a host whose wall
// clock is an hour behind renews its entry on time, every TTL/2, but each
// write carries a renewTime an hour old. Its successor must judge it by
// the entry's writes, not by that renewTime: a candidate that joins behind
// it must not skip and delete it as ancient (it would go back to the tail,
// and be passed over again at every move of the queue).
func TestQueueSkewedWriterNotPassedOver(t *testing.T) {
	srv, key, leader := leading(t)
	ttl := leader.ttl

	ctx := lockertest.Ctx(t, time.Minute)
	lockertest.AcquireAsync(t, ctx, srv.newLocker(t, key))
	testsupport.WaitFor(t, 10*time.Second, "the head's entry", func() bool { return queued(t, leader) == 1 })

	// The skewed candidate's entry, renewed by hand as its keepEntry would.
	skewed, err := leader.enqueue(ctx, newTerm())
	if err != nil {
		t.Fatal(err)
	}
	var deleted atomic.Bool
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ls, err := leader.client.Get(ctx, skewed.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				deleted.Store(true)
				return
			}
			if err == nil {
				ls.Annotations[annAhead] = "1"
				then := metav1.NewMicroTime(time.Now().Add(-time.Hour))
				ls.Spec.RenewTime = &then
				_, _ = leader.client.Update(ctx, ls, metav1.UpdateOptions{})
			}
			select {
			case <-stop:
				return
			case <-time.After(ttl / 2):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })

	lockertest.AcquireAsync(t, ctx, srv.newLocker(t, key))
	time.Sleep(3 * ttl)
	if deleted.Load() {
		t.Fatal("the entry of a candidate renewing on time, whose clock is behind, was skipped and deleted as ancient")
	}
	// The server's time of the entry's last write moves with each renewal
	// (the server and this test share one clock here).
	ls, err := leader.client.Get(ctx, skewed.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if age := time.Since(written(ls)); age > ttl/2+2*time.Second {
		t.Fatalf("the server's time of the last write of an entry renewed every %v is %v old", ttl/2, age)
	}
	if n := queued(t, leader); n != 3 {
		t.Fatalf("%d entries, want 3", n)
	}
}
