package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// An on-disk lock directory keeps its epoch counter beside the lock file,
// and that is its only lasting copy (no host directory, and for root no
// home copy). A counter file edited lower by hand, or deleted, must not make
// a new term repeat an epoch that was already handed out: the lock file
// still carries the last holder's record, and its epoch counts as one more
// place the counter is kept.
func TestLocalEpochNeverGoesDownWhenTheCounterIsEditedOrDeleted(t *testing.T) {
	dir := t.TempDir()
	if volatileDir(dir) {
		t.Skip("the test's temporary directory is on tmpfs: the host directory would keep the count")
	}
	args := []string{"--backend", "local", "--lock-dir", dir, "--key", "k", "-q"}
	counter := filepath.Join(dir, "leaderrun", "k.epoch")
	var last uint64
	for range 3 {
		last = epochOf(t, "", args...)
	}
	for _, tamper := range []struct {
		what string
		do   func() error
	}{
		{"edited lower", func() error { return os.WriteFile(counter, []byte("1\n"), 0o644) }},
		{"deleted", func() error { return os.Remove(counter) }},
		{"set to 0", func() error { return os.WriteFile(counter, []byte("0\n"), 0o644) }},
	} {
		if err := tamper.do(); err != nil {
			t.Fatal(err)
		}
		e := epochOf(t, "", args...)
		if e <= last {
			t.Fatalf("counter %s: the next term got epoch %d after %d", tamper.what, e, last)
		}
		last = e
	}
}

// volatileDir reports whether dir is on tmpfs or ramfs.
func volatileDir(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return true
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}
