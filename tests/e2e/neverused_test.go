package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The case: a job runs as root with its lock directory, and a
// user who runs `leaderrun status KEY` without --lock-dir reads their own
// per-user directory (which exists: they ran something else before). That
// is not "no leader": exit 3, naming the directory and --lock-dir.
func TestLocalStatusInTheWrongPerUserDirSaysNeverUsed(t *testing.T) {
	uid := 60000 + os.Getpid()%5000
	u := newUser(t, uid)
	mine := "/tmp/leaderrun-" + strconv.Itoa(uid)
	t.Cleanup(func() {
		_ = os.RemoveAll(mine)
		_ = os.RemoveAll("/var/tmp/leaderrun-" + strconv.Itoa(uid))
	})
	if code := u.start(t, "own job", nil, "-q", "--backend", "local", "--key", newKey("own"), "--", "true").Wait(10 * time.Second); code != 0 {
		t.Fatalf("the user's own job: exit %d", code)
	}
	key := newKey("billing")
	if code, _, errOut, _ := runOnce(t, nil, "-q", "--backend", "local", "--lock-dir", t.TempDir(), "--key", key, "--", "true"); code != 0 {
		t.Fatalf("root's job: exit %d\n%s", code, errOut)
	}

	st := u.start(t, "status", nil, "status", "--backend", "local", key)
	want := "leaderrun: key \"" + key + "\" was never used at " + mine + " (local lock dir), state dir /var/tmp/leaderrun-" +
		strconv.Itoa(uid) + " — check the key and --lock-dir\n"
	if code := st.Wait(10 * time.Second); code != 3 || !strings.HasSuffix(st.Output(), "\n"+want) {
		t.Fatalf("status in the wrong per-user directory: exit %d, output %q\nwant exit 3, ending in %q", code, st.Output(), want)
	}
	names, _ := os.ReadDir(mine + "/leaderrun")
	for _, n := range names {
		if strings.HasPrefix(n.Name(), key) {
			t.Errorf("status created %s in %s", n.Name(), mine)
		}
	}
}
