//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A waiting candidate sleeps until the lock file may have been let go,
// instead of trying the flock every few milliseconds (which woke a standby
// hundreds of times a second). An flock is dropped when the last descriptor
// of its open file closes, which the kernel reports as a close of a file
// opened for writing; the dead-man guard, which unlocks a file that a
// frozen leaderrun still has open, touches its times to say so
// (guard.releaseLease); a lock file replaced at its path shows as a
// create, a rename or a delete in the directory. Other events are noise: a
// holder writing its record, `leaderrun status` reading it.
const watchMask = unix.IN_CLOSE_WRITE | unix.IN_ATTRIB | unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO

// recheckInterval bounds a wait with no event at all: an event lost to a
// full inotify queue, or a lock dropped without one.
const recheckInterval = 5 * time.Second

// controlRecheck bounds a wait on the control file with no event. Every
// write renames a new file over it, which inotify always reports (a full
// queue says so: IN_Q_OVERFLOW), so this is a backstop only, and a late
// pause or step-down is no safety matter: an idle leader wakes for its
// renewals rather than for its control record.
const controlRecheck = 30 * time.Second

// lockWatch reports events on one file, watched through its directory.
type lockWatch struct {
	f       *os.File
	name    string
	recheck time.Duration // the longest wait without an event
}

// watchLock starts watching path's directory, or returns nil when inotify is
// unavailable (no instances left): the caller then polls.
func watchLock(path string) *lockWatch {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(path), watchMask|unix.IN_ONLYDIR); err != nil {
		_ = unix.Close(fd)
		return nil
	}
	return &lockWatch{f: os.NewFile(uintptr(fd), "inotify"), name: filepath.Base(path), recheck: recheckInterval}
}

func (w *lockWatch) close() { _ = w.f.Close() }

// wait returns when the file had an event that may have freed it (or
// changed it), after w.recheck without one, or when ctx ends (with its
// error).
func (w *lockWatch) wait(ctx context.Context) error {
	_ = w.f.SetReadDeadline(time.Now().Add(w.recheck))
	stop := context.AfterFunc(ctx, func() { _ = w.f.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 4096)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			return err
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&(unix.IN_Q_OVERFLOW|unix.IN_IGNORED) != 0 || cString(name) == w.name {
				return nil
			}
		}
	}
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
