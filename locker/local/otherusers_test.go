//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// needUserNS skips a test when another user cannot make a user and mount
// namespace of its own here (unshare -Urm).
func needUserNS(t *testing.T) {
	t.Helper()
	needRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	if err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "unshare", "-Urm", "true").Run(); err != nil {
		t.Skipf("other users cannot make user namespaces here: %v", err)
	}
}

// Another user cannot make a new holder wait by holding, in a mount
// namespace of its own, an flock on a deleted file that it named as our
// lock file is named: it looks like a holder of a lock file removed by
// hand (waitReplacedHolders), but no other user could have had ours open.
func TestOtherUsersDeletedNamesakeWedgesNothing(t *testing.T) {
	needUserNS(t)
	privateHost(t)
	base := reachable(t)
	locks := filepath.Join(base, "locks")
	marks := reachable(t)
	if err := os.Chmod(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(marks, "deleted")
	lockFile := filepath.Join(locks, "leaderrun", "job.lock")
	script := `mount -t tmpfs none "$1" && mkdir -p "$(dirname "$2")" && : >"$2" &&
exec flock -x "$2" sh -c 'rm "$1" && : >"$2" && exec sleep 600' sh "$2" "$3"`
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		"unshare", "-Urm", "sh", "-c", script, "sh", base, lockFile, mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // flock's sleep too
		_ = cmd.Wait()
	})
	testsupport.WaitFor(t, 20*time.Second, "nobody's flock on its deleted namesake of the lock file", func() bool {
		_, err := os.Stat(mark)
		return err == nil
	})

	l, err := New(Config{Options: locker.Options{Key: "job", Prefix: "leaderrun", ID: "root", TTL: 15 * time.Second}, Dir: locks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire while nobody holds a deleted file named %s in its own namespace: %v", lockFile, err)
	}
	_ = lease.Release(context.Background())
}

