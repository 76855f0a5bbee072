//go:build linux

package local

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/locker"
)

// Every file and directory leaderrun uses under a lock, state or host
// directory is reached from a directory descriptor it checked, one
// component at a time, never following a symlink (DESIGN §1.13, "Other
// local users"). Two rules decide what is trusted:
//
//   - the configured directory and each directory on its path: owned by
//     us or by root, and writable by nobody else, or sticky (like /tmp)
//     with the entry we go through owned by us or by root. Otherwise
//     another user could rename our entry away and put a symlink or a
//     file of theirs in its place. A symlink on that path is followed
//     only where such a directory holds it: it is the operator's own;
//   - what leaderrun makes inside it (the prefix and key directories, the
//     lock, control and counter files, the run and term records): owned by
//     us, directories 0700 and files 0600, so that no other user can open
//     one, let alone flock it. An existing one of a wider mode (made by an
//     earlier version) is narrowed when it is used; a file leaderrun
//     flocks is replaced instead (lockfile.go): a descriptor another user
//     opened while it was wider outlives the narrowing.

// maxLinks bounds the symlinks one path may go through, as the kernel's
// own ELOOP limit does.
const maxLinks = 40

// dirMode and fileMode are the modes of what leaderrun makes.
const (
	dirMode  = 0o700
	fileMode = 0o600
)

// trustedUID reports whether uid is one whose entries we may go through:
// ours, or root's (root is trusted not to attack, DESIGN §1.15).
func trustedUID(uid uint32) bool {
	return int(uid) == os.Geteuid() || uid == 0
}

// entryTrusted reports why an entry child of the directory parent could be
// replaced by another user, or "" when it cannot be.
func entryTrusted(parent, child *unix.Stat_t) string {
	switch {
	case !trustedUID(parent.Uid):
		return fmt.Sprintf("is owned by uid %d", parent.Uid)
	case parent.Mode&0o022 == 0:
		return ""
	case parent.Mode&unix.S_ISVTX == 0:
		return fmt.Sprintf("has mode %04o: writable by other users", parent.Mode&0o7777)
	case child != nil && !trustedUID(child.Uid):
		return fmt.Sprintf("is sticky but its entry is owned by uid %d", child.Uid)
	}
	return ""
}

// unsafeDirError is a directory another user could replace entries in.
func unsafeDirError(field, path, why string) error {
	return &locker.ConfigError{Field: field, Rule: fmt.Sprintf("%s %s, so another user could replace what leaderrun keeps there; refusing it (the directory and each one above it must be owned by you or root and writable by no one else, or sticky with the entries yours)", path, why)}
}

// frame is one directory of a path being resolved.
type frame struct {
	fd   int
	st   unix.Stat_t
	path string
}

// resolver walks an absolute path from the root directory.
type resolver struct {
	field  string
	create bool // make missing directories (dirMode)
	stack  []frame
}

func (r *resolver) close() {
	for _, f := range r.stack {
		_ = unix.Close(f.fd)
	}
	r.stack = nil
}

func (r *resolver) top() *frame { return &r.stack[len(r.stack)-1] }

func (r *resolver) root() error {
	r.close()
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &locker.ConfigError{Field: r.field, Rule: "cannot open /", Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return &locker.ConfigError{Field: r.field, Rule: "cannot read /", Err: err}
	}
	r.stack = []frame{{fd: fd, st: st, path: "/"}}
	return nil
}

// errMissing is a component of the path that does not exist (and was not
// to be made); missingError carries where.
type missingError struct{ path string }

func (e *missingError) Error() string { return e.path + " does not exist" }
func (e *missingError) Unwrap() error { return os.ErrNotExist }

