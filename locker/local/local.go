//go:build linux

// Package local holds leadership of a key on one host: an flock on
// <dir>/<prefix>/<key>.lock and an epoch counter on persistent storage.
//
// The kernel drops an flock the moment its holder dies, so a standby takes
// over at once; there is no lease to expire and nothing to renew except the
// check that the lock file we hold is still the one at the path and that
// our open file still holds the flock (the dead-man guard, which shares it,
// may have let it go).
//
// Where things live (DESIGN §1.13, §2), none of it read from the
// environment:
//   - lock directory: /run/leaderrun for root, /tmp/leaderrun-UID for
//     others (created 0700, refused unless owned by that user and writable
//     by nobody else), or an absolute --lock-dir;
//   - host directory, where a copy of every lock's epoch lasts (through
//     a reboot, and a lock directory deleted by hand): /var/lib/leaderrun
//     for root, /var/tmp/leaderrun-UID for others (checked like the
//     per-user lock directory);
//   - state directory (a copy of the counter, run records): --state-dir,
//     else the lock directory itself when it was given and is not tmpfs,
//     else the host directory.
//
// The epoch is one more than the largest counter found in any of these
// places (and in $XDG_STATE_HOME/leaderrun or ~/.local/state/leaderrun,
// where earlier versions kept it), and is written to each.
//
// Nothing in these directories is opened through a symlink or left open to
// other users (safefs.go).
package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
)

// pollInterval is how often a waiting candidate retries the flock when it
// cannot watch the lock file (no inotify instance left): a non-blocking
// try keeps Acquire cancellable.
const pollInterval = 20 * time.Millisecond

// Config configures the local backend.
type Config struct {
	locker.Options
	// Dir is the lock directory, an absolute path; empty means DefaultDir.
	Dir string
	// StateDir is where the run records and a copy of the epoch counter
	// persist, an absolute path; empty means Dir when Dir was given and is
	// not on tmpfs or ramfs, else the host directory (hostDir).
	StateDir string
	// ReadOnly is for status and check: New and Leader create nothing and
	// a missing lock directory is an error, not "no leader".
	ReadOnly bool
}

// DefaultDir is the lock directory when none is given: /run/leaderrun for
// root, /tmp/leaderrun-UID for anyone else. It never depends on the
// environment, so a cron run and a login shell of the same user lock the
// same file (DESIGN §1.13).
func DefaultDir() string {
	if os.Geteuid() == 0 {
		return "/run/leaderrun"
	}
	return "/tmp/leaderrun-" + strconv.Itoa(os.Geteuid())
}

// hostDir is where the epoch of a lock in a volatile directory persists,
// fixed for each user on a host: /var/lib/leaderrun for root,
// /var/tmp/leaderrun-UID (FHS: kept across reboots) for anyone else. Like
// DefaultDir it never depends on the environment, so the same key run from
// cron and from a login shell counts on one counter (DESIGN §1.13). Tests
// point it elsewhere.
var hostDir = func(uid int) string {
	if uid == 0 {
		return "/var/lib/leaderrun"
	}
	return "/var/tmp/leaderrun-" + strconv.Itoa(uid)
}

// homeStateDir is where versions before the host directory kept an
// ordinary user's epoch: $XDG_STATE_HOME/leaderrun or
// ~/.local/state/leaderrun (home from $HOME, else the password database).
// It is one more place to read the counter from and to keep a copy in, when
// it can be written; "" when there is none.
func homeStateDir() string {
	if x := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "leaderrun")
	}
	home := os.Getenv("HOME")
	if !filepath.IsAbs(home) {
		u, err := user.LookupId(strconv.Itoa(os.Geteuid()))
		if err != nil || !filepath.IsAbs(u.HomeDir) {
			return ""
		}
		home = u.HomeDir
	}
	return filepath.Join(home, ".local", "state", "leaderrun")
}

// counter is one place the epoch counter is kept: the file name in the
// directory rel below the configured directory root.
type counter struct {
	root, rel, name string
	field           string // the setting that chooses root
	// spare: a copy at a place that depends on the environment (an
	// earlier version's state directory) or that an explicit --state-dir
	// stands in for; failing to read or write it fails nothing.
	spare bool
}

