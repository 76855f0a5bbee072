//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/locker"
)

// The key's control record (locker.Controls) is the file
// <dir>/<prefix>/<key>~control in the lock directory, beside the lock
// file, for the key and each of its slot keys alike (locker.ControlKey):
// {"version":N,"control":{...}}, N a counter every write advances. '~'
// followed by anything but a slot number is never part of a key, so no
// key's lock file, counter, run or history record has that name. A write
// is a temporary file (<key>~control.tmp) renamed over it, made while
// holding an flock on <key>~control.lock, so that reading the version and
// writing the next is one step for every process; readers take no lock
// (a rename is atomic) and need only read access, as Leader does. The
// files are 0600, as the lock file is; a control lock an earlier version
// left wider is replaced, not narrowed (lockfile.go).

var _ locker.Controls = (*Locker)(nil)

// controlPoll is how often WaitControl looks at the control file: a stat,
// and a read only when it changed.
const controlPoll = 200 * time.Millisecond

// controlFile is the control file's content.
type controlFile struct {
	Version uint64          `json:"version"`
	Control json.RawMessage `json:"control"`
}

// controlPath is the key's control file.
func (l *Locker) controlPath() string {
	return filepath.Join(l.dir, l.controlRel())
}

// controlRel is the control file below the lock directory.
func (l *Locker) controlRel() string {
	return filepath.Join(l.opts.Prefix, locker.ControlKey(l.opts.Key)) + "~control"
}

// controlDir opens the directory of the control file, making it unless
// read-only; a missing one without create is an error that
// errors.Is(os.ErrNotExist).
func (l *Locker) controlDir(create bool) (*dir, error) {
	return l.openRoot(l.dir, filepath.Dir(l.controlRel()), "Dir", create)
}

// Control reads the key's control file; none is the zero Control.
func (l *Locker) Control(ctx context.Context) (locker.Control, error) {
	c, _, err := l.readControl()
	return c, err
}

// readControl reads the control file and its version (0: none).
func (l *Locker) readControl() (locker.Control, uint64, error) {
	path := l.controlPath()
	d, err := l.controlDir(false)
	if errors.Is(err, fs.ErrNotExist) {
		return locker.Control{}, 0, nil
	}
	if err != nil {
		return locker.Control{}, 0, fmt.Errorf("local: read the control record: %w", err)
	}
	defer d.close()
	b, err := d.readFile(filepath.Base(path))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return locker.Control{}, 0, nil
	case err != nil:
		return locker.Control{}, 0, fmt.Errorf("local: %w: read the control record: %w", locker.ErrRefused, err)
	}
	var f controlFile
	if err := json.Unmarshal(b, &f); err != nil || f.Version == 0 {
		return locker.Control{}, 0, fmt.Errorf("local: %w: %s is not a control record", locker.ErrRefused, path)
	}
	c, err := locker.ParseControl(f.Control, strconv.FormatUint(f.Version, 10))
	if err != nil {
		return locker.Control{}, 0, fmt.Errorf("local: %w: %s: %w", locker.ErrRefused, path, err)
	}
	return c, f.Version, nil
}

// SetControl replaces the control file if its version is still
// c.Version, under the flock of the control lock file. It creates the lock
// directory as Acquire does, unless read-only (then the directory must
// exist).
func (l *Locker) SetControl(ctx context.Context, c locker.Control) (string, error) {
	path := l.controlPath()
	d, unlock, err := l.lockControl(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	_, cur, err := l.readControl()
	if err != nil {
		return "", err
	}
	if c.Version != versionString(cur) {
		return "", fmt.Errorf("local: control record %s at version %q, not %q: %w", path, versionString(cur), c.Version, locker.ErrConflict)
	}
	if cur == 1<<64-1 {
		return "", fmt.Errorf("local: %w: the version of %s cannot grow", locker.ErrRefused, path)
	}
	data, err := json.Marshal(controlFile{Version: cur + 1, Control: c.Record()})
	if err != nil {
		return "", fmt.Errorf("local: encode the control record: %w", err)
	}
	if err := d.replace(filepath.Base(path), append(data, '\n')); err != nil {
		return "", fmt.Errorf("local: %w: write the control record: %w", locker.ErrRefused, err)
	}
	return versionString(cur + 1), nil
}

// versionString is how a version shows: "" for none.
func versionString(v uint64) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatUint(v, 10)
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

// fileState is what a stat shows of the control file: a write renames a
// new file over it, which changes its inode and change time.
type fileState struct {
	exists     bool
	dev, ino   uint64
	size       int64
	mtim, ctim unix.Timespec
}

func statControl(path string) fileState {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileState{}
	}
	return fileState{exists: true, dev: st.Dev, ino: st.Ino, size: st.Size, mtim: st.Mtim, ctim: st.Ctim}
}

// WaitControl returns the control record once its version is not
// version: it stats the file every controlPoll and reads it only when the
// stat changed.
func (l *Locker) WaitControl(ctx context.Context, version string) (locker.Control, error) {
	path := l.controlPath()
	t := time.NewTicker(controlPoll)
	defer t.Stop()
	var last fileState
	read := true
	for {
		if read {
			// The stat before the read: a write after it shows at the
			// next stat.
			last = statControl(path)
			c, err := l.Control(ctx)
			if err != nil {
				return locker.Control{}, err
			}
			if c.Version != version {
				return c, nil
			}
		}
		select {
		case <-ctx.Done():
			return locker.Control{}, ctx.Err()
		case <-t.C:
		}
		read = statControl(path) != last
	}
}
