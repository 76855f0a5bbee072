//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/locker"
)

// Lease is a held flock. It cannot expire. It is lost when the lock file is
// deleted or replaced at its path, or when our open file no longer holds
// the lock: the dead-man guard, which shares that open file through its
// duplicate descriptor, unlocked it after killing the job (DESIGN §1.9).
// Renew notices either.
type Lease struct {
	file  *os.File
	path  string
	epoch uint64
	ttl   time.Duration
	// perFD: the kernel lists this descriptor's own locks in
	// /proc/self/fdinfo, the exact proof that the lock is ours; without it
	// (a kernel older than 4.1), the kernel's lock table must show an
	// flock on the file taken by this process.
	perFD bool
	pid   int

	lost locker.LostSignal
}

// Epoch is the persisted counter's value for this leadership.
func (l *Lease) Epoch() uint64 { return l.epoch }

// errNotOurs: the path no longer names our file, or our open file no
// longer holds the lock.
var errNotOurs = errors.New("lock no longer held")

// held proves that our open file still holds the flock and is still the
// file at the path. Any write to the lock file or a run record waits for
// it. An error that is not errNotOurs means the proof could not be read.
func (l *Lease) held() error {
	if !samePath(l.file, l.path) {
		return fmt.Errorf("%w: lock file %s was removed or replaced", errNotOurs, l.path)
	}
	var ok bool
	var err error
	if l.perFD {
		ok, err = ownsFlock(int(l.file.Fd()))
	} else {
		ok, err = flocked(l.file, l.pid, true)
	}
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: our descriptor of %s holds no lock any more (the dead-man guard released it)", errNotOurs, l.path)
	}
	return nil
}

// Renew proves the lock is still ours (held) and grants the requested TTL:
// a live flock has no expiry of its own. Once it is not, the lease is lost
// for good: Renew never takes the lock again.
func (l *Lease) Renew(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	select {
	case <-l.lost.Lost():
		return 0, fmt.Errorf("%s: %w: %s", l.path, locker.ErrLost, l.lost.LostReason())
	default:
	}
	err := l.held()
	if err == nil {
		err = l.ourRecord()
	}
	if err != nil {
		if !errors.Is(err, errNotOurs) {
			return 0, fmt.Errorf("check the lock on %s: %w", l.path, err)
		}
		l.markLost(err.Error())
		return 0, fmt.Errorf("%s: %w: %v", l.path, locker.ErrLost, err)
	}
	return l.ttl, nil
}

// ourRecord checks that the holder record in the lock file is still ours.
// Nothing but its holder writes it, and only before the term's first child;
// one truncated or overwritten by hand makes `leaderrun check` in the job
// say "not leader", so the term must not go on as if it led. Nothing is
// written back: once a guard may share the file, a write could land on the
// next holder's record.
func (l *Lease) ourRecord() error {
	b, err := io.ReadAll(io.NewSectionReader(l.file, 0, 1<<20))
	if err != nil {
		return fmt.Errorf("read holder record: %w", err)
	}
	if h := locker.ParseHolder(b); h.Epoch != l.epoch || h.PID != l.pid {
		return fmt.Errorf("%w: the holder record in %s is not ours any more (edited by hand)", errNotOurs, l.path)
	}
	return nil
}

func (l *Lease) markLost(reason string) { l.lost.Mark(reason) }

// Lost is closed once Renew found the lock no longer ours.
func (l *Lease) Lost() <-chan struct{} { return l.lost.Lost() }

// LostReason says why Lost was closed.
func (l *Lease) LostReason() string { return l.lost.LostReason() }

// Handle names the lock file; there is nothing to release from outside.
func (l *Lease) Handle() string { return l.path }

// Release drops the flock and closes our descriptor. The flock belongs to
// the open file, which the dead-man guard shares through its duplicate:
// unlocking drops it for both at once, where a close alone left it until
// the guard had exited too, milliseconds later on every handoff. The
// supervisor releases only once the job is gone, so nothing the guard
// watches is left to hold the lock for. Touching the file's times then
// wakes the waiting candidates (locker/local watches for it): with the
// guard's descriptor still open, our close is not the last one, and
// inotify reports none. It writes nothing: the holder record stays in the
// file, where a reader believes it only while an flock is held on it
// (Leader), and the next holder overwrites it. A release that cleared it
// could clear the next holder's record, once the lock had passed on
// without our knowing.
func (l *Lease) Release(ctx context.Context) error {
	fd := int(l.file.Fd())
	if err := unix.Flock(fd, unix.LOCK_UN); err == nil {
		now := unix.NsecToTimeval(time.Now().UnixNano())
		_ = unix.Futimes(fd, []unix.Timeval{now, now})
	}
	return l.file.Close()
}

// LockFile is the open lock file whose flock is this leadership. The
// dead-man guard keeps a duplicate of its descriptor until the job is gone,
// so the lock outlives a leaderrun that dies first (DESIGN §1.9).
func (l *Lease) LockFile() *os.File { return l.file }
