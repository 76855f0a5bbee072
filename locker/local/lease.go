//go:build linux

package local

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// Lease is a held flock. It cannot expire; it is lost only if the lock file
// is deleted or replaced at its path, which Renew notices.
type Lease struct {
	file  *os.File
	path  string
	epoch uint64
	ttl   time.Duration

	lost locker.LostSignal
}

// Epoch is the persisted counter's value for this leadership.
func (l *Lease) Epoch() uint64 { return l.epoch }

// Renew checks that the file we lock is still the lock file and grants the
// requested TTL: a live flock has no expiry of its own.
func (l *Lease) Renew(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if !samePath(l.file, l.path) {
		l.markLost("lock file " + l.path + " was removed or replaced")
		return 0, fmt.Errorf("%s: %w", l.path, locker.ErrLost)
	}
	return l.ttl, nil
}

func (l *Lease) markLost(reason string) { l.lost.Mark(reason) }

// Lost is closed once Renew found the lock file replaced.
func (l *Lease) Lost() <-chan struct{} { return l.lost.Lost() }

// LostReason says why Lost was closed.
func (l *Lease) LostReason() string { return l.lost.LostReason() }

// Handle names the lock file; there is nothing to release from outside.
func (l *Lease) Handle() string { return l.path }

// Release clears the holder record and drops the flock. The lock file stays:
// deleting it would let two processes lock two different files.
func (l *Lease) Release(ctx context.Context) error {
	if samePath(l.file, l.path) {
		_ = l.file.Truncate(0)
	}
	return l.file.Close()
}

// LockFile is the open lock file whose flock is this leadership. The
// dead-man guard keeps a duplicate of its descriptor until the job is gone,
// so the lock outlives a leaderrun that dies first (DESIGN §1.9).
func (l *Lease) LockFile() *os.File { return l.file }
