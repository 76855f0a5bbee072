package consul

import (
	"context"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestQueueFailingLeavesTimeToTake: a queued candidate whose reads of the
// queue start to fail in a way that may pass (500 on every queue path,
// the lock key still answering) must give up on the queue in time to take
// the key once it is free, when its Acquire has less time left than
// queueRetryFor (an --acquire-timeout of 20s here), not spend the whole
// deadline retrying the queue while the key is free.
func TestQueueFailingLeavesTimeToTake(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{Servers: 1})
	addr := c.HTTPAddr(0)
	key := lockertest.Key(t)
	leader := c.locker(t, key, addr)
	held := acquire(t, leader)
	stopRenewing := keepRenewing(t, leader, held)

	head := c.locker(t, key, addr)
	hctx, cancelHead := context.WithCancel(context.Background())
	headDone := make(chan struct{})
	go func() {
		defer close(headDone)
		if ls, err := head.Acquire(hctx); err == nil {
			_ = ls.Release(context.Background())
		}
	}()
	t.Cleanup(func() { cancelHead(); <-headDone })
	testsupport.WaitFor(t, 15*time.Second, "the head's entry", func() bool { return c.queued(t, leader) == 1 })

	p := testsupport.NewFaultyHTTP(t, addr)
	late := c.locker(t, key, p.Addr)
	const deadline = 20 * time.Second
	if late.queueRetryFor() <= deadline {
		t.Fatalf("queueRetryFor %v: the test needs it longer than the deadline", late.queueRetryFor())
	}
	start := time.Now()
	type result struct {
		err error
		at  time.Duration
	}
	won := make(chan result, 1)
	go func() {
		ls, err := late.Acquire(lockertest.Ctx(t, deadline))
		won <- result{err, time.Since(start)}
		if err == nil {
			_ = ls.Release(context.Background())
		}
	}()
	testsupport.WaitFor(t, 15*time.Second, "the late candidate's entry", func() bool { return c.queued(t, leader) == 2 })

	p.FailPrefix("/v1/kv/" + late.path + queueDir)
	faultAt := time.Since(start)
	cancelHead()
	<-headDone
	stopRenewing()
	release(t, held)
	r := <-won
	if r.err != nil {
		t.Fatalf("the free key was not taken within the %v deadline while only the queue failed: %v (after %v)", deadline, r.err, r.at.Round(time.Millisecond))
	}
	t.Logf("took the free key %v after Acquire began, the queue failing from %v on", r.at.Round(time.Millisecond), faultAt.Round(time.Millisecond))
}
