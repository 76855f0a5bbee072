//go:build linux

package local

import (
	"context"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/locker"
)

// A waiting candidate takes over as soon as the lock is let go, without
// polling: when the holder closes its lock file, and when the dead-man guard
// unlocks a file that a frozen holder still has open (and touches it). Each
// case must finish well before recheckInterval, the wait's only timer, so a
// lost wake-up fails the test.
func TestWaiterWakesOnRelease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release func(t *testing.T, lease *Lease)
	}{
		{"holder closes", func(t *testing.T, lease *Lease) { _ = lease.Release(context.Background()) }},
		{"guard unlocks and touches, holder keeps it open", func(t *testing.T, lease *Lease) {
			// What guard.releaseLease does with its duplicate descriptor.
			dup, err := unix.Dup(int(lease.LockFile().Fd()))
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(dup)
			_ = unix.Flock(dup, unix.LOCK_UN)
			now := unix.NsecToTimeval(time.Now().UnixNano())
			if err := unix.Futimes(dup, []unix.Timeval{now, now}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lease.LockFile().Close() })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			first, err := newLocker(t, dir, false).Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan locker.Lease, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*recheckInterval)
				defer cancel()
				l, err := newLocker(t, dir, false).Acquire(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			time.Sleep(300 * time.Millisecond) // the waiter is asleep
			released := time.Now()
			tc.release(t, first.(*Lease))
			l := <-got
			if l == nil {
				return
			}
			defer l.Release(context.Background())
			if took := time.Since(released); took >= recheckInterval/2 {
				t.Fatalf("the waiter took over %v after the release: it did not wake on it", took)
			}
			if l.Epoch() <= first.Epoch() {
				t.Fatalf("epoch %d after %d", l.Epoch(), first.Epoch())
			}
		})
	}
}

// A waiting candidate sleeps: over a second of waiting it makes a handful
// of context switches, not the hundreds a 20ms poll cost.
func TestWaiterSleeps(t *testing.T) {
	dir := t.TempDir()
	first, err := newLocker(t, dir, false).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var before, after syscall.Rusage
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = newLocker(t, dir, false).Acquire(ctx)
	}()
	time.Sleep(300 * time.Millisecond)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	time.Sleep(time.Second)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	<-done
	// The test process itself wakes too (its own sleeps, the runtime);
	// polling every 20ms alone would add 50 tries, each a few switches.
	if n := after.Nvcsw - before.Nvcsw; n > 60 {
		t.Fatalf("%d voluntary context switches in a second of waiting", n)
	}
}
