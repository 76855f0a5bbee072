//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
)

// The key's records (package records) are files; '~' followed by anything
// but a slot number is never part of a key, so no key's lock file,
// counter or other record has their names:
//
//   - the control record is <dir>/<prefix>/<key>~control in the lock
//     directory, beside the lock file, for the key and each of its slot
//     keys alike (locker.Options.Key): {"version":N,"control":{...}}, N a
//     counter every write advances. A write is a temporary file
//     (<key>~control.tmp) renamed over it, made while holding an flock on
//     <key>~control.lock, so that reading the version and writing the
//     next is one step for every process; readers take no lock (a rename
//     is atomic) and need only read access, as Leader does. The files are
//     0600, as the lock file is; a control lock an earlier version left
//     wider is replaced, not narrowed (lockfile.go). WaitControl waits for
//     inotify to report the file's name (every controlPoll a stat without
//     it) and reads it only when the stat changed;
//   - term records are files <state>/<prefix>/<key>~history/<epoch>
//     (locker.TermName), written durably (temporary file, fsync, rename);
//   - run records are files <state>/<prefix>/<key>~run/<slot>, written as
//     durably once the lease proved it still holds the flock on the lock
//     file at its path. Those an earlier version kept in its per-user
//     state directory are still read, never written or removed.
//
// Reads create nothing.

// controlPoll is how often WaitControl looks at the control file where
// inotify cannot tell it of a change: a stat, and a read only when it
// changed.
const controlPoll = 200 * time.Millisecond

// controlFile is the control file's content.
type controlFile struct {
	Version uint64          `json:"version"`
	Control json.RawMessage `json:"control"`
}

// store is the Locker's records.Store.
type store struct{ l *Locker }

var _ records.Waiter = store{}

// newRecords builds the Locker's records core.
func newRecords(l *Locker) *records.Core {
	return records.New(records.Config{Store: store{l}, Name: "local", Key: l.opts.Key})
}

// controlPath is the key's control file.
func (l *Locker) controlPath() string {
	return filepath.Join(l.dir, l.controlRel())
}

// controlRel is the control file below the lock directory.
func (l *Locker) controlRel() string {
	return filepath.Join(l.opts.Prefix, l.opts.Key) + "~control"
}

// controlDir opens the directory of the control file, making it unless
// read-only; a missing one without create is an error that
// errors.Is(os.ErrNotExist).
func (l *Locker) controlDir(create bool) (*dir, error) {
	return l.openRoot(l.dir, filepath.Dir(l.controlRel()), "Dir", create)
}

// relOf is the directory of the records of kind (Term, Run) below the
// state directory.
func (s store) relOf(kind records.Kind) string {
	if kind == records.Term {
		return s.l.histRel
	}
	return s.l.runRel
}

// versionString is how a version shows: "" for none.
func versionString(v uint64) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatUint(v, 10)
}

func (s store) Get(ctx context.Context, kind records.Kind, name string) ([]byte, string, bool, error) {
	if kind == records.Control {
		value, v, err := s.readControl()
		return value, versionString(v), v != 0, err
	}
	value, ok, err := readIn(s.l.stateDir, s.relOf(kind), name)
	if kind == records.Run && s.l.oldRunDir != "" && err == nil && !live(value) {
		if old, oldOK, oerr := readIn(s.l.oldRunRoot, s.l.oldRunRel, name); oerr == nil && oldOK {
			return old, "", true, nil
		}
	}
	return value, "", ok, err
}

// live reports whether value is a run record that still counts.
func live(value []byte) bool {
	r, err := locker.ParseRun(value)
	return err == nil && r.Live(time.Now())
}

// readIn reads the file name in the directory rel below root; a missing
// one (or a missing directory) is not ok.
func readIn(root, rel, name string) ([]byte, bool, error) {
	d, err := openTree(root, rel, "StateDir", false)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("local: read %s: %w", filepath.Join(root, rel, name), err)
	}
	defer d.close()
	b, err := d.readFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("local: read %s: %w", filepath.Join(root, rel, name), err)
	}
	return b, true, nil
}

