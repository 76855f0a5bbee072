//go:build linux

package local

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The dead-man guard keeps a duplicate of the lock's descriptor until
// leaderrun is done with the job. A release must hand the lock to a
// waiting candidate at once all the same: closing our descriptor alone
// left the flock to the guard's until the guard had exited, and woke no
// one (our close was not the last). Here the duplicate stays open for the
// whole test, as a slow guard's would.
func TestReleaseHandsOverWhileTheGuardsDuplicateIsOpen(t *testing.T) {
	dir := t.TempDir()
	lease, err := newLocker(t, dir, false).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(lease.(*Lease).LockFile().Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)

	won := make(chan time.Time, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second) // under the 5s recheck
	defer cancel()
	go func() {
		next, err := newLocker(t, dir, false).Acquire(ctx)
		if err != nil {
			close(won)
			return
		}
		won <- time.Now()
		next.Release(context.Background())
	}()
	time.Sleep(300 * time.Millisecond) // the candidate waits on the held lock
	released := time.Now()
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	at, ok := <-won
	if !ok {
		t.Fatal("the waiting candidate never got the lock while the guard's duplicate stayed open")
	}
	t.Logf("the candidate won %v after the release", at.Sub(released))
}
