//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/internal/retry"
)

// The files leaderrun flocks (the lock file, the control lock, the
// counters' lock) are 0600 in 0700 directories, so no other user can open
// one. But permission is checked only when a file is opened: a descriptor
// another user opened while an earlier version left the file 0644 keeps
// working after its mode is narrowed, and an flock through it would keep
// the key, a pause or a new holder's epoch from root for as long as that
// user liked. So such a file is never narrowed and used on: it is replaced
// by a fresh inode, made 0600 by us (O_CREAT|O_EXCL, never through a
// symlink) and renamed over it, and a descriptor of the old inode locks
// nothing that counts (DESIGN §1.13, "Other local users").
//
// The rule that makes a replacement safe: a locker holds a lock only when,
// AFTER its flock succeeded, the path still names the inode it locked; if
// not, it lets that lock go and tries the file the path names now. And a
// file is replaced only by a process that holds the flock of its swap file
// (NAME~swap, 0600 and made by leaderrun, never by an earlier version),
// and that, holding it, finds the path still naming the inode it looked
// at, and either
//
//   - holds that inode's flock itself: it locks the fresh inode before
//     the rename and lets the old one go after it, so the lock passes
//     from inode to inode without a moment where another process of ours
//     could take either; or
//   - finds the old inode's flock held by no process of our user or root
//     (the lock table and every such process's descriptors say so): only
//     another user holds it. A candidate of ours that takes the old flock
//     meanwhile confirms it under the swap file too, after the rename,
//     and finds the path naming another inode.
//
// Every locker of a file of a wider mode confirms its lock under the swap
// file; a file of mode 0600 is never replaced, so its locker confirms
// without it. The copy of the content (the lock file's holder record,
// which keeps a count of the epoch too) is made while no process of ours
// can write the old file: the holder record is written only by a holder.

// swapSuffix names the swap file of a file leaderrun flocks; freshSuffix
// its replacement before the rename. '~' followed by anything but a slot
// number is never part of a key, so no key's file has either name.
const (
	swapSuffix  = "~swap"
	freshSuffix = "~new"
)

// takeOverInterval is how often a waiting locker of a file of a wider
// mode looks again for a holder of ours (takeOver scans /proc).
const takeOverInterval = time.Second

// exposed reports whether a user other than the owner could have opened
// the file st describes: a mode with any group or other bit (an earlier
// version made them 0644).
func exposed(st *unix.Stat_t) bool { return st.Mode&0o077 != 0 }

// fileExposed is exposed for an open file; one that cannot be read counts
// as exposed (the full check then says why).
func fileExposed(f *os.File) bool {
	var st unix.Stat_t
	return unix.Fstat(int(f.Fd()), &st) != nil || exposed(&st)
}

// openLockable opens (creating, mode 0600, never through a symlink) the
// file name in d that leaderrun flocks, for reading and writing; a wider
// mode is left for claim or takeOver to replace.
func (d *dir) openLockable(name string) (*os.File, error) {
	return d.openFile(name, unix.O_RDWR|unix.O_CREAT, false)
}

// holdsInode reports whether name in d is the inode st describes.
func (d *dir) holdsInode(name string, st *unix.Stat_t) bool {
	var cur unix.Stat_t
	err := unix.Fstatat(d.fd, name, &cur, unix.AT_SYMLINK_NOFOLLOW)
	return err == nil && cur.Dev == st.Dev && cur.Ino == st.Ino
}

// flockWait takes an exclusive flock on f, trying every pollInterval until
// ctx ends.
func flockWait(ctx context.Context, f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if !retry.Sleep(ctx, pollInterval) {
			return ctx.Err()
		}
	}
}