// walk resolves path (absolute) and leaves its directory on top of the
// stack. With create, missing directories are made. Without, a missing
// component stops the walk with a *missingError, the nearest existing
// directory on top.
func (r *resolver) walk(path string) error {
	if err := r.root(); err != nil {
		return err
	}
	todo := splitPath(path)
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if len(r.stack) > 1 {
				_ = unix.Close(r.top().fd)
				r.stack = r.stack[:len(r.stack)-1]
			}
			continue
		}
		top := r.top()
		where := filepath.Join(top.path, name)
		var st unix.Stat_t
		err := unix.Fstatat(top.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			if !r.create {
				return &missingError{path: where}
			}
			if why := entryTrusted(&top.st, nil); why != "" {
				return unsafeDirError(r.field, top.path, why)
			}
			if err := unix.Mkdirat(top.fd, name, dirMode); err != nil && !errors.Is(err, unix.EEXIST) {
				return fsError(r.field, "cannot create "+where, err)
			}
			err = unix.Fstatat(top.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return &locker.ConfigError{Field: r.field, Rule: "cannot read " + where, Err: err}
		}
		if why := entryTrusted(&top.st, &st); why != "" {
			return unsafeDirError(r.field, top.path, why)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if links++; links > maxLinks {
				return &locker.ConfigError{Field: r.field, Rule: "cannot resolve " + path, Err: unix.ELOOP}
			}
			target, err := readlinkat(top.fd, name)
			if err != nil {
				return &locker.ConfigError{Field: r.field, Rule: "cannot read the symlink " + where, Err: err}
			}
			todo = append(splitPath(target), todo...)
			if filepath.IsAbs(target) {
				if err := r.root(); err != nil {
					return err
				}
			}
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return &locker.ConfigError{Field: r.field, Rule: where + " is not a directory"}
		}
		fd, err := unix.Openat(top.fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &locker.ConfigError{Field: r.field, Rule: "cannot open " + where, Err: err}
		}
		var got unix.Stat_t
		if err := unix.Fstat(fd, &got); err != nil || got.Dev != st.Dev || got.Ino != st.Ino {
			_ = unix.Close(fd)
			return &locker.ConfigError{Field: r.field, Rule: where + " was replaced while it was opened"}
		}
		r.stack = append(r.stack, frame{fd: fd, st: got, path: where})
	}
	if why := entryTrusted(&r.top().st, nil); why != "" {
		return unsafeDirError(r.field, r.top().path, why)
	}
	return nil
}

func splitPath(p string) []string { return strings.Split(p, "/") }

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// dir is an open directory leaderrun checked: the configured one, or one
// it made inside that.
type dir struct {
	fd    int // O_RDONLY: usable for openat, fsync and fstatfs
	path  string
	field string // the setting that chooses it
}

// refuse is a *locker.ConfigError naming d's setting, or, for a file
// system out of space or inodes, an error retried as any failed attempt is.
func (d *dir) refuse(rule string, err error) error {
	return fsError(d.field, rule, err)
}

// fsError is what a failure to make or change something in a directory of
// setting field is: a *locker.ConfigError (exit 125, which the packaged
// unit does not restart), unless the file system is out of space or
// inodes or the user over quota. Another user who can fill the file system
// (a tmpfs /run, a /var that /var/tmp shares) could otherwise end root's
// service for good with a moment's fill; such a failure passes when the
// space is freed, so it is retried, as a backend out of reach is.
func fsError(field, rule string, err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("%s: %s: %w", field, rule, err)
	}
	return &locker.ConfigError{Field: field, Rule: rule, Err: err}
}

// openDir opens the directory at path (absolute), checked as the
// configured directory is, making missing directories when create.
// field names the setting that chooses it. A missing one without create
// is an error that errors.Is(os.ErrNotExist).
func openDir(path, field string, create bool) (*dir, error) {
	r := &resolver{field: field, create: create}
	defer r.close()
	if err := r.walk(path); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(r.top().fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &locker.ConfigError{Field: field, Rule: "cannot open " + path, Err: err}
	}
	return &dir{fd: fd, path: filepath.Clean(path), field: field}, nil
}

// checkDir reports, before anything is made, whether openDir(path, field,
// true) could succeed: every existing directory on the path trusted, and
// the nearest existing one writable (for root too on a read-only mount)
// when path is missing. exists says whether the directory is there.
func checkDir(path, field string) (exists bool, err error) {
	r := &resolver{field: field}
	defer r.close()
	err = r.walk(path)
	var me *missingError
	switch {
	case err == nil:
		return true, nil
	case !errors.As(err, &me):
		return false, err
	}
	top := r.top()
	if err := writableAt(top.fd, top.path); err != nil {
		return false, &locker.ConfigError{Field: field, Rule: "cannot create " + path + ": cannot write to " + top.path, Err: err}
	}
	return false, nil
}

