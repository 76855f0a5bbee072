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
//   - host directory, where the epoch of a lock in a volatile directory
//     lasts: /var/lib/leaderrun for root, /var/tmp/leaderrun-UID for others
//     (checked like the per-user lock directory);
//   - state directory (a copy of the counter, run records): --state-dir,
//     else the lock directory itself when it was given and is not tmpfs,
//     else the host directory.
//
// The epoch is one more than the largest counter found in any of these
// places (and in $XDG_STATE_HOME/leaderrun or ~/.local/state/leaderrun,
// where earlier versions kept it), and is written to each.
package local

import (
	"context"
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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/locker"
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

// counter is one place the epoch counter is kept.
type counter struct {
	path string
	// spare: a copy at a place that depends on the environment (an
	// earlier version's state directory) or that an explicit --state-dir
	// stands in for; failing to read or write it fails nothing.
	spare bool
}

// Locker campaigns for a key with flock.
type Locker struct {
	opts     locker.Options
	lockPath string // <dir>/<prefix>/<key>.lock
	lockDir  string // its directory
	// counters are every place the epoch counter is kept: beside the lock
	// file; in the host directory unless the lock directory persists (then
	// the copy beside the lock file is the lasting one); in the state
	// directory; in an earlier version's per-user state directory. The
	// next epoch exceeds the largest of them and is written to each.
	counters []counter
	runDir   string // <state>/<prefix>/<key>~run: once-per records
	histDir  string // <state>/<prefix>/<key>~history: term records
	// oldRunDir is where an earlier version kept them by default for an
	// ordinary user (its per-user state directory), read as well.
	oldRunDir string
	dir       string // the lock directory as configured
	stateDir  string // the state directory: run records, a counter copy
	// defaultDir: dir is DefaultDir, checked (ownDir) whenever it is made.
	defaultDir bool
	readOnly   bool
}

// New checks the configuration and, unless ReadOnly, creates the lock and
// state directories. A refused setting is a *locker.ConfigError.
func New(cfg Config) (*Locker, error) {
	if err := locker.ValidateKey(cfg.Key); err != nil {
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
	rel := filepath.Join(cfg.Prefix, cfg.Key)
	l := &Locker{opts: cfg.Options, lockPath: filepath.Join(cfg.Dir, rel) + ".lock", dir: cfg.Dir, defaultDir: !explicit, readOnly: cfg.ReadOnly}
	l.lockDir = filepath.Dir(l.lockPath)

	if cfg.ReadOnly {
		if _, err := os.Stat(cfg.Dir); err != nil {
			return nil, &locker.ConfigError{Field: "Dir", Rule: "lock directory " + cfg.Dir + " cannot be read", Err: err}
		}
	}

	// A lock directory that was given and is on disk keeps the counter
	// beside the lock file through a reboot; any other (the default ones,
	// a tmpfs) is emptied by one, and the host directory keeps it.
	lasting := explicit && !volatile(cfg.Dir)
	host := hostDir(os.Geteuid())
	state := cfg.StateDir
	if state == "" {
		state = cfg.Dir
		if !lasting {
			state = host
		}
	}
	base := filepath.Join(state, rel)
	l.stateDir = state
	l.runDir = base + "~run"
	l.histDir = base + "~history"
	l.addCounter(strings.TrimSuffix(l.lockPath, ".lock")+".epoch", false)

	// The directories New makes, each checked before any is made: a
	// setting refused leaves nothing behind (DESIGN §1.10).
	lockDir := dirNeed{path: l.lockDir, mode: 0o755, field: "Dir"}
	if !explicit {
		lockDir.own = cfg.Dir
	}
	hostSub := dirNeed{path: filepath.Dir(filepath.Join(host, rel)), mode: stateMode(), field: "StateDir"}
	if os.Geteuid() != 0 {
		hostSub.own = host
	}
	needs := []dirNeed{lockDir}
	if !lasting {
		// With --state-dir given, a host directory that cannot be made
		// (no /var/tmp, a read-only /var) leaves the counter to it.
		spare := false
		if !cfg.ReadOnly && state != host {
			if err := hostSub.check(); err != nil {
				if cfg.StateDir == "" {
					return nil, err
				}
				spare = true
			} else {
				needs = append(needs, hostSub)
			}
		}
		l.addCounter(filepath.Join(host, rel)+".epoch", spare)
	}
	l.addCounter(base+".epoch", false)
	if os.Geteuid() != 0 {
		if home := homeStateDir(); home != "" {
			l.addCounter(filepath.Join(home, rel)+".epoch", true)
			if cfg.StateDir == "" && !lasting {
				l.oldRunDir = filepath.Join(home, rel) + "~run"
			}
		}
	}
	if cfg.ReadOnly {
		return l, nil
	}
	if state == host {
		needs = append(needs, hostSub)
	} else {
		needs = append(needs, dirNeed{path: filepath.Dir(base), mode: stateMode(), field: "StateDir"})
	}
	for _, n := range needs {
		if err := n.check(); err != nil {
			return nil, err
		}
	}
	if err := l.checkFiles(); err != nil {
		return nil, err
	}
	var made []string
	for _, n := range needs {
		if err := n.make(&made); err != nil {
			unmake(made)
			return nil, err
		}
	}
	return l, nil
}

// dirNeed is a directory New makes (with any missing parents) and then
// writes in.
type dirNeed struct {
	path  string
	mode  os.FileMode
	own   string // path or a parent of it that ownDir checks, "" for none
	field string // the setting that chooses another directory
}

// check reports, before anything is made, what would stop New making the
// directory or writing in it: a per-user directory someone else controls,
// a file in the way, or no write permission (for root too on a read-only
// mount) in the directory itself or, if it is missing, in its nearest
// existing parent, where New would make it.
func (n dirNeed) check() error {
	if n.own != "" {
		if err := checkOwnDir(n.own, n.field); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	p := n.path
	for {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				if p == n.path {
					return &locker.ConfigError{Field: n.field, Rule: p + " is not a directory"}
				}
				return &locker.ConfigError{Field: n.field, Rule: "cannot create " + n.path + ": " + p + " is not a directory"}
			}
			break
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) || parent == p {
			return &locker.ConfigError{Field: n.field, Rule: "cannot read " + p, Err: unwrapPath(err)}
		}
		p = parent
	}
	if err := writable(p); err != nil {
		if p == n.path {
			return &locker.ConfigError{Field: n.field, Rule: "cannot write to " + p, Err: err}
		}
		return &locker.ConfigError{Field: n.field, Rule: "cannot create " + n.path + ": cannot write to " + p, Err: err}
	}
	return nil
}

// make creates the directory and any missing parents, adding each it
// made to made.
func (n dirNeed) make(made *[]string) error {
	if n.own != "" {
		if err := ownDir(n.own, n.field, made); err != nil {
			return err
		}
	}
	var missing []string
	for p := n.path; ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil || filepath.Dir(p) == p {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		err := os.Mkdir(missing[i], n.mode)
		if err == nil {
			*made = append(*made, missing[i])
			continue
		}
		if errors.Is(err, os.ErrExist) {
			continue // made meanwhile by another leaderrun
		}
		rule := "cannot create the state directory"
		if n.field == "Dir" {
			rule = "cannot create the lock directory"
		}
		return &locker.ConfigError{Field: n.field, Rule: rule, Err: err}
	}
	return nil
}

// unmake removes the directories New made, newest first; one another
// process has put something in meanwhile stays.
func unmake(made []string) {
	for i := len(made) - 1; i >= 0; i-- {
		_ = os.Remove(made[i])
	}
}

// writable reports why we cannot create entries in dir, or nil. access(2)
// answers for the effective user, ACLs and security modules included, and
// says EROFS for a read-only file system or mount even to root (whom file
// modes do not stop); statfs is asked too, in case access is emulated.
func writable(dir string) error {
	if err := unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Flags&unix.ST_RDONLY != 0 {
		return unix.EROFS
	}
	return nil
}

// checkFiles checks the files Acquire opens in place rather than
// replaces: the lock file, opened for reading and writing, and each
// counter that must be read. Missing ones are made later, in directories
// checked already.
func (l *Locker) checkFiles() error {
	if err := unix.Faccessat(unix.AT_FDCWD, l.lockPath, unix.R_OK|unix.W_OK, unix.AT_EACCESS); err != nil && !errors.Is(err, unix.ENOENT) {
		return &locker.ConfigError{Field: "Dir", Rule: "cannot open the lock file " + l.lockPath + " for writing", Err: err}
	}
	for i, c := range l.counters {
		if c.spare {
			continue
		}
		if err := unix.Faccessat(unix.AT_FDCWD, c.path, unix.R_OK, unix.AT_EACCESS); err != nil && !errors.Is(err, unix.ENOENT) {
			field := "StateDir"
			if i == 0 {
				field = "Dir" // the counter beside the lock file
			}
			return &locker.ConfigError{Field: field, Rule: "cannot read the epoch counter " + c.path, Err: err}
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
func (l *Locker) addCounter(path string, spare bool) {
	for i, c := range l.counters {
		if c.path == path {
			l.counters[i].spare = c.spare && spare
			return
		}
	}
	l.counters = append(l.counters, counter{path: path, spare: spare})
}

// stateMode is the mode of a state directory leaderrun creates: readable
// by others for root (status by a monitoring user reads run records),
// private for anyone else.
func stateMode() os.FileMode {
	if os.Geteuid() == 0 {
		return 0o755
	}
	return 0o700
}

// ownDir creates a default lock directory (or a user's host directory) or
// checks the existing one (checkOwnDir), adding it to made (if not nil)
// when it made it.
func ownDir(dir, field string, made *[]string) error {
	mode := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		mode = 0o755 // a monitoring user may read a root-held lock
	}
	err := os.Mkdir(dir, mode)
	if err != nil && !errors.Is(err, os.ErrExist) {
		return &locker.ConfigError{Field: field, Rule: "cannot create " + dir, Err: err}
	}
	if err == nil && made != nil {
		*made = append(*made, dir)
	}
	return checkOwnDir(dir, field)
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

// volatile reports whether dir is on a file system that a reboot empties
// (tmpfs, ramfs), where an epoch counter would start over.
func volatile(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return true // cannot tell: keep the epoch where it surely persists
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
	var w *lockWatch
	if !l.opts.NoWait {
		// Watching starts before the first try, so a release between the
		// try and the wait is not missed.
		if w = watchLock(l.lockPath); w != nil {
			defer w.close()
		}
	}
	var f *os.File
	for {
		if f == nil {
			var err error
			if f, err = l.openLock(); err != nil {
				return nil, err
			}
		}
		err := l.tryLock(f)
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
			_ = f.Close()
			f = nil
			continue
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			_ = f.Close()
			return nil, err
		}
		if l.opts.NoWait {
			_ = f.Close()
			return nil, fmt.Errorf("%s: %w", l.lockPath, locker.ErrHeld)
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
	t := time.NewTimer(pollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errReplaced: the file we locked is no longer the one at the path.
var errReplaced = errors.New("lock file replaced")

// openLock opens (creating) the lock file. A lock directory removed while
// we waited (wiped by hand, or a tmpfs unmounted) is made again, as New
// made it: the lock's holder has lost, and the candidates go on campaigning.
func (l *Locker) openLock() (*os.File, error) {
	f, err := os.OpenFile(l.lockPath, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o644)
	if errors.Is(err, os.ErrNotExist) {
		if l.defaultDir {
			if err := ownDir(l.dir, "Dir", nil); err != nil {
				return nil, err
			}
		}
		if err := os.MkdirAll(l.lockDir, 0o755); err != nil {
			return nil, fmt.Errorf("open lock file: %w: %w", locker.ErrRefused, err)
		}
		f, err = os.OpenFile(l.lockPath, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w: %w", locker.ErrRefused, err)
	}
	return f, nil
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

// lead bumps the epoch under the lock and records us as the holder. It
// also finds out how Renew can prove the lock is still ours: the kernel
// must show the lock it just granted, per descriptor or at least in its
// lock table.
func (l *Locker) lead(ctx context.Context, f *os.File) (*Lease, error) {
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
	epoch, err := l.nextEpoch(ctx, lastRecordEpoch(f))
	if err != nil {
		return nil, err
	}
	h := locker.NewHolder(l.opts)
	h.Epoch = epoch
	// No dead-man guard shares this open file yet: nothing but us can
	// unlock it, so the proof above still holds.
	if err := f.Truncate(0); err != nil {
		return nil, fmt.Errorf("write holder record: %w", err)
	}
	if _, err := f.WriteAt(h.Record(), 0); err != nil {
		return nil, fmt.Errorf("write holder record: %w", err)
	}
	lease.epoch = epoch
	return lease, nil
}

// lastRecordEpoch is the epoch in the holder record the last holder left
// in the lock file (a release leaves it there), 0 for none. It is one more
// place the count is kept: a counter file edited lower or deleted by hand
// beside a lock file that is still there cannot make an epoch repeat.
func lastRecordEpoch(f *os.File) uint64 {
	b, _ := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	return locker.ParseHolder(b).Epoch
}

// nextEpoch reads the counter at every place it is kept and durably writes
// one more than the largest, and than floor (the lock file's last record),
// to each (DESIGN §1.1, §1.13). The caller holds the flock, so no other
// candidate of this lock races it; a place that other locks share too (the
// host or a state directory) is only ever raised (raiseEpoch).
func (l *Locker) nextEpoch(ctx context.Context, floor uint64) (uint64, error) {
	cur := floor
	for _, c := range l.counters {
		n, err := readEpoch(c.path)
		if err != nil {
			if c.spare {
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
	for _, c := range l.counters {
		if c.spare {
			_ = os.MkdirAll(filepath.Dir(c.path), 0o700)
		}
		if err := raiseEpoch(ctx, c.path, next); err != nil && !c.spare {
			return 0, fmt.Errorf("write epoch: %w", err)
		}
	}
	return next, nil
}

// raiseEpoch durably makes the counter at path at least n: under an flock
// of its directory, it reads the counter and, if smaller, replaces it
// (temporary file, fsync, rename, fsync of the directory). Two holders of
// different locks that share the file then cannot lower each other's
// value, nor write the same temporary file at once.
func raiseEpoch(ctx context.Context, path string, n uint64) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close() // drops the flock
	for {
		err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", d.Name(), err)
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	cur, err := readEpoch(path)
	if err != nil {
		return err
	}
	if cur >= n {
		return nil
	}
	return replaceFile(path, []byte(strconv.FormatUint(n, 10)+"\n"))
}

// readEpoch reads a counter file; a missing one counts as 0.
func readEpoch(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read epoch: %w", err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("epoch file %s is corrupt: %w", path, err)
	}
	return n, nil
}

// replaceFile durably replaces path with data: temporary file, fsync,
// rename, fsync of the directory.
func replaceFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := writeSynced(tmp, data); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	_ = d.Close()
	return err
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

// Leader reads the holder record of a key whose flock is held. It opens the
// lock file read-only and takes no lock: whether the file is locked comes
// from /proc/locks, so it needs only read access, creates nothing, and never
// makes a candidate's attempt fail for the moment of the read.
func (l *Locker) Leader(ctx context.Context) (locker.Holder, error) {
	f, err := os.Open(l.lockPath)
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(l.dir); derr != nil {
			return locker.Holder{}, &locker.ConfigError{Field: "Dir", Rule: "lock directory " + l.dir + " cannot be read", Err: derr}
		}
		if !l.traced() {
			return locker.Holder{}, l.neverUsed()
		}
		return locker.Holder{}, fmt.Errorf("%s: %w", l.lockPath, locker.ErrNoLeader)
	}
	if err != nil {
		return locker.Holder{}, fmt.Errorf("open lock file: %w: %w", locker.ErrRefused, err)
	}
	defer f.Close()
	b, err := os.ReadFile(l.lockPath)
	if err != nil {
		return locker.Holder{}, fmt.Errorf("read holder record: %w", err)
	}
	h := locker.ParseHolder(b)
	held, err := flocked(f, h.PID, false)
	if err != nil {
		return locker.Holder{}, err
	}
	if !held {
		return locker.Holder{}, fmt.Errorf("%s: %w", l.lockPath, locker.ErrNoLeader)
	}
	return h, nil
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
			paths = append(paths, c.path)
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
	return &locker.NeverUsedError{Key: l.opts.Key, Where: where, Fields: []string{"Dir"}}
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
