//go:build linux

package local

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/locker"
)

// A waiting candidate leaves a record beside the lock file, for `leaderrun
// status` alone: <key>.lock~waiting.<random>, its holder record (id, host,
// pid, priority, and since when it waits), flocked by the candidate for as
// long as it waits and deleted when it stops waiting. The flock is what
// makes it live: a record whose flock is gone is a candidate that died
// waiting (kill -9), which no reader lists and the next waiting candidate
// deletes. '~' never occurs in a key, so no other key's file has such a
// name, and a waiting candidate's watch (wait.go) passes over it. None of
// it takes part in who leads: the kernel keeps no order among the flock's
// waiters, and whichever tries first after a release wins.
const waitingInfix = "~waiting."

// waiting is a candidate's record of its wait; nil when it could not be
// left (listing is a courtesy, never a reason to fail).
type waiting struct {
	f    *os.File
	name string
}

func (l *Locker) waitingPrefix() string { return l.lockName + waitingInfix }

// enterWaiting leaves the record of this waiting candidate, first deleting
// the records of candidates that died waiting. It is written under a
// temporary name and flocked before it is renamed into place, so that no
// other candidate takes it for a dead one's.
func (l *Locker) enterWaiting() *waiting {
	d, err := l.openRoot(l.dir, l.lockRel, "Dir", false)
	if err != nil {
		return nil
	}
	defer d.close()
	l.sweepWaiting(d)
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails on Linux
	name := l.waitingPrefix() + hex.EncodeToString(b)
	tmp := name + ".tmp"
	f, err := d.open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL)
	if err != nil {
		return nil
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil || writeRecord(f, locker.NewHolder(l.opts)) != nil ||
		unix.Renameat(d.fd, tmp, d.fd, name) != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		_ = f.Close()
		return nil
	}
	return &waiting{f: f, name: name}
}

// leaveWaiting deletes the record w (nil: none), then drops its flock.
func (l *Locker) leaveWaiting(w *waiting) {
	if w == nil {
		return
	}
	defer w.f.Close()
	d, err := l.openRoot(l.dir, l.lockRel, "Dir", false)
	if err != nil {
		return // the directory went: so did the record
	}
	defer d.close()
	// Only the record we locked: one put in its place is not ours.
	var st unix.Stat_t
	if unix.Fstatat(d.fd, w.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && sameFile(w.f, &st) {
		_ = unix.Unlinkat(d.fd, w.name, 0)
	}
}

// sameFile reports whether st is the file f has open.
func sameFile(f *os.File, st *unix.Stat_t) bool {
	var own unix.Stat_t
	return unix.Fstat(int(f.Fd()), &own) == nil && own.Dev == st.Dev && own.Ino == st.Ino
}

// sweepWaiting deletes the records of candidates that died waiting: those
// it can flock, which no live candidate holds, temporary ones included.
func (l *Locker) sweepWaiting(d *dir) {
	for _, name := range d.names() {
		if !strings.HasPrefix(name, l.waitingPrefix()) {
			continue
		}
		f, err := d.open(name, unix.O_RDONLY)
		if err != nil {
			continue // another user's, or gone
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			var st unix.Stat_t
			if unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && sameFile(f, &st) {
				_ = unix.Unlinkat(d.fd, name, 0)
			}
		}
		_ = f.Close()
	}
}

// Candidates lists the candidates waiting for the key (locker.Candidates):
// the records beside the lock file whose flock is held, read without
// taking any lock (the kernel's lock table says which are held), in the
// order they began to wait. That is no order of winning: whichever tries
// first after a release wins. A record another user left, which this
// user may not read, is not listed.
func (l *Locker) Candidates(ctx context.Context) ([]locker.Candidate, error) {
	out := []locker.Candidate{}
	d, err := l.lockDirRead()
	if err != nil {
		return nil, err
	}
	if d == nil {
		return out, nil
	}
	defer d.close()
	type found struct {
		name string
		c    locker.Candidate
	}
	var all []found
	for _, name := range d.names() {
		if !strings.HasPrefix(name, l.waitingPrefix()) || strings.HasSuffix(name, ".tmp") {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, err := d.open(name, unix.O_RDONLY)
		if err != nil {
			continue
		}
		b, rerr := io.ReadAll(io.LimitReader(f, 1<<16))
		h := locker.ParseHolder(b)
		held, ferr := flocked(f, h.PID, false)
		_ = f.Close()
		if rerr == nil && ferr == nil && held {
			all = append(all, found{name, locker.CandidateOf(b, 0)})
		}
	}
	slices.SortFunc(all, func(a, b found) int {
		return cmp.Or(a.c.Since.Compare(b.c.Since), strings.Compare(a.name, b.name))
	})
	for i, w := range all {
		w.c.Place = i
		out = append(out, w.c)
	}
	return out, nil
}