func (c counter) path() string { return filepath.Join(c.root, c.rel, c.name) }

// Locker campaigns for a key with flock.
type Locker struct {
	// Core implements locker.Controls, locker.History and locker.RunLog
	// on the Locker's records.Store (records.go).
	*records.Core

	opts     locker.Options
	lockPath string // <dir>/<prefix>/<key>.lock
	lockDir  string // its directory
	lockRel  string // its directory below dir: <prefix>[/<key's dirs>]
	lockName string // its name: <key's last part>.lock
	// counters are every place the epoch counter is kept: beside the lock
	// file; in the host directory; in the state directory; in an earlier
	// version's per-user state directory. The next epoch exceeds the
	// largest of them and is written to each.
	counters []counter
	runRel   string // <prefix>/<key>~run below stateDir: once-per records
	histRel  string // <prefix>/<key>~history below stateDir: term records
	runDir   string // their paths
	histDir  string
	// oldRunDir is where an earlier version kept them by default for an
	// ordinary user (its per-user state directory), read as well:
	// oldRunRel below oldRunRoot.
	oldRunDir, oldRunRoot, oldRunRel string
	dir                              string // the lock directory as configured
	stateDir                         string // the state directory: run records, a counter copy
	// defaultDir: dir is DefaultDir, checked (checkOwnDir) whenever it is
	// used.
	defaultDir bool
	// ownHost: the host directory is a per-user one, checked like
	// DefaultDir.
	ownHost  string
	readOnly bool
}

// New checks the configuration: the lock, state and host directories and
// every directory above them must be ones no other user can replace
// entries in, and what leaderrun keeps in them must be ours. It creates
// nothing: the directories are made when first written to (Acquire,
// SetControl, RecordRun, RecordTerm), so a run refused later in its
// start-up leaves nothing behind (DESIGN §1.10). A refused setting is a
// *locker.ConfigError.
func New(cfg Config) (*Locker, error) {
	if err := cfg.ValidateName(); err != nil {
		return nil, &locker.ConfigError{Field: "Key", Rule: err.Error()}
	}
	if err := locker.ValidatePrefix(cfg.Prefix); err != nil {
		return nil, &locker.ConfigError{Field: "Prefix", Rule: err.Error()}
	}
	explicit := cfg.Dir != ""
	if !explicit {
		cfg.Dir = DefaultDir()
	}
	if !filepath.IsAbs(cfg.Dir) {
		return nil, &locker.ConfigError{Field: "Dir", Rule: fmt.Sprintf("must be an absolute path, got %q", cfg.Dir)}
	}
	if cfg.StateDir != "" && !filepath.IsAbs(cfg.StateDir) {
		return nil, &locker.ConfigError{Field: "StateDir", Rule: fmt.Sprintf("must be an absolute path, got %q", cfg.StateDir)}
	}
	cfg.Dir = filepath.Clean(cfg.Dir)
	rel := filepath.Join(cfg.Prefix, cfg.Name())
	l := &Locker{opts: cfg.Options, lockPath: filepath.Join(cfg.Dir, rel) + ".lock", dir: cfg.Dir, defaultDir: !explicit, readOnly: cfg.ReadOnly}
	l.lockDir = filepath.Dir(l.lockPath)
	l.lockRel = filepath.Dir(rel)
	l.lockName = filepath.Base(rel) + ".lock"

	if cfg.ReadOnly {
		d, err := openDir(cfg.Dir, "Dir", false)
		if err != nil {
			return nil, readError(cfg.Dir, err)
		}
		d.close()
	}

	// A lock directory that was given and is on disk keeps the counter
	// beside the lock file through a reboot; any other (the default ones,
	// a tmpfs) is emptied by one. The host directory keeps a copy either
	// way, so an epoch outlives the lock directory wiped by hand too.
	lasting := explicit && !volatile(cfg.Dir)
	host := hostDir(os.Geteuid())
	if os.Geteuid() != 0 {
		l.ownHost = host
	}
	state := cfg.StateDir
	if state == "" {
		state = cfg.Dir
		if !lasting {
			state = host
		}
	}
	state = filepath.Clean(state)
	l.stateDir = state
	l.runRel, l.histRel = rel+"~run", rel+"~history"
	l.runDir, l.histDir = filepath.Join(state, l.runRel), filepath.Join(state, l.histRel)
	epochName := filepath.Base(rel) + ".epoch"
	l.addCounter(counter{root: cfg.Dir, rel: l.lockRel, name: epochName, field: "Dir"})

	// The host directory's copy of a volatile lock directory's counter is
	// shared by all of them (<host>/<prefix>/<key>.epoch, as before); that
	// of an on-disk lock directory is named after the lock file's path
	// (<host>/by-path/<lock dir>/<prefix>/<key>.epoch), which depends on
	// nothing but the configuration, as the lock itself.
	hostCopy := counter{root: host, rel: l.lockRel, name: epochName, field: "StateDir"}
	if lasting {
		hostCopy.rel = filepath.Join("by-path", strings.TrimPrefix(cfg.Dir, "/"), l.lockRel)
	}
	if !cfg.ReadOnly && state != host {
		// A host directory that cannot be made (no /var/tmp, a read-only
		// /var) leaves the counter to the state directory when one was
		// given, or to the on-disk lock directory.
		if err := l.checkRoot(host, hostCopy.rel, "StateDir", l.ownHost != "", hostCopy.name); err != nil {
			if cfg.StateDir == "" && !lasting {
				return nil, err
			}
			hostCopy.spare = true
		}
	}
	l.addCounter(hostCopy)
	l.addCounter(counter{root: state, rel: l.lockRel, name: epochName, field: "StateDir"})
	if os.Geteuid() != 0 {
		if home := homeStateDir(); home != "" {
			l.addCounter(counter{root: home, rel: l.lockRel, name: epochName, field: "StateDir", spare: true})
			if cfg.StateDir == "" && !lasting {
				l.oldRunRoot, l.oldRunRel = home, l.runRel
				l.oldRunDir = filepath.Join(home, l.runRel)
			}
		}
	}
	l.Core = newRecords(l)
	if cfg.ReadOnly {
		return l, nil
	}
	// Every check before anything is made; and nothing is made here.
	if err := l.checkRoot(cfg.Dir, l.lockRel, "Dir", l.defaultDir, l.lockName, epochName); err != nil {
		return nil, err
	}
	if state == host {
		if err := l.checkRoot(host, l.lockRel, "StateDir", l.ownHost != "", epochName); err != nil {
			return nil, err
		}
	} else if err := l.checkRoot(state, l.lockRel, "StateDir", false, epochName); err != nil {
		return nil, err
	}
	return l, nil
}