// readControl reads the control file: the record and its version (0:
// none).
func (s store) readControl() ([]byte, uint64, error) {
	path := s.l.controlPath()
	d, err := s.l.controlDir(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("local: read the control record: %w", err)
	}
	defer d.close()
	b, err := d.readFile(filepath.Base(path))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("local: %w: read the control record: %w", locker.ErrRefused, err)
	}
	var f controlFile
	if err := json.Unmarshal(b, &f); err != nil || f.Version == 0 {
		return nil, 0, fmt.Errorf("local: %w: %s is not a control record", locker.ErrRefused, path)
	}
	return f.Control, f.Version, nil
}

// Swap replaces the control file if its version is still prev, under the
// flock of the control lock file. It creates the lock directory as
// Acquire does, unless read-only (then the directory must exist).
func (s store) Swap(ctx context.Context, _ records.Kind, _, prev string, value []byte) (string, error) {
	path := s.l.controlPath()
	d, unlock, err := s.l.lockControl(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	_, cur, err := s.readControl()
	if err != nil {
		return "", err
	}
	if prev != versionString(cur) {
		return "", fmt.Errorf("local: control record %s at version %q, not %q: %w", path, versionString(cur), prev, locker.ErrConflict)
	}
	if cur == 1<<64-1 {
		return "", fmt.Errorf("local: %w: the version of %s cannot grow", locker.ErrRefused, path)
	}
	data, err := json.Marshal(controlFile{Version: cur + 1, Control: value})
	if err != nil {
		return "", fmt.Errorf("local: encode the control record: %w", err)
	}
	if err := d.replace(filepath.Base(path), append(data, '\n')); err != nil {
		return "", fmt.Errorf("local: %w: write the control record: %w", locker.ErrRefused, err)
	}
	return versionString(cur + 1), nil
}

// lockControl takes the flock of the control lock file, waiting as long
// as ctx lets it, in the control file's directory d, which it makes unless
// read-only; unlock closes both, which drops the flock.
func (l *Locker) lockControl(ctx context.Context) (d *dir, unlock func(), err error) {
	d, err = l.controlDir(!l.readOnly)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("local: %w: write the control record: %s does not exist (opened read-only)", locker.ErrRefused, filepath.Dir(l.controlPath()))
	}
	if err != nil {
		return nil, nil, err
	}
	f, err := d.lockPrivate(ctx, filepath.Base(l.controlPath())+".lock")
	if err != nil {
		d.close()
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("local: lock the control record: %w", err)
	}
	return d, func() { _ = f.Close(); d.close() }, nil
}

// Put durably replaces the record in the state directory.
func (s store) Put(ctx context.Context, kind records.Kind, name string, value []byte) error {
	d, err := s.l.openRoot(s.l.stateDir, s.relOf(kind), "StateDir", true)
	if err != nil {
		return fmt.Errorf("local: write %s record %s: %w", kind, name, err)
	}
	defer d.close()
	if err := d.replace(name, value); err != nil {
		return fmt.Errorf("local: write %s record %s: %w", kind, name, err)
	}
	return nil
}

// PutHeld writes the record as Put does once it proved that lease still
// holds the flock on the lock file at its path.
func (s store) PutHeld(ctx context.Context, lease locker.Lease, kind records.Kind, name string, value []byte, _ time.Time) error {
	ll, ok := lease.(*Lease)
	if !ok || ll.path != s.l.lockPath {
		return fmt.Errorf("local: record run: not a lease of %s", s.l.lockPath)
	}
	// Our open file holds the flock on the file at the path: we still lead
	// (a released lease's file is closed and fails this too).
	if err := ll.held(); err != nil {
		if errors.Is(err, errNotOurs) {
			return fmt.Errorf("local: write %s record %s: %w: %v", kind, name, locker.ErrLost, err)
		}
		return fmt.Errorf("local: write %s record %s: %w", kind, name, err)
	}
	return s.Put(ctx, kind, name, value)
}