// Another user cannot make status and check report a holder while none
// holds the lock. A lock on a file of the same inode number on another
// device counts for the holder whose pid the record names (a stacked file
// system reports another device than stat does); another user can take
// that pid once the last holder is gone (pids are recycled, 32768 of them
// by default), and an inode number, in a tmpfs of its own. The test plays
// the recycled pid by naming the other user's process in the record.
func TestOtherUsersNamesakeInodeMakesNoHolder(t *testing.T) {
	needUserNS(t)
	privateHost(t)
	base := reachable(t)
	locks := filepath.Join(base, "locks")
	if err := os.Mkdir(locks, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", locks, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(locks, unix.MNT_DETACH) })
	opts := locker.Options{Key: "job", Prefix: "leaderrun", ID: "root", TTL: 15 * time.Second, NoWait: true}
	l, err := New(Config{Options: opts, Dir: locks})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	epoch := lease.Epoch()
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(l.lockPath, &st); err != nil {
		t.Fatal(err)
	}

	// nobody, in a tmpfs of its own, makes files until one has the lock
	// file's inode number, and holds an flock on it.
	marks := reachable(t)
	if err := os.Chmod(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(marks, "pid")
	script := `mount -t tmpfs none "$1" || exit 1
i=0
while [ "$(stat -c %i "$1/f$i" 2>/dev/null)" != "$2" ]; do
	i=$((i+1)); [ $i -gt 10000 ] && exit 1; : >"$1/f$i"
done
echo $$ >"$3.tmp" && mv "$3.tmp" "$3" && exec flock -x "$1/f$i" sleep 600`
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		"unshare", "-Urm", "sh", "-c", script, "sh", base, strconv.FormatUint(st.Ino, 10), mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	var pid int
	testsupport.WaitFor(t, 30*time.Second, "nobody's flock on a file of the lock file's inode number", func() bool {
		b, err := os.ReadFile(mark)
		if err != nil {
			return false
		}
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		locks, _ := os.ReadFile(procLocks)
		return strings.Contains(string(locks), " "+strconv.Itoa(pid)+" ")
	})
	// The last holder's pid is now nobody's process.
	f, err := os.OpenFile(l.lockPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = writeRecord(f, locker.Holder{ID: "root", PID: pid, Epoch: epoch})
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}

	h, err := l.Leader(context.Background())
	if !errors.Is(err, locker.ErrNoLeader) {
		t.Fatalf("Leader with no holder but nobody's flock on a namesake inode: %+v, %v; want ErrNoLeader", h, err)
	}
}

// Another user who fills the file system of the lock directory (a tmpfs
// /run has no space kept for root) makes a candidate's attempt fail, but
// not as a refusal: a refusal is exit 125, which the packaged unit does
// not restart, so a moment's fill would end root's service for good. The
// attempt after the space is freed leads.
func TestOtherUsersFullFileSystemIsNoRefusal(t *testing.T) {
	needRoot(t)
	privateHost(t)
	base := reachable(t)
	locks := filepath.Join(base, "locks")
	if err := os.Mkdir(locks, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", locks, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k,nr_inodes=64,mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(locks, unix.MNT_DETACH) })
	pub := filepath.Join(locks, "pub")
	opts := locker.Options{Key: "job", Prefix: "leaderrun", ID: "root", TTL: 15 * time.Second, NoWait: true}
	l, err := New(Config{Options: opts, Dir: locks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Once with nothing of leaderrun's there yet, once with its lock file
	// and counter there.
	// (A failed attempt may have raised some copies of the counter: the
	// next epoch is larger than the last, not necessarily by one.)
	var last uint64
	for range 2 {
		if err := os.Mkdir(pub, 0o1777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(pub, 0o1777); err != nil {
			t.Fatal(err)
		}
		// nobody takes every block, then every inode.
		asNobody(t, "sh", "-c", `dd if=/dev/zero of="$1/fill" bs=4k 2>/dev/null; i=0; while : >"$1/i$i" 2>/dev/null; do i=$((i+1)); done`, "sh", pub)
		lease, err := l.Acquire(ctx)
		if err == nil {
			_ = lease.Release(context.Background())
			t.Fatal("Acquire on a full file system succeeded; the test filled nothing")
		}
		if errors.Is(err, locker.ErrRefused) {
			t.Fatalf("Acquire on a file system another user filled: %v; want an error that is retried, not a refusal", err)
		}
		t.Logf("on a full file system: %v", err)
		if err := os.RemoveAll(pub); err != nil {
			t.Fatal(err)
		}
		if lease, err = l.Acquire(ctx); err != nil {
			t.Fatalf("Acquire once the space is freed: %v", err)
		}
		if lease.Epoch() <= last {
			t.Errorf("epoch %d after %d", lease.Epoch(), last)
		}
		last = lease.Epoch()
		_ = lease.Release(context.Background())
	}
}

// An earlier version left the lock file and the control lock 0644, and
// another user opened them then. Narrowing a file's mode does not close a
// descriptor already open on it, and an flock needs no more than that
// one: it kept the key from root's candidates ("held by pid N (flock),
// not a leaderrun") and a pause from being written. Once leaderrun has
// used such a file, a lock taken through an old descriptor locks nothing
// that counts, whether taken before leaderrun came or after it narrowed
// the file; and the count the old lock file kept goes on.
func TestOtherUsersLegacyDescriptorBlocksNothing(t *testing.T) {
	needRoot(t)
	privateHost(t)
	for _, tc := range []struct {
		name  string
		early bool // nobody holds the locks before leaderrun first comes
	}{{"locked after leaderrun used the files", false}, {"locked before leaderrun came", true}} {
		t.Run(tc.name, func(t *testing.T) {
			base := reachable(t)
			locks := filepath.Join(base, "locks")
			if err := os.MkdirAll(filepath.Join(locks, "leaderrun"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(locks, 0o755); err != nil {
				t.Fatal(err)
			}
			lockFile := testsupport.WriteFile(t, filepath.Join(locks, "leaderrun", "job.lock"), `{"id":"old","pid":1,"epoch":7}`, 0o644)
			ctlLock := testsupport.WriteFile(t, filepath.Join(locks, "leaderrun", "job~control.lock"), "", 0o644)
			marks := testsupport.SharedDir(t)
			early := ""
			if tc.early {
				early = "1"
			}
			testsupport.StartAsNobody(t, "sh", "-c", `exec 3<"$1" 4<"$2"; : >"$3/opened"
[ -n "$4" ] || while [ ! -e "$3/go" ]; do sleep 0.05; done
flock -x 3 && flock -x 4 && : >"$3/locked" && exec sleep 600`, "sh", lockFile, ctlLock, marks, early)
			testsupport.WaitFor(t, 20*time.Second, "nobody's descriptors of the lock files", func() bool {
				_, err := os.Stat(filepath.Join(marks, "opened"))
				return err == nil
			})

			opts := locker.Options{Key: "job", Prefix: "leaderrun", ID: "root", TTL: 15 * time.Second, NoWait: true}
			l, err := New(Config{Options: opts, Dir: locks})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			last := uint64(7)
			if !tc.early {
				lease, err := l.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if lease.Epoch() <= last {
					t.Errorf("epoch %d after the lock file's %d", lease.Epoch(), last)
				}
				last = lease.Epoch()
				_ = lease.Release(context.Background())
				if _, err := l.SetControl(ctx, locker.Control{}); err != nil {
					t.Fatal(err)
				}
				testsupport.WriteFile(t, filepath.Join(marks, "go"), "", 0o644)
			}
			testsupport.WaitFor(t, 20*time.Second, "nobody's flocks through its old descriptors", func() bool {
				_, err := os.Stat(filepath.Join(marks, "locked"))
				return err == nil
			})

			lease, err := l.Acquire(ctx)
			if err != nil {
				t.Fatalf("Acquire while nobody flocks a descriptor it opened when the lock file was 0644: %v", err)
			}
			if lease.Epoch() <= last {
				t.Errorf("epoch %d after %d", lease.Epoch(), last)
			}
			_ = lease.Release(context.Background())
			c, err := l.Control(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.SetControl(ctx, c); err != nil {
				t.Fatalf("SetControl while nobody flocks a descriptor it opened when the control lock was 0644: %v", err)
			}
			for _, p := range []string{lockFile, ctlLock} {
				if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: %v, %v; want mode 0600", p, fi.Mode().Perm(), err)
				}
			}
		})
	}
}

// A lock file an earlier version left 0644 is replaced under another
// user's lock, never under a lock a process of ours or root's holds: not
// an earlier version's holder, and not a holder that died while the
// dead-man guard's descriptor keeps its lock, which the kernel's lock
// table names by a pid that is gone (or that another user's process has
// taken since). Here the process that took the lock exits at once and a
// root shell keeps the descriptor.
func TestLegacyLockFileHeldByOursIsNotReplaced(t *testing.T) {
	needRoot(t)
	privateHost(t)
	for _, tc := range []struct{ name, script string }{
		{"held by the process that took it", `exec flock -x "$1" sh -c ': >"$2"; exec sleep 600' sh "$1" "$2"`},
		{"held through a descriptor of another process", `exec 3<"$1"; flock -x 3 || exit 1; : >"$2"; exec sleep 600`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := reachable(t)
			locks := filepath.Join(base, "locks")
			if err := os.MkdirAll(filepath.Join(locks, "leaderrun"), 0o755); err != nil {
				t.Fatal(err)
			}
			lockFile := testsupport.WriteFile(t, filepath.Join(locks, "leaderrun", "job.lock"), "{}", 0o644)
			var before unix.Stat_t
			if err := unix.Stat(lockFile, &before); err != nil {
				t.Fatal(err)
			}
			mark := filepath.Join(t.TempDir(), "locked")
			testsupport.StartInGroup(t, exec.Command("sh", "-c", tc.script, "sh", lockFile, mark))
			testsupport.WaitFor(t, 20*time.Second, "root's flock on the legacy lock file", func() bool {
				_, err := os.Stat(mark)
				return err == nil
			})
			l, err := New(Config{Options: locker.Options{Key: "job", Prefix: "leaderrun", ID: "root", TTL: 15 * time.Second, NoWait: true}, Dir: locks})
			if err != nil {
				t.Fatal(err)
			}
			lease, err := l.Acquire(context.Background())
			if err == nil {
				_ = lease.Release(context.Background())
				t.Fatal("Acquire led while a process of root's held the lock")
			}
			if !errors.Is(err, locker.ErrHeld) {
				t.Fatalf("Acquire: %v; want ErrHeld", err)
			}
			var after unix.Stat_t
			if err := unix.Stat(lockFile, &after); err != nil {
				t.Fatal(err)
			}
			if after.Ino != before.Ino {
				t.Error("the lock file was replaced while a process of root's held its lock")
			}
		})
	}
}
