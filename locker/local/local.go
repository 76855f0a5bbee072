// Package local holds leadership of a key on one host: an flock on
// <dir>/<prefix>/<key>.lock and an epoch counter persisted beside it.
//
// The kernel drops an flock the moment its holder dies, so a standby takes
// over at once; there is no lease to expire and nothing to renew except the
// check that the lock file we hold is still the one at the path.
package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/locker"
)

// pollInterval is how often a waiting candidate retries the flock. A
// non-blocking try keeps Acquire cancellable; 20ms costs nothing and makes
// the takeover look instant.
const pollInterval = 20 * time.Millisecond

// Config configures the local backend.
type Config struct {
	locker.Options
	// Dir is the lock directory; see DefaultDir.
	Dir string
}

// DefaultDir is /run/leaderrun when writable, else
// $XDG_RUNTIME_DIR/leaderrun, else /tmp/leaderrun-UID (DESIGN §2).
func DefaultDir() string {
	if unix.Access("/run", unix.W_OK) == nil {
		return "/run/leaderrun"
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		return filepath.Join(x, "leaderrun")
	}
	return filepath.Join(os.TempDir(), "leaderrun-"+strconv.Itoa(os.Getuid()))
}

// Locker campaigns for a key with flock.
type Locker struct {
	opts     locker.Options
	lockPath string
	epochDir string
}

// New checks the configuration and creates the lock directory.
func New(cfg Config) (*Locker, error) {
	if err := locker.ValidateKey(cfg.Key); err != nil {
		return nil, fmt.Errorf("--key %w", err)
	}
	if err := locker.ValidatePrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("--prefix %w", err)
	}
	if cfg.Dir == "" {
		cfg.Dir = DefaultDir()
	}
	base := filepath.Join(cfg.Dir, cfg.Prefix, cfg.Key)
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return nil, fmt.Errorf("--lock-dir: %w: %w", locker.ErrRefused, err)
	}
	return &Locker{opts: cfg.Options, lockPath: base + ".lock", epochDir: filepath.Dir(base)}, nil
}

// Acquire takes the flock, waiting unless NoWait, then bumps the epoch.
func (l *Locker) Acquire(ctx context.Context) (locker.Lease, error) {
	for {
		f, err := l.tryLock()
		if err == nil {
			lease, err := l.lead(f)
			if err != nil {
				_ = f.Close()
			}
			return lease, err
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, err
		}
		if l.opts.NoWait {
			return nil, fmt.Errorf("%s: %w", l.lockPath, locker.ErrHeld)
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// tryLock opens the lock file and takes a non-blocking exclusive flock. A
// file replaced at the path while we waited for it is retried.
func (l *Locker) tryLock() (*os.File, error) {
	f, err := os.OpenFile(l.lockPath, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w: %w", locker.ErrRefused, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, unix.EWOULDBLOCK
		}
		return nil, fmt.Errorf("flock %s: %w", l.lockPath, err)
	}
	if !samePath(f, l.lockPath) {
		_ = f.Close()
		return nil, unix.EWOULDBLOCK
	}
	return f, nil
}

// lead bumps the epoch under the lock and records us as the holder.
func (l *Locker) lead(f *os.File) (*Lease, error) {
	epoch, err := l.nextEpoch()
	if err != nil {
		return nil, err
	}
	h := locker.NewHolder(l.opts)
	h.Epoch = epoch
	if err := f.Truncate(0); err != nil {
		return nil, fmt.Errorf("write holder record: %w", err)
	}
	if _, err := f.WriteAt(h.Record(), 0); err != nil {
		return nil, fmt.Errorf("write holder record: %w", err)
	}
	return &Lease{file: f, path: l.lockPath, epoch: epoch, ttl: l.opts.TTL, lost: make(chan struct{})}, nil
}

// nextEpoch reads, increments and durably rewrites the counter: write a
// temporary file, fsync, rename, fsync the directory (DESIGN §1.1). The
// caller holds the flock, so no other process races it.
func (l *Locker) nextEpoch() (uint64, error) {
	path := strings.TrimSuffix(l.lockPath, ".lock") + ".epoch"
	var cur uint64
	if b, err := os.ReadFile(path); err == nil {
		cur, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("epoch file %s is corrupt: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("read epoch: %w", err)
	}
	next := cur + 1
	tmp := path + ".tmp"
	if err := writeSynced(tmp, []byte(strconv.FormatUint(next, 10)+"\n")); err != nil {
		return 0, fmt.Errorf("write epoch: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, fmt.Errorf("write epoch: %w", err)
	}
	if d, err := os.Open(l.epochDir); err == nil {
		err = d.Sync()
		_ = d.Close()
		if err != nil {
			return 0, fmt.Errorf("sync lock directory: %w", err)
		}
	}
	return next, nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Leader reads the holder record of a key whose flock is held.
func (l *Locker) Leader(ctx context.Context) (locker.Holder, error) {
	f, err := l.tryLock()
	if err == nil {
		// We got the lock: nobody holds it.
		_ = f.Close()
		return locker.Holder{}, fmt.Errorf("%s: %w", l.lockPath, locker.ErrNoLeader)
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		return locker.Holder{}, err
	}
	b, err := os.ReadFile(l.lockPath)
	if err != nil {
		return locker.Holder{}, fmt.Errorf("read holder record: %w", err)
	}
	return locker.ParseHolder(b), nil
}

// ReleaseHandle has nothing to do: the kernel released the flock when its
// holder died.
func (l *Locker) ReleaseHandle(ctx context.Context, handle string) error { return nil }

// Close does nothing; a held lease is released through the Lease.
func (l *Locker) Close() error { return nil }

// samePath reports whether the open file is still the one at path, so a
// lock file deleted or replaced by hand counts as lost leadership.
func samePath(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}
