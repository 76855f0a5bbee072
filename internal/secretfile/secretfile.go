// Package secretfile reads a credential from a file named by an option
// (--etcd-password-file, --zk-auth-file): a way to give a secret that
// neither `ps` nor the job's environment shows. It links only the
// standard library, so the small guard reads the same files the same way
// when it releases a lease.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// ErrNotRegular says a file named for reading is a FIFO, a device, a
// socket or a directory. leaderrun reads only regular files: another
// user's FIFO in a shared directory would otherwise hang its start for
// good, and a device would give no end.
var ErrNotRegular = errors.New("not a regular file")

// Open opens path for reading only if it is a regular file. The open
// itself does not block (O_NONBLOCK: a FIFO with no writer would), and
// the kind is judged on the opened descriptor, so a file swapped for a
// FIFO after a check cannot slip through.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	return f, nil
}

// ReadFile is os.ReadFile for regular files only (Open).
func ReadFile(path string) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Read returns the secret held in path: the file's contents less one
// trailing newline ("\n" or "\r\n"), the way `echo secret > file` and
// most secret stores write it. Other white space is part of the secret.
// An empty secret is an error: a file emptied by mistake must not turn
// into "no password". Its errors do not repeat the path.
func Read(path string) (string, error) {
	b, err := ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return "", pe.Err
		}
		return "", err
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", errors.New("the file is empty")
	}
	return s, nil
}

// Exposed says why others than its owner may read the file at path, or
// "" when they cannot: its group or every user may read it. The caller
// warns (it does not refuse: the secrets a container platform mounts are
// readable by all by default, inside a container where no other user
// runs).
func Exposed(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return exposed(st.Mode().Perm())
}

func exposed(perm fs.FileMode) string {
	switch {
	case perm&0o004 != 0:
		return fmt.Sprintf("mode %04o: every user of the host may read it", perm)
	case perm&0o040 != 0:
		return fmt.Sprintf("mode %04o: its group may read it", perm)
	}
	return ""
}
