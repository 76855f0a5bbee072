package e2e

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// Everything that can be checked before campaigning is (DESIGN §1.10): a
// run that cannot work ends with one line and its exit code before the
// "campaigning" line, and leaves nothing behind.

// listTree lists every path under the roots (none for a missing root).
func listTree(roots ...string) []string {
	var all []string
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
			if err == nil {
				all = append(all, p)
			}
			return nil
		})
	}
	slices.Sort(all)
	return all
}

// refusedUpFront fails the test unless p exited with code and one line
// holding each of says, before campaigning, and the paths under roots are
// the same as before.
func refusedUpFront(t *testing.T, p *Proc, code int, before []string, roots []string, says ...string) {
	t.Helper()
	got := p.Wait(20 * time.Second)
	out := strings.TrimSpace(p.Output())
	if got != code || strings.Count(out, "\n") != 0 || strings.Contains(out, "campaigning") {
		t.Fatalf("exit %d, want %d and one line before campaigning:\n%s", got, code, out)
	}
	for _, s := range says {
		if !strings.Contains(out, s) {
			t.Fatalf("the line does not say %q:\n%s", s, out)
		}
	}
	if after := listTree(roots...); !slices.Equal(before, after) {
		t.Fatalf("a refused run made %v", slices.DeleteFunc(after, func(p string) bool { return slices.Contains(before, p) }))
	}
}

// A lock or state directory the user cannot write to is refused before
// campaigning, naming the flag, and the user's default directories are not
// made on the way.
func TestUnwritableDirsAreRefusedBeforeCampaigning(t *testing.T) {
	u := newOtherUser(t)
	uid := strconv.Itoa(u.uid)
	own := []string{"/tmp/leaderrun-" + uid, "/var/tmp/leaderrun-" + uid}
	// Root's, mode 0755, where the user can look but not write (a TempDir
	// lies in a directory of mode 0700).
	root, err := os.MkdirTemp("/tmp", "leaderrun-precheck-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(root, "empty")
	// A lock directory used before, whose prefix directory exists: making
	// it succeeds, and only the lock file could not be created.
	used := filepath.Join(root, "used")
	for _, d := range []string{empty, filepath.Join(used, "leaderrun")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A shared lock directory (mode 1777, like /tmp) where another user's
	// lock file for the key is there already, readable only.
	shared := filepath.Join(root, "shared")
	if err := os.MkdirAll(filepath.Join(shared, "leaderrun"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{shared, filepath.Join(shared, "leaderrun")} {
		if err := os.Chmod(d, 0o1777); err != nil {
			t.Fatal(err)
		}
	}
	othersLock := filepath.Join(shared, "leaderrun", "k.lock")
	if err := os.WriteFile(othersLock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// An interpreter the user may not execute.
	private := filepath.Join(root, "private-sh")
	if err := exec.Command("cp", "/bin/sh", private).Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(u.home, "job.sh")
	if err := os.WriteFile(script, []byte("#!"+private+"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	roots := append([]string{root}, own...)
	for _, tc := range []struct {
		name string
		args []string
		code int
		says []string
	}{
		{"lock dir", []string{"--lock-dir", empty}, 125, []string{"--lock-dir", empty, "permission denied"}},
		// A prefix directory another user (root) made is not the user's.
		{"lock dir used before", []string{"--lock-dir", used}, 125, []string{"--lock-dir", used, "owned by uid 0"}},
		// A shared sticky directory whose entries are not the user's.
		{"another user's lock file", []string{"--lock-dir", shared}, 125, []string{"--lock-dir", shared, "another user could replace"}},
		{"state dir", []string{"--state-dir", empty}, 125, []string{"--state-dir", empty, "permission denied"}},
		{"interpreter", []string{"--lock-dir", filepath.Join(u.home, "locks"), "--", script}, 126, []string{"interpreter " + private, "not executable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--backend", "local", "--key", "k"}, tc.args...)
			if !slices.Contains(args, "--") {
				args = append(args, "--", "true")
			}
			before := listTree(append(roots, u.home)...)
			p := u.start(t, tc.name, nil, args...)
			refusedUpFront(t, p, tc.code, before, append(roots, u.home), tc.says...)
		})
	}
}

// A read-only lock directory is refused before campaigning for root too,
// whom file modes do not stop.
func TestReadOnlyLockDirIsRefusedForRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs as root")
	}
	dir := t.TempDir()
	testsupport.ReadOnlyTmpfs(t, filepath.Join(dir, "leaderrun"))
	before := listTree(dir)
	p := start(t, "read-only", nil, localArgs(dir, newKey("ro"), "--", "true")...)
	refusedUpFront(t, p, 125, before, []string{dir}, "--lock-dir", dir, "read-only file system")
}

// A script whose #! line cannot run is refused before campaigning with the
// exit code a shell gives it (127: not found), saying why; scripts that do
// run are not refused.
func TestScriptInterpretersAreCheckedBeforeCampaigning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	locks := filepath.Join(dir, "locks")
	for _, tc := range []struct {
		name   string
		script string
		code   int
		says   []string
	}{
		{"CRLF", "#!/bin/sh\r\nexit 0\r\n", 127, []string{"its #! line ends in a carriage return (CRLF line endings)", "dos2unix"}},
		{"CRLF through env", "#!/usr/bin/env sh\r\nexit 0\r\n", 127, []string{"carriage return"}},
		{"missing interpreter", "#!/nonexistent/sh -e\nexit 0\n", 127, []string{"interpreter /nonexistent/sh (from its #! line) not found"}},
		{"plain", "#!/bin/sh\nexit 0\n", 0, nil},
		{"env", "#!/usr/bin/env sh\nexit 0\n", 0, nil},
		{"no #! line", "exit 0\n", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".sh")
			if err := os.WriteFile(script, []byte(tc.script), 0o755); err != nil {
				t.Fatal(err)
			}
			key := newKey("script")
			p := start(t, tc.name, nil, append(localArgs(locks, key), "--", script)...)
			if tc.code == 0 {
				if got := p.Wait(20 * time.Second); got != 0 {
					t.Fatalf("exit %d, want 0\n%s", got, p.Output())
				}
				return
			}
			refusedUpFront(t, p, tc.code, listTree(locks), []string{locks}, append([]string{script + ": "}, tc.says...)...)
		})
	}
}
