package local

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// tree lists every path under the roots, so a test can see that nothing
// was made.
func tree(t *testing.T, roots ...string) []string {
	t.Helper()
	var all []string
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
			all = append(all, p)
			return nil
		})
	}
	slices.Sort(all)
	return all
}

// A lock or state directory New could not make or write in is refused by
// New, before anything campaigns, as a ConfigError naming the setting and
// the directory; and every check comes before the first directory is made,
// so a refusal leaves nothing behind. A read-only mount stands for an
// unwritable directory: it stops root too.
func TestNewRefusesUnwritableDirsAndMakesNothing(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "leaderrun-test-")
	if err != nil || !volatile(shm) {
		t.Skipf("no tmpfs at /dev/shm: %v", err)
	}
	defer os.RemoveAll(shm)
	base := t.TempDir()
	ro := filepath.Join(base, "ro")
	testsupport.ReadOnlyTmpfs(t, ro)
	// The prefix directory exists and cannot be written: mkdir -p of it
	// succeeds, and only creating the lock file would fail.
	roPrefix := filepath.Join(base, "locks")
	testsupport.ReadOnlyTmpfs(t, filepath.Join(roPrefix, "leaderrun"))
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(base, "host")
	saved := hostDir
	hostDir = func(int) string { return host }
	defer func() { hostDir = saved }()

	for _, tc := range []struct {
		name      string
		dir, st   string
		roHost    bool
		field     string
		says, why string
	}{
		{"lock dir read-only", ro, "", false, "Dir", "cannot create " + ro + "/leaderrun: cannot write to " + ro, "read-only file system"},
		{"prefix dir read-only", roPrefix, "", false, "Dir", "cannot write to " + roPrefix + "/leaderrun", "read-only file system"},
		{"state dir read-only", filepath.Join(base, "new", "locks"), ro, false, "StateDir", "cannot write to " + ro, "read-only file system"},
		{"state dir under a file", filepath.Join(base, "new", "locks"), filepath.Join(file, "state"), false, "StateDir", file + " is not a directory", ""},
		{"lock dir under a file", filepath.Join(file, "locks"), "", false, "Dir", file + " is not a directory", ""},
		{"host dir read-only, no state dir", filepath.Join(shm, "locks"), "", true, "StateDir", "cannot write to " + ro, "read-only file system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.roHost {
				hostDir = func(int) string { return ro }
				defer func() { hostDir = func(int) string { return host } }()
			}
			before := tree(t, base, shm)
			_, err := New(Config{Options: locker.Options{Key: "job", Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second}, Dir: tc.dir, StateDir: tc.st})
			if after := tree(t, base, shm); err != nil && !slices.Equal(before, after) {
				t.Fatalf("New refused (%v) and made %v", err, slices.DeleteFunc(after, func(p string) bool { return slices.Contains(before, p) }))
			}
			var ce *locker.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, locker.ErrRefused) {
				t.Fatalf("New = %v, want a ConfigError for %s", err, tc.field)
			}
			if !strings.Contains(ce.Rule, tc.says) || tc.why != "" && (ce.Err == nil || !strings.Contains(ce.Err.Error(), tc.why)) {
				t.Fatalf("New = %q, want %q and %q", err, tc.says, tc.why)
			}
		})
	}

	// A host directory that cannot be made is no refusal when a state
	// directory is given: the counter there stands in for it.
	hostDir = func(int) string { return ro }
	l, err := New(Config{Options: locker.Options{Key: "job", Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second}, Dir: filepath.Join(shm, "locks"), StateDir: filepath.Join(base, "state")})
	if err != nil {
		t.Fatalf("read-only host directory with a state directory: %v", err)
	}
	lease, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(context.Background())
	hostDir = func(int) string { return host }
}

// A directory that passed the checks and still cannot be made (here: a
// state directory on a file system out of inodes) fails the first write
// to it, naming the setting; New made nothing before. Out of space or
// inodes, that is no refusal (exit 125) but a failed attempt, retried:
// the space may be freed (TestOtherUsersFullFileSystemIsNoRefusal).
func TestMakingThatFailsNamesTheSetting(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", state, "tmpfs", 0, "size=64k,nr_inodes=8"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	defer func() { _ = unix.Unmount(state, unix.MNT_DETACH) }()
	for i := 0; ; i++ {
		if err := os.WriteFile(filepath.Join(state, strconv.Itoa(i)), nil, 0o644); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	locks := filepath.Join(base, "new", "locks")
	l, err := New(Config{Options: locker.Options{Key: "job", Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second}, Dir: locks, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("New made the lock directory: %v", err)
	}
	_, err = l.Acquire(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "StateDir: ") || !errors.Is(err, unix.ENOSPC) || errors.Is(err, locker.ErrRefused) {
		t.Fatalf("Acquire = %v, want an error for StateDir saying ENOSPC, not a refusal", err)
	}
}

// File modes do not stop root, so for root a directory of mode 0500 is
// writable, and New takes it.
func TestRootWritesModeLessDirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := filepath.Join(t.TempDir(), "locks")
	if err := os.Mkdir(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		t.Fatalf("root cannot write to a 0500 directory here: %v", err)
	}
	l := newLocker(t, dir, true)
	lease, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(context.Background())
}
