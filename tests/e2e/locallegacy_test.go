package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// legacyLockDir is a lock directory reachable by every user, holding the
// lock file of key as a version before private lock files left it: mode
// 0644 in a 0755 prefix directory. It returns the directory and the lock
// file.
func legacyLockDir(t *testing.T, key string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "leaderrun"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, testsupport.WriteFile(t, filepath.Join(dir, "leaderrun", key+".lock"), "{}\n", 0o644)
}

// jobEpoch reads the LEADER_EPOCH a job wrote into file.
func jobEpoch(t *testing.T, file string) uint64 {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the job's output: %v", err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Another user opened a lock file an earlier version left readable by all
// and keeps that descriptor. Root's leaderrun used the file since (which
// narrowed it to 0600 and left the descriptor working); the other user
// then flocks it. Root's next run must still run its job, not exit 124 on
// "held by pid N (flock), not a leaderrun".
func TestLocalLegacyLockFileOtherUser(t *testing.T) {
	t.Parallel()
	dir, lockFile := legacyLockDir(t, "up")
	marks := testsupport.SharedDir(t)
	testsupport.StartAsNobody(t, "sh", "-c", `exec 3<"$1"; : >"$2/opened"
while [ ! -e "$2/go" ]; do sleep 0.05; done
flock -x 3 && : >"$2/locked" && exec sleep 600`, "sh", lockFile, marks)
	waitFor(t, 20*time.Second, "nobody's descriptor of the lock file", func() bool {
		_, err := os.Stat(filepath.Join(marks, "opened"))
		return err == nil
	})
	out := t.TempDir()
	first := start(t, "first", nil, withCommand(localArgs(dir, "up", "--no-wait"), "echo $LEADER_EPOCH > "+out+"/first")...)
	if code := first.Wait(30 * time.Second); code != 0 {
		t.Fatalf("first run: exit %d, want 0", code)
	}
	e1 := jobEpoch(t, out+"/first")
	testsupport.WriteFile(t, filepath.Join(marks, "go"), "", 0o644)
	waitFor(t, 20*time.Second, "nobody's flock through its old descriptor", func() bool {
		_, err := os.Stat(filepath.Join(marks, "locked"))
		return err == nil
	})
	second := start(t, "second", nil, withCommand(localArgs(dir, "up", "--no-wait"), "echo $LEADER_EPOCH > "+out+"/second")...)
	if code := second.Wait(30 * time.Second); code != 0 {
		t.Fatalf("second run while nobody flocks its descriptor of the legacy lock file: exit %d, want 0", code)
	}
	if e2 := jobEpoch(t, out+"/second"); e2 <= e1 {
		t.Errorf("epoch %d after %d", e2, e1)
	}
}

// Several of root's candidates start together on a lock file an earlier
// version left readable by all, while another user, who opened it then,
// flocks its descriptor: from the start, or as soon as leaderrun narrowed
// or replaced the file (its directory is closed to that user by then).
// Every candidate runs its job in turn, never two at once, and each
// term's epoch is larger than the last.
func TestLocalLegacyLockFileRaceOtherUser(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, wait string }{
		{"locked once leaderrun used it", `while :; do s=$(stat -L -c '%a %h' /proc/self/fd/3); [ "$s" = "600 1" ] || [ "${s#* }" = 0 ] && break; sleep 0.01; done`},
		{"locked before they start", ":"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raceLegacyLockFile(t, tc.wait)
		})
	}
}

// raceLegacyLockFile is TestLocalLegacyLockFileRaceOtherUser with the
// other user's flock after the shell command wait (":": before the
// candidates start).
func raceLegacyLockFile(t *testing.T, wait string) {
	dir, lockFile := legacyLockDir(t, "race")
	marks := testsupport.SharedDir(t)
	testsupport.StartAsNobody(t, "sh", "-c", `exec 3<"$1"; : >"$2/opened"
`+wait+`
flock -x 3 && : >"$2/locked" && exec sleep 600`, "sh", lockFile, marks)
	waitFor(t, 20*time.Second, "nobody's descriptor of the lock file", func() bool {
		_, err := os.Stat(filepath.Join(marks, "opened"))
		return err == nil
	})
	if wait == ":" {
		waitFor(t, 20*time.Second, "nobody's flock", func() bool {
			_, err := os.Stat(filepath.Join(marks, "locked"))
			return err == nil
		})
	}
	out := t.TempDir()
	// noclobber: the marker is made with O_EXCL, so a job that starts while
	// another runs finds it there.
	job := fmt.Sprintf(`set -C; : >%[1]s/running || echo "$LEADER_EPOCH" >>%[1]s/overlap
echo "$LEADER_EPOCH" >>%[1]s/epochs; sleep 0.3; rm -f %[1]s/running`, out)
	const n = 4
	var cands []*Proc
	for i := range n {
		cands = append(cands, start(t, fmt.Sprintf("candidate %d", i), nil, withCommand(localArgs(dir, "race"), job)...))
	}
	for i, p := range cands {
		if code := p.Wait(60 * time.Second); code != 0 {
			t.Errorf("candidate %d: exit %d, want 0", i, code)
		}
	}
	if b, err := os.ReadFile(out + "/overlap"); err == nil {
		t.Errorf("jobs ran at the same time (epochs %q)", b)
	}
	b, _ := os.ReadFile(out + "/epochs")
	lines := strings.Fields(string(b))
	if len(lines) != n {
		t.Fatalf("%d jobs ran, want %d: %q", len(lines), n, b)
	}
	var last uint64
	for _, l := range lines {
		e, err := strconv.ParseUint(l, 10, 64)
		if err != nil || e <= last {
			t.Fatalf("epochs in the order the jobs ran: %q; want each larger than the last", b)
		}
		last = e
	}
	if _, err := os.Stat(filepath.Join(marks, "locked")); err != nil {
		t.Log("nobody never took its flock: the test proved less than it should")
	}
}