// readError is the refusal of a lock directory that status or check
// cannot read.
func readError(path string, err error) error {
	var ce *locker.ConfigError
	if errors.As(err, &ce) && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return &locker.ConfigError{Field: "Dir", Rule: "lock directory " + path + " cannot be read", Err: unwrapPath(err)}
}

// checkRoot reports, before anything is made, what would stop leaderrun
// using the directory rel below the configured directory root (field
// names its setting) and the files in it: root or a directory above it
// that another user could replace entries in, a per-user default
// directory someone else controls (own), an entry of another user's or a
// symlink on the way, a file in the way, or no permission to write where
// a directory or file would be made (for root too on a read-only mount).
func (l *Locker) checkRoot(root, rel, field string, own bool, files ...string) error {
	if own {
		if err := checkOwnDir(root, field); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	exists, err := checkDir(root, field)
	if err != nil || !exists {
		return err
	}
	base, err := openDir(root, field, false)
	if err != nil {
		return err
	}
	defer base.close()
	d := base
	for _, name := range splitPath(rel) {
		if name == "" || name == "." {
			continue
		}
		next, err := d.sub(name, false)
		if errors.Is(err, os.ErrNotExist) {
			err = writableAt(d.fd, d.path)
			if d != base {
				d.close()
			}
			if err != nil {
				return &locker.ConfigError{Field: field, Rule: "cannot create " + filepath.Join(d.path, name) + ": cannot write to " + d.path, Err: err}
			}
			return nil
		}
		if d != base {
			d.close()
		}
		if err != nil {
			return err
		}
		d = next
	}
	if d != base {
		defer d.close()
	}
	if err := writableAt(d.fd, d.path); err != nil {
		return &locker.ConfigError{Field: field, Rule: "cannot write to " + d.path, Err: err}
	}
	for _, name := range files {
		var st unix.Stat_t
		path := filepath.Join(d.path, name)
		err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case errors.Is(err, unix.ENOENT):
			continue
		case err != nil:
			return &locker.ConfigError{Field: field, Rule: "cannot read " + path, Err: err}
		case st.Mode&unix.S_IFMT != unix.S_IFREG:
			return &locker.ConfigError{Field: field, Rule: path + " is not a regular file (a symlink is refused)"}
		case int(st.Uid) != os.Geteuid():
			return &locker.ConfigError{Field: field, Rule: fmt.Sprintf("%s is owned by uid %d, not by uid %d; refusing a file another user made", path, st.Uid, os.Geteuid())}
		}
		if err := unix.Faccessat(d.fd, name, unix.R_OK|unix.W_OK, unix.AT_EACCESS); err != nil {
			return &locker.ConfigError{Field: field, Rule: "cannot open " + path + " for writing", Err: err}
		}
	}
	return nil
}

