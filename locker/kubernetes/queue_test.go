package kubernetes

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestQueue runs the candidates' queue (queue.go) on a real kube-apiserver.
func TestQueue(t *testing.T) {
	srv := startServer(t)
	lockertest.QueueContract(t, lockertest.Queue[*Locker]{
		New:      func(t *testing.T, key string) *Locker { return srv.newLocker(t, key) },
		TTL:      srv.newLocker(t, "ttl").ttl,
		Attempts: func(l *Locker) int64 { return l.attempts.Load() },
		Queued:   queued,
		Stopped: func(t *testing.T, l *Locker) func() bool {
			dead, err := l.enqueue(lockertest.Ctx(t, 5*time.Second), newTerm())
			if err != nil {
				t.Fatal(err)
			}
			return func() bool {
				_, err := l.client.Get(lockertest.Ctx(t, 5*time.Second), dead.name, metav1.GetOptions{})
				return err == nil
			}
		},
		Hold: renewing,
	})
}

// renewing renews lease every 500ms, as the supervisor would, until it is
// lost or the test ends.
func renewing(t *testing.T, lease locker.Lease) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-lease.Lost():
				return
			case <-time.After(500 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = lease.Renew(ctx)
			cancel()
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
}

// queued counts the entries in the queue of l's Lease.
func queued(t *testing.T, l *Locker) int {
	t.Helper()
	list, err := l.client.List(lockertest.Ctx(t, 5*time.Second), metav1.ListOptions{LabelSelector: labels.Set{labelQueue: l.queueLabel()}.String()})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// TestQueueJoinRetried: a candidate whose first queue call times out (here
// the server is frozen while it joins; at a hundred candidates starting at
// once, an overloaded server does the same) joins the queue once the
// server answers, instead of campaigning without it: a release then wakes
// only the head, not every candidate that once met a slow server.
func TestQueueJoinRetried(t *testing.T) {
	srv := startServer(t)
	key := lockertest.Key(t)
	ttl := func(c *Config) { c.TTL = 5 * time.Second } // the freeze stays well inside it
	leader := srv.newLocker(t, key, ttl)
	held := mustAcquire(t, leader)
	renewing(t, held)

	head := srv.newLocker(t, key, ttl)
	headWon := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), head)
	testsupport.WaitFor(t, 10*time.Second, "the first standby in the queue", func() bool { return queued(t, leader) == 1 })

	late := srv.newLocker(t, key, ttl, func(c *Config) { c.Timeout = time.Second })
	thawed := make(chan struct{})
	go func() { defer close(thawed); srv.kube.Freeze(2500 * time.Millisecond) }()
	time.Sleep(200 * time.Millisecond)
	lateWon := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), late) // its first call times out
	<-thawed
	testsupport.WaitFor(t, 15*time.Second, "the standby whose first call timed out in the queue", func() bool { return queued(t, leader) == 2 })

	if err := held.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	renewing(t, lockertest.OnlyTheHeadTakes(t, headWon, lateWon, late.attempts.Load))
}

// TestQueueOrphanDeleted: an entry whose create went through but which
// never got its place (the write of its place and the delete after it
// failed) stands behind everyone; once it is dead, the next candidate to
// read the queue deletes it, where nobody ever moves past it.
func TestQueueOrphanDeleted(t *testing.T) {
	srv := startServer(t)
	key := lockertest.Key(t)
	leader := srv.newLocker(t, key)
	held := mustAcquire(t, leader)
	renewing(t, held)

	ctx := lockertest.Ctx(t, time.Minute)
	id, secs, then := "gone", leaseSeconds(leader.ttl), metav1.NewMicroTime(time.Now().Add(-time.Hour))
	name := leader.name + entryInfix + newTerm()
	if _, err := leader.client.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: leader.namespace, Labels: map[string]string{labelQueue: leader.queueLabel()}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, RenewTime: &then},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lockertest.AcquireAsync(t, ctx, srv.newLocker(t, key))
	testsupport.WaitFor(t, 10*time.Second, "the orphaned entry deleted", func() bool {
		_, err := leader.client.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