// List reads the record files of kind (and, for runs, those an earlier
// version kept per user, as Kept); temporary files are left out.
func (s store) List(ctx context.Context, kind records.Kind, _ bool) ([]records.Entry, error) {
	out, err := listIn(s.l.stateDir, s.relOf(kind), false)
	if err != nil {
		return nil, err
	}
	if kind == records.Run && s.l.oldRunDir != "" {
		old, _ := listIn(s.l.oldRunRoot, s.l.oldRunRel, true)
		out = append(out, old...)
	}
	return out, nil
}

func listIn(root, rel string, kept bool) ([]records.Entry, error) {
	d, err := openTree(root, rel, "StateDir", false)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local: read %s: %w", filepath.Join(root, rel), err)
	}
	defer d.close()
	var out []records.Entry
	for _, name := range d.names() {
		if filepath.Ext(name) == ".tmp" {
			continue
		}
		if b, err := d.readFile(name); err == nil {
			out = append(out, records.Entry{Name: name, Value: b, Kept: kept})
		}
	}
	return out, nil
}

// Delete removes the record from the state directory.
func (s store) Delete(ctx context.Context, kind records.Kind, name string) error {
	d, err := openTree(s.l.stateDir, s.relOf(kind), "StateDir", false)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("local: remove %s record %s: %w", kind, name, err)
	}
	defer d.close()
	if err := d.remove(name); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("local: remove %s record %s: %w", kind, name, err)
	}
	return nil
}

// fileState is what a stat shows of the control file: a write renames a
// new file over it, which changes its inode and change time.
type fileState struct {
	exists     bool
	dev, ino   uint64
	size       int64
	mtim, ctim unix.Timespec
}

var statControl = func(path string) fileState {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileState{}
	}
	return fileState{exists: true, dev: st.Dev, ino: st.Ino, size: st.Size, mtim: st.Mtim, ctim: st.Ctim}
}

// watchControl watches the control file's directory, rechecking every
// controlRecheck; nil without inotify.
func watchControl(path string) *lockWatch {
	w := watchLock(path)
	if w != nil {
		w.recheck = controlRecheck
	}
	return w
}

// WaitControl reads the control file and, while its version is still
// version, sleeps until inotify reports a change of its name in its
// directory (a write renames a new file over it), or at most
// controlRecheck; it reads it again when its stat changed. Without
// inotify (no instance left, or no directory yet) it stats it every
// controlPoll and tries to watch again after each stat, so a directory
// made after the wait began is watched once it exists. An idle holder so
// wakes for a write, not five times a second.
func (s store) WaitControl(ctx context.Context, version string) ([]byte, string, bool, error) {
	path := s.l.controlPath()
	// The watch and the stat before the read: a write after them shows
	// as an event and at the next stat.
	w := watchControl(path)
	if w != nil {
		defer w.close()
	}
	last := statControl(path)
	value, v, err := s.readControl()
	if err != nil || versionString(v) != version {
		return value, versionString(v), v != 0, err
	}
	for statControl(path) == last {
		if w != nil {
			err := w.wait(ctx)
			if ctx.Err() != nil {
				return nil, "", false, ctx.Err()
			}
			if err == nil {
				continue
			}
			w = nil // the watch broke: poll from now on
		}
		if !retry.Sleep(ctx, controlPoll) {
			return nil, "", false, ctx.Err()
		}
		if w == nil {
			// The directory may exist by now (a leader's first start
			// makes it after this wait began): watch it from here on.
			if w = watchControl(path); w != nil {
				defer w.close()
			}
		}
	}
	value, v, err = s.readControl()
	return value, versionString(v), v != 0, err
}