// unwrapPath is the cause of a *fs.PathError, whose path the rule names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// addCounter adds a place for the epoch counter, once.
func (l *Locker) addCounter(c counter) {
	for i, o := range l.counters {
		if o.path() == c.path() {
			l.counters[i].spare = o.spare && c.spare
			return
		}
	}
	l.counters = append(l.counters, c)
}

// openRoot opens the configured directory root (field names its setting)
// and the directory rel below it, making what is missing when create. A
// per-user default directory is checked as such (checkOwnDir) once it is
// there, and narrowed to mode 0700 if an earlier version made it wider.
func (l *Locker) openRoot(root, rel, field string, create bool) (*dir, error) {
	own := root == l.dir && l.defaultDir || root == l.ownHost && l.ownHost != ""
	if own && create {
		if err := ownDir(root, field); err != nil {
			return nil, err
		}
	}
	return openTree(root, rel, field, create)
}

// ownDir creates a default lock directory (or a user's host directory),
// or checks the existing one (checkOwnDir) and narrows its mode to 0700.
func ownDir(dir, field string) error {
	err := os.Mkdir(dir, dirMode)
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fsError(field, "cannot create "+dir, err)
	}
	if err := checkOwnDir(dir, field); err != nil {
		return err
	}
	if fi, err := os.Lstat(dir); err == nil && fi.Mode().Perm()&^dirMode != 0 {
		_ = os.Chmod(dir, dirMode)
	}
	return nil
}

// checkOwnDir checks a default lock directory (or a user's host
// directory): a real directory (not a symlink), owned by us, writable by
// nobody else. Another user could otherwise squat the fixed path and steal
// or block our locks, or rewind our epoch. field names the setting that
// chooses another directory. A missing one is an error that
// errors.Is(os.ErrNotExist).
func checkOwnDir(dir, field string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return &locker.ConfigError{Field: field, Rule: "cannot read " + dir, Err: err}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return &locker.ConfigError{Field: field, Rule: dir + " is not a directory (a symlink or file is refused)"}
	case !ok || int(st.Uid) != os.Geteuid():
		return &locker.ConfigError{Field: field, Rule: fmt.Sprintf("%s is owned by uid %d, not by uid %d; refusing a directory another user controls", dir, st.Uid, os.Geteuid())}
	case fi.Mode().Perm()&0o022 != 0:
		return &locker.ConfigError{Field: field, Rule: fmt.Sprintf("%s has mode %v: writable by others; refusing it", dir, fi.Mode().Perm())}
	}
	return nil
}

// volatile reports whether dir (or, while it is missing, the nearest
// directory above it, where it would be made) is on a file system that a
// reboot empties (tmpfs, ramfs), where an epoch counter would start over.
func volatile(dir string) bool {
	var st unix.Statfs_t
	for {
		err := unix.Statfs(dir, &st)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.ENOENT) || filepath.Dir(dir) == dir {
			return true // cannot tell: keep the epoch where it surely persists
		}
		dir = filepath.Dir(dir)
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}