// writableAt reports why we cannot create entries in the directory fd
// (an O_PATH descriptor of path), or nil. access(2) answers for the
// effective user, ACLs and security modules included, and says EROFS for a
// read-only file system or mount even to root (whom file modes do not
// stop); statfs is asked too, in case access is emulated.
func writableAt(fd int, path string) error {
	if err := unix.Faccessat(fd, ".", unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err == nil && st.Flags&unix.ST_RDONLY != 0 {
		return unix.EROFS
	}
	return nil
}

func (d *dir) close() { _ = unix.Close(d.fd) }

// ownEntry checks an entry leaderrun made (or an earlier version made) in
// one of its directories: owned by us; with narrow, a mode wider than want
// is narrowed. fd is the entry, opened.
func (d *dir) ownEntry(fd int, path string, st *unix.Stat_t, want uint32, narrow bool) error {
	if int(st.Uid) != os.Geteuid() {
		return d.refuse(fmt.Sprintf("%s is owned by uid %d, not by uid %d; refusing an entry another user made", path, st.Uid, os.Geteuid()), nil)
	}
	if narrow && st.Mode&0o777&^want != 0 {
		if err := unix.Fchmod(fd, want); err != nil {
			return d.refuse("cannot narrow the mode of "+path, err)
		}
	}
	return nil
}

// sub opens the directory rel (slash-separated, no "..") below d, each
// component a directory of ours that no symlink stands in for, making
// missing ones and narrowing wider modes when create. A missing one
// without create is an error that errors.Is(os.ErrNotExist).
func (d *dir) sub(rel string, create bool) (*dir, error) {
	cur := d.fd
	path := d.path
	for _, name := range splitPath(rel) {
		if name == "" || name == "." {
			continue
		}
		path = filepath.Join(path, name)
		if create {
			if err := unix.Mkdirat(cur, name, dirMode); err != nil && !errors.Is(err, unix.EEXIST) {
				d.closeIf(cur)
				return nil, d.refuse("cannot create "+path, err)
			}
		}
		fd, err := unix.Openat(cur, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		d.closeIf(cur)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil, &missingError{path: path}
			}
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return nil, d.refuse(path+" is not a directory (a symlink or a file is refused)", nil)
			}
			return nil, d.refuse("cannot open "+path, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			_ = unix.Close(fd)
			return nil, d.refuse("cannot read "+path, err)
		}
		if err := d.ownEntry(fd, path, &st, dirMode, create); err != nil {
			_ = unix.Close(fd)
			return nil, err
		}
		cur = fd
	}
	if cur == d.fd {
		fd, err := unix.Dup(d.fd)
		if err != nil {
			return nil, err
		}
		unix.CloseOnExec(fd)
		cur = fd
	}
	return &dir{fd: cur, path: path, field: d.field}, nil
}

func (d *dir) closeIf(fd int) {
	if fd != d.fd {
		_ = unix.Close(fd)
	}
}

// open opens the file name in d, never through a symlink, creating it
// (fileMode) when flags say so; it must be a regular file of ours (its
// mode narrowed if wider, when opened for writing), or, for reading,
// root's.
func (d *dir) open(name string, flags int) (*os.File, error) {
	return d.openFile(name, flags, flags&(unix.O_WRONLY|unix.O_RDWR) != 0)
}

// openFile is open, narrowing a wider mode only when narrow. A file that
// leaderrun flocks is opened without: one of a wider mode is replaced,
// not narrowed (lockfile.go).
func (d *dir) openFile(name string, flags int, narrow bool) (*os.File, error) {
	path := filepath.Join(d.path, name)
	fd, err := unix.Openat(d.fd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, fileMode)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, d.refuse(path+" is a symlink; refusing it", nil)
		}
		return nil, d.refuse("cannot open "+path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, d.refuse("cannot read "+path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return nil, d.refuse(path+" is not a regular file", nil)
	}
	readOnly := flags&(unix.O_WRONLY|unix.O_RDWR) == 0
	if !(readOnly && st.Uid == 0) {
		if err := d.ownEntry(fd, path, &st, fileMode, narrow); err != nil {
			_ = unix.Close(fd)
			return nil, err
		}
	}
	// O_NONBLOCK only kept a FIFO put in our place from blocking the open.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags&unix.O_APPEND); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// readFile reads the file name in d (open's rules); a missing one is an
// error that errors.Is(os.ErrNotExist).
func (d *dir) readFile(name string) ([]byte, error) {
	f, err := d.open(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// replace durably replaces the file name in d with data: a temporary
// file made afresh (never one that is there already, nor through a
// symlink), fsync, rename, fsync of the directory. The callers of the
// counters and the control record keep other writers of name out (an
// flock); a term record's writers write the same content.
func (d *dir) replace(name string, data []byte) error {
	tmp := name + ".tmp"
	path := filepath.Join(d.path, name)
	var f *os.File
	var err error
	for range 3 { // another writer's temporary file may appear meanwhile
		_ = unix.Unlinkat(d.fd, tmp, 0)
		if f, err = d.open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL); !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := unix.Renameat(d.fd, tmp, d.fd, name); err != nil {
		return d.refuse("cannot replace "+path, err)
	}
	return unix.Fsync(d.fd)
}

// remove removes the file name in d.
func (d *dir) remove(name string) error { return unix.Unlinkat(d.fd, name, 0) }

// names lists the entries of d.
func (d *dir) names() []string {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	return names
}

// openTree opens the directory rel below the configured directory root,
// both as openDir and sub check them; field names the setting of root.
func openTree(root, rel, field string, create bool) (*dir, error) {
	base, err := openDir(root, field, create)
	if err != nil {
		return nil, err
	}
	defer base.close()
	return base.sub(rel, create)
}
