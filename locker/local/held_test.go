//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/leaderrun/leaderrun/locker"
)

// unlockFromAnotherProcess does what the dead-man guard does when it fires:
// a separate process, holding a duplicate of the lease's descriptor (the
// same open file), unlocks it with `flock -u` (util-linux). With unlock
// false it only exits, closing its duplicate.
func unlockFromAnotherProcess(t *testing.T, lease *Lease, unlock bool) {
	t.Helper()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatal("flock (util-linux) is needed: apt-get install util-linux")
	}
	cmd := exec.Command("flock", "-u", "3")
	if !unlock {
		cmd = exec.Command("true")
	}
	cmd.ExtraFiles = []*os.File{lease.LockFile()}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
}

func TestRenewFailsOnceOurDescriptorNoLongerHoldsTheLock(t *testing.T) {
	dir := t.TempDir()
	old, err := newLocker(t, dir, false).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ol := old.(*Lease)
	defer ol.file.Close()

	// The guard's duplicate closed without unlocking: the lock is still ours.
	unlockFromAnotherProcess(t, ol, false)
	if _, err := old.Renew(context.Background()); err != nil {
		t.Fatalf("Renew after the guard merely closed its duplicate: %v, want success", err)
	}

	// The guard fired and unlocked through its duplicate; nobody has taken
	// the lock yet. Renew must not count the free lock as ours, nor take it
	// again.
	unlockFromAnotherProcess(t, ol, true)
	if _, err := old.Renew(context.Background()); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew after the guard unlocked: %v, want ErrLost", err)
	}
	select {
	case <-old.Lost():
	default:
		t.Fatal("Lost not closed after Renew found the lock gone")
	}

	// A standby takes the lock (the same file at the same path): the old
	// lease still cannot renew, record a run, or touch the new record.
	next, err := newLocker(t, dir, true).Acquire(context.Background())
	if err != nil {
		t.Fatalf("standby after the guard's unlock: %v (did Renew take the lock again?)", err)
	}
	defer next.Release(context.Background())
	if _, err := old.Renew(context.Background()); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew while another holds the same lock file: %v, want ErrLost", err)
	}
	lk := newLocker(t, dir, false)
	if err := lk.RecordRun(context.Background(), old, locker.Run{Slot: "s1", Epoch: old.Epoch(), ID: "me"}); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("RecordRun by the old lease: %v, want ErrLost", err)
	}
	if err := old.Release(context.Background()); err != nil {
		t.Fatalf("Release of the old lease: %v", err)
	}
	h, err := lk.Leader(context.Background())
	if err != nil || h.Epoch != next.Epoch() || h.Epoch <= old.Epoch() {
		t.Fatalf("Leader after the old lease's release = %+v, %v; want the new holder's epoch %d", h, err, next.Epoch())
	}
	if _, err := next.Renew(context.Background()); err != nil {
		t.Fatalf("the new holder's Renew: %v", err)
	}
}

// Where the kernel lists no locks per descriptor (before Linux 4.1), Renew
// falls back to the kernel's lock table: an flock on our file taken by this
// process. It still tells a lock the guard let go.
func TestRenewWithoutPerDescriptorLocks(t *testing.T) {
	lease, err := newLocker(t, t.TempDir(), false).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l := lease.(*Lease)
	defer l.file.Close()
	if !l.perFD {
		t.Log("this kernel lists no locks in /proc/self/fdinfo: the fallback is the only proof")
	}
	l.perFD = false
	if _, err := lease.Renew(context.Background()); err != nil {
		t.Fatalf("Renew while held: %v", err)
	}
	unlockFromAnotherProcess(t, l, true)
	if _, err := lease.Renew(context.Background()); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew after the guard unlocked: %v, want ErrLost", err)
	}
}