// Acquire takes the flock, waiting unless NoWait, then bumps the epoch.
// A waiting candidate keeps its lock file open between tries (closing it
// would itself be an event that wakes every other waiter) and sleeps until
// the file shows a sign of being let go (wait.go).
func (l *Locker) Acquire(ctx context.Context) (locker.Lease, error) {
	if l.readOnly {
		return nil, fmt.Errorf("local: %w: opened read-only", locker.ErrRefused)
	}
	// The lock directory is made before the watch starts, so a first
	// run's waiting candidates watch it too.
	d, err := l.openRoot(l.dir, l.lockRel, "Dir", true)
	if err != nil {
		return nil, err
	}
	d.close()
	var w *lockWatch
	if !l.opts.NoWait {
		// Watching starts before the first try, so a release between the
		// try and the wait is not missed.
		if w = watchLock(l.lockPath); w != nil {
			defer w.close()
		}
	}
	var f *os.File
	var nextTakeOver time.Time // a look for a holder of ours scans /proc
	var wait *waiting          // the record of our wait, for status (waiting.go)
	entered := false
	defer func() { l.leaveWaiting(wait) }()
	for {
		if f == nil {
			if f, err = l.openLock(); err != nil {
				return nil, err
			}
		}
		err := l.tryLock(f)
		if err == nil {
			// Ours alone, or replaced by a file that is (lockfile.go).
			f, err = l.claim(ctx, f)
		} else if errors.Is(err, unix.EWOULDBLOCK) && !time.Now().Before(nextTakeOver) {
			// Held: by another user only, through a descriptor of a file
			// an earlier version left open to all? Then it is replaced.
			nf, terr := l.takeOver(ctx, f)
			switch {
			case terr != nil:
				_ = f.Close()
				f, err = nil, terr
			case nf != nil:
				_ = f.Close()
				f, err = nf, nil
			default:
				nextTakeOver = time.Now().Add(takeOverInterval)
			}
		}
		if err == nil {
			lease, err := l.lead(ctx, f)
			if err != nil {
				_ = f.Close()
			}
			if errors.Is(err, errReplaced) {
				f = nil
				continue
			}
			return lease, err
		}
		if errors.Is(err, errReplaced) {
			if f != nil {
				_ = f.Close()
			}
			f = nil
			continue
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			if f != nil {
				_ = f.Close()
			}
			return nil, err
		}
		if l.opts.NoWait {
			defer f.Close()
			if h, ok := l.holderOf(ctx, f); ok && h.ID != "" {
				return nil, fmt.Errorf("%s: %w by %s", l.lockPath, locker.ErrHeld, h.ID)
			}
			return nil, fmt.Errorf("%s: %w", l.lockPath, locker.ErrHeld)
		}
		if !entered {
			wait, entered = l.enterWaiting(), true
		}
		if err := l.sleep(ctx, w); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
}

// sleep waits for a sign that the lock was let go, or polls without inotify.
func (l *Locker) sleep(ctx context.Context, w *lockWatch) error {
	if w != nil {
		return w.wait(ctx)
	}
	if !retry.Sleep(ctx, pollInterval) {
		return ctx.Err()
	}
	return nil
}

// errReplaced: the file we locked is no longer the one at the path.
var errReplaced = errors.New("lock file replaced")

// openLock opens (creating, mode 0600, never through a symlink) the lock
// file, from the lock directory resolved afresh: one removed or moved away
// while we waited (wiped by hand, or a tmpfs unmounted) is made again at
// its path, as the first run made it (the lock's holder has lost, and the
// candidates go on campaigning), never followed to where it went.
func (l *Locker) openLock() (*os.File, error) {
	d, err := l.openRoot(l.dir, l.lockRel, "Dir", true)
	if err != nil {
		return nil, err
	}
	defer d.close()
	return d.openLockable(l.lockName)
}

// claim is dir.claim for the lock file f, which we have just locked at
// its path: f itself, or the fresh file that replaced it, locked. f is
// closed unless returned, and on an error the result is nil.
func (l *Locker) claim(ctx context.Context, f *os.File) (*os.File, error) {
	if !fileExposed(f) {
		return f, nil // the common case, without opening the directory
	}
	d, err := l.openRoot(l.dir, l.lockRel, "Dir", true)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	defer d.close()
	return d.claim(ctx, f, l.lockName)
}

// takeOver is dir.takeOver for the lock file f, held by another open
// file.
func (l *Locker) takeOver(ctx context.Context, f *os.File) (*os.File, error) {
	if !fileExposed(f) {
		return nil, nil
	}
	d, err := l.openRoot(l.dir, l.lockRel, "Dir", true)
	if err != nil {
		return nil, err
	}
	defer d.close()
	return d.takeOver(ctx, f, l.lockName)
}

// tryLock takes a non-blocking exclusive flock on f. A file replaced at
// the path while we waited for it yields errReplaced (and no lock).
func (l *Locker) tryLock(f *os.File) error {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			if !samePath(f, l.lockPath) {
				return errReplaced
			}
			return unix.EWOULDBLOCK
		}
		return fmt.Errorf("flock %s: %w", l.lockPath, err)
	}
	if !samePath(f, l.lockPath) {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return errReplaced
	}
	return nil
}