// lockSwap takes the flock of name's swap file in d; the returned func
// lets it go.
func (d *dir) lockSwap(ctx context.Context, name string) (func(), error) {
	f, err := d.open(name+swapSuffix, unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		return nil, err
	}
	if err := flockWait(ctx, f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}

// claim is called once we hold the flock on f, opened as name in d, and
// found the path naming it. A file of mode 0600 is ours alone: f is
// returned. One of a wider mode is replaced, under the swap file, by a
// fresh inode that we lock first, and the lock on f is let go: the
// replacement is returned. errReplaced: the path no longer names f. f is
// closed unless it is returned.
func (d *dir) claim(ctx context.Context, f *os.File, name string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	if !exposed(&st) {
		return f, nil
	}
	unlock, err := d.lockSwap(ctx, name)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	defer unlock()
	if !d.holdsInode(name, &st) {
		_ = f.Close()
		return nil, errReplaced
	}
	nf, err := d.fresh(name, f)
	_ = f.Close()
	return nf, err
}

// takeOver is called when the flock on f, opened as name in d, is held by
// another open file. A file of a wider mode whose lock no process of our
// user or root holds is replaced, under the swap file, by a fresh inode
// that we lock: the replacement is returned, and the lock another user
// holds on f counts for nothing any more. nil, nil: not replaced (a file
// of mode 0600, or a holder of ours); errReplaced: the path no longer
// names f. f is left open.
func (d *dir) takeOver(ctx context.Context, f *os.File, name string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	if !exposed(&st) || ourLockOn(&st, name) {
		return nil, nil
	}
	unlock, err := d.lockSwap(ctx, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !d.holdsInode(name, &st) {
		return nil, errReplaced
	}
	if ourLockOn(&st, name) {
		return nil, nil
	}
	return d.fresh(name, f)
}

// fresh replaces name in d, whose open file is old, by a new file: made
// afresh (mode 0600, never one that is there already, nor through a
// symlink), locked, given old's content, synced and renamed over name.
// The caller holds the swap file's flock. It returns the new file, locked.
func (d *dir) fresh(name string, old *os.File) (*os.File, error) {
	tmp := name + freshSuffix
	path := filepath.Join(d.path, name)
	_ = unix.Unlinkat(d.fd, tmp, 0) // a replacement that died half-way
	nf, err := d.open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		_ = nf.Close()
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return nil, d.refuse("cannot replace "+path+", which other users could open, by a file of mode 0600", err)
	}
	if err := unix.Flock(int(nf.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail(err)
	}
	b, err := io.ReadAll(io.NewSectionReader(old, 0, 1<<20))
	if err != nil {
		return fail(err)
	}
	if _, err := nf.WriteAt(b, 0); err != nil {
		return fail(err)
	}
	if err := nf.Sync(); err != nil {
		return fail(err)
	}
	if err := unix.Renameat(d.fd, tmp, d.fd, name); err != nil {
		return fail(err)
	}
	_ = unix.Fsync(d.fd)
	// The same open file (and its flock) under the name it has now.
	fd, err := unix.FcntlInt(nf.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	_ = nf.Close()
	if err != nil {
		return nil, fmt.Errorf("duplicate the descriptor of %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// lockPrivate takes the flock of the file name in d (made 0600 when
// missing), waiting as long as ctx lets it, on the inode the path names:
// one of a wider mode is replaced (claim, takeOver). Closing the returned
// file lets the lock go.
func (d *dir) lockPrivate(ctx context.Context, name string) (*os.File, error) {
	var nextTakeOver time.Time
	for {
		f, err := d.openLockable(name)
		if err != nil {
			return nil, err
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			var st unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &st); err != nil || !d.holdsInode(name, &st) {
				_ = f.Close()
				if err != nil {
					return nil, fmt.Errorf("stat %s: %w", f.Name(), err)
				}
				continue
			}
			nf, err := d.claim(ctx, f, name)
			if errors.Is(err, errReplaced) {
				continue
			}
			return nf, err
		case errors.Is(err, unix.EWOULDBLOCK):
			if time.Now().After(nextTakeOver) {
				nf, err := d.takeOver(ctx, f, name)
				if nf != nil || err != nil {
					_ = f.Close()
					if errors.Is(err, errReplaced) {
						continue
					}
					return nf, err
				}
				nextTakeOver = time.Now().Add(takeOverInterval)
			}
			_ = f.Close()
			if !retry.Sleep(ctx, pollInterval) {
				return nil, ctx.Err()
			}
		default:
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", filepath.Join(d.path, name), err)
		}
	}
}

// ourLockOn reports whether a process of our user or root holds an flock
// on the inode st describes, named name in its directory: the kernel's lock table names one, or one
// has a descriptor of that inode whose open file holds a lock (its
// /proc/PID/fdinfo lists it). The second finds a lock the table names by
// a pid that is gone or that another user's process has taken since: the
// dead-man guard's descriptor, shared with a holder that died. A process
// of ours that cannot be seen (another pid namespace beside ours; a kernel
// older than 4.1, which lists no locks per descriptor) is not found.
func ourLockOn(st *unix.Stat_t, name string) bool {
	b, err := os.ReadFile(procLocks)
	if err != nil {
		return true // cannot tell: leave the file alone
	}
	for _, line := range strings.Split(string(b), "\n") {
		ln, ok := parseFlockLine(strings.Fields(line))
		if ok && ln.ino == st.Ino && ln.major == unix.Major(st.Dev) && ln.minor == unix.Minor(st.Dev) && ln.pid > 0 && trustedProcess(ln.pid) {
			return true
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || !trustedProcess(pid) {
			continue
		}
		fdDir := "/proc/" + p.Name() + "/fd/"
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, e := range fds {
			// The name first: a stat of every descriptor could wait on a
			// file system that does not answer.
			target, err := os.Readlink(fdDir + e.Name())
			if err != nil || !strings.HasSuffix(strings.TrimSuffix(target, " (deleted)"), "/"+name) {
				continue
			}
			var fst unix.Stat_t
			if unix.Stat(fdDir+e.Name(), &fst) != nil || fst.Dev != st.Dev || fst.Ino != st.Ino {
				continue
			}
			info, err := os.ReadFile("/proc/" + p.Name() + "/fdinfo/" + e.Name())
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(info), "\n") {
				if rest, ok := strings.CutPrefix(line, "lock:"); ok {
					if ln, ok := parseFlockLine(strings.Fields(rest)); ok && ln.ino == st.Ino {
						return true
					}
				}
			}
		}
	}
	return false
}