// pendingRecord is what a new holder writes into the lock file the moment
// it has the flock, before its epoch is durable: a holder record of epoch
// 0 (no term yet), with After the epoch of the record it replaced, so
// that the count the lock file keeps (lastRecordEpoch) is not lost should
// it die before its own record. A reader never takes the record of the
// previous holder for the lock's (Leader): the pid in it is not the
// lock's.
type pendingRecord struct {
	locker.Holder
	After uint64 `json:"after,omitempty"`
}

// lead bumps the epoch under the lock and records us as the holder. It
// also finds out how Renew can prove the lock is still ours: the kernel
// must show the lock it just granted, per descriptor or at least in its
// lock table.
func (l *Locker) lead(ctx context.Context, f *os.File) (*Lease, error) {
	floor := lastRecordEpoch(f)
	h := locker.NewHolder(l.opts)
	if err := writeRecord(f, pendingRecord{Holder: h, After: floor}); err != nil {
		return nil, err
	}
	if err := waitReplacedHolders(ctx, f, l.lockPath); err != nil {
		return nil, err
	}
	if !samePath(f, l.lockPath) {
		// Replaced since we locked it (maybe while we waited): try the
		// file that is there now.
		return nil, errReplaced
	}
	lease := &Lease{file: f, path: l.lockPath, ttl: l.opts.TTL, pid: os.Getpid()}
	// Unreadable fdinfo counts as none: the lock table may still do.
	lease.perFD, _ = ownsFlock(int(f.Fd()))
	if err := lease.held(); err != nil {
		return nil, fmt.Errorf("%w: the kernel does not show the lock just taken on %s, so it could not be checked later: %w", locker.ErrRefused, l.lockPath, err)
	}
	epoch, err := l.nextEpoch(ctx, floor)
	if err != nil {
		return nil, err
	}
	h.Epoch = epoch
	// No dead-man guard shares this open file yet: nothing but us can
	// unlock it, so the proof above still holds.
	if err := writeRecord(f, h); err != nil {
		return nil, err
	}
	lease.epoch = epoch
	return lease, nil
}

// writeRecord replaces the content of the lock file with v's JSON, padded
// with spaces to the length of what was there (JSON allows them): no
// truncation, which on a journalled file system cost most of a
// millisecond, twice on every failover. The file grows only to its
// longest record.
func writeRecord(f *os.File, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("write holder record: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("write holder record: %w", err)
	}
	if n := fi.Size(); n > int64(len(b)) && n <= 1<<20 {
		b = append(b, bytes.Repeat([]byte{' '}, int(n)-len(b))...)
	} else if n > 1<<20 {
		// Not a record of ours: start afresh.
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("write holder record: %w", err)
		}
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write holder record: %w", err)
	}
	return nil
}

// lastRecordEpoch is the epoch in the holder record the last holder left
// in the lock file (a release leaves it there), or the one a pending
// record carries, 0 for none. It is one more place the count is kept: a
// counter file edited lower or deleted by hand beside a lock file that is
// still there cannot make an epoch repeat.
func lastRecordEpoch(f *os.File) uint64 {
	b, _ := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	var p pendingRecord
	if json.Unmarshal(b, &p) != nil {
		return 0
	}
	return max(p.Epoch, p.After)
}

// nextEpoch reads the counter at every place it is kept and durably writes
// one more than the largest, and than floor (the lock file's last record),
// to each (DESIGN §1.1, §1.13). The caller holds the flock, so no other
// candidate of this lock races it; a place that other locks share too (the
// host or a state directory) is only ever raised (raiseEpoch).
func (l *Locker) nextEpoch(ctx context.Context, floor uint64) (uint64, error) {
	cur := floor
	dirs := make([]*dir, len(l.counters))
	defer func() {
		for _, d := range dirs {
			if d != nil {
				d.close()
			}
		}
	}()
	for i, c := range l.counters {
		d, err := l.openRoot(c.root, c.rel, c.field, true)
		if err != nil {
			if c.spare {
				continue
			}
			return 0, err
		}
		dirs[i] = d
		n, err := readEpoch(d, c.name)
		if err != nil {
			if c.spare {
				dirs[i] = nil
				d.close()
				continue
			}
			return 0, err
		}
		cur = max(cur, n)
	}
	if cur == math.MaxUint64 {
		return 0, fmt.Errorf("%w: the epoch counter of %s is at its largest value and cannot grow", locker.ErrRefused, l.lockPath)
	}
	next := cur + 1
	// The places are written at once: their fsyncs overlap, and the new
	// holder's first child waits for the slowest alone.
	errs := make([]error, len(l.counters))
	var wg sync.WaitGroup
	for i, c := range l.counters {
		if dirs[i] == nil {
			continue
		}
		wg.Go(func() { errs[i] = raiseEpoch(ctx, dirs[i], c.name, next) })
	}
	wg.Wait()
	for i, c := range l.counters {
		if errs[i] != nil && !c.spare {
			return 0, fmt.Errorf("write epoch: %w", errs[i])
		}
	}
	return next, nil
}

// epochLock is the file in a counter's directory whose flock a writer of a
// counter there holds ('~' is never part of a key, so it is no key's
// file). A file, not the directory: no other user can open it (0600 in a
// 0700 directory), so none can hold it and wedge the writers.
const epochLock = "~epoch.lock"

// raiseEpoch durably makes the counter name in d at least n: under the
// flock of d's epochLock, it reads the counter and, if smaller, replaces
// it (temporary file, fsync, rename, fsync of the directory). Two holders
// of different locks that share the file then cannot lower each other's
// value, nor write the same temporary file at once.
func raiseEpoch(ctx context.Context, d *dir, name string, n uint64) error {
	lf, err := d.lockPrivate(ctx, epochLock)
	if err != nil {
		return err
	}
	defer lf.Close() // drops the flock
	cur, err := readEpoch(d, name)
	if err != nil {
		return err
	}
	if cur >= n {
		return nil
	}
	return d.replace(name, []byte(strconv.FormatUint(n, 10)+"\n"))
}

// readEpoch reads the counter name in d; a missing one counts as 0.
func readEpoch(d *dir, name string) (uint64, error) {
	b, err := d.readFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read epoch: %w", err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("epoch file %s is corrupt: %w", filepath.Join(d.path, name), err)
	}
	return n, nil
}

// lockDirRead opens the directory of the lock file for reading, creating
// nothing: nil, nil when it (or the lock directory's prefix) does not
// exist; a missing lock directory is a *locker.ConfigError.
func (l *Locker) lockDirRead() (*dir, error) {
	root, err := openDir(l.dir, "Dir", false)
	if err != nil {
		return nil, readError(l.dir, err)
	}
	defer root.close()
	d, err := root.sub(l.lockRel, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return d, err
}

// openLockRead opens the lock file for reading, creating nothing. A
// missing lock directory is a *locker.ConfigError; a missing lock file
// (or prefix directory) is nil, nil.
func (l *Locker) openLockRead() (*os.File, error) {
	d, err := l.lockDirRead()
	if d == nil || err != nil {
		return nil, err
	}
	defer d.close()
	f, err := d.open(l.lockName, unix.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return f, err
}

// Leader reads the holder record of a key whose flock is held. It opens the
// lock file read-only and takes no lock: whether the file is locked, and by
// which process, comes from /proc/locks, so it needs only read access,
// creates nothing, and never makes a candidate's attempt fail for the
// moment of the read. The record counts only when the process that holds
// the lock wrote it (holderOf): a record left by a gone holder is not
// live, nor is the last term's while a new holder has the lock and has not
// yet written its own.
func (l *Locker) Leader(ctx context.Context) (locker.Holder, error) {
	f, err := l.openLockRead()
	if err != nil {
		return locker.Holder{}, err
	}
	if f == nil {
		if !l.traced() {
			return locker.Holder{}, l.neverUsed()
		}
		return locker.Holder{}, fmt.Errorf("%s: %w", l.lockPath, locker.ErrNoLeader)
	}
	defer f.Close()
	h, held, err := l.readHolder(ctx, f)
	if err != nil {
		return locker.Holder{}, err
	}
	if !held {
		return locker.Holder{}, fmt.Errorf("%s: %w", l.lockPath, locker.ErrNoLeader)
	}
	return h, nil
}

// foreignWait is how long a reader waits for the process that holds the
// lock to write its record before it names that process as a holder that
// is no leaderrun of this key: a new holder writes a pending record the
// moment it has the lock.
const foreignWait = 500 * time.Millisecond

// holderOf is readHolder for Acquire's message: who holds f, if anyone
// can tell.
func (l *Locker) holderOf(ctx context.Context, f *os.File) (locker.Holder, bool) {
	h, held, err := l.readHolder(ctx, f)
	return h, err == nil && held
}

// readHolder reads the holder of the lock file f: held is false when no
// process holds an flock on it. The record in the file is the holder when
// the lock's process wrote it (its pid, in any pid namespace, or a pid the
// kernel cannot name in ours: a holder that died, whose guard holds its
// lock). Otherwise, once foreignWait passed, the holder is the lock's
// process, named "pid N (flock), not a leaderrun".
func (l *Locker) readHolder(ctx context.Context, f *os.File) (locker.Holder, bool, error) {
	deadline := time.Now().Add(foreignWait)
	for {
		b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
		if err != nil {
			return locker.Holder{}, false, fmt.Errorf("read holder record: %w", err)
		}
		h := locker.ParseHolder(b)
		pids, err := flockPIDs(f, h.PID)
		if err != nil {
			return locker.Holder{}, false, err
		}
		if len(pids) == 0 {
			return locker.Holder{}, false, nil
		}
		for _, pid := range pids {
			if pid <= 0 || h.PID > 0 && (pid == h.PID || innermostPID(pid) == h.PID) {
				return h, true, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return locker.Holder{ID: fmt.Sprintf("pid %d (flock), not a leaderrun", pids[0]), PID: pids[0]}, true, nil
		}
		retry.Sleep(ctx, pollInterval)
	}
}

// traced reports whether anything but the lock file shows that the key was
// used with this configuration: an epoch counter at a place that depends on
// the uid and the settings alone (not an earlier version's per-user copy,
// which a wrong --lock-dir would share), or the once-per records. A
// counter that cannot be read counts as a trace: only "nothing there" is
// never used.
func (l *Locker) traced() bool {
	paths := []string{l.runDir}
	for _, c := range l.counters {
		if !c.spare {
			paths = append(paths, c.path())
		}
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			return true
		}
	}
	return false
}

// neverUsed is Leader's answer for a key with no trace: it names the lock
// directory, and the state directory when that is another.
func (l *Locker) neverUsed() error {
	where := l.dir + " (local lock dir)"
	if l.stateDir != l.dir {
		where += ", state dir " + l.stateDir
	}
	return &locker.NeverUsedError{Key: l.opts.Name(), Where: where, Fields: []string{"Dir"}}
}

// ReleaseHandle has nothing to do: the kernel released the flock when its
// holder died.
func (l *Locker) ReleaseHandle(ctx context.Context, handle string) error { return nil }

// LockDir is the lock directory as configured (DefaultDir when none was
// given): the local backend is locker.HostLocal.
func (l *Locker) LockDir() string { return l.dir }

var _ locker.HostLocal = (*Locker)(nil)

// Close does nothing; a held lease is released through the Lease.
func (l *Locker) Close() error { return nil }

// samePath reports whether the open file is still the one at path, so a
// lock file deleted or replaced by hand counts as lost leadership.
func samePath(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}
