package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// An on-disk lock directory keeps its epoch counter beside the lock file
// (and a copy in the host directory, which locker/local's
// TestLockFileRecordsKeepTheCount deletes too). A counter file edited
// lower by hand, or deleted, must not make
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

// A lock file removed, or replaced by another file, while its holder runs
// a job: the holder finds out at its next renewal and stops, but a waiting
// candidate can lock a new file at the path at once. It must not start its
// job while the old holder's job still runs.
func TestLocalLockFileRemovedWhileHeldStartsNoSecondJob(t *testing.T) {
	for _, tamper := range []string{"removed", "replaced"} {
		t.Run(tamper, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--backend", "local", "--lock-dir", dir, "--key", "k",
				"--ttl", "4s", "--renew-interval", "1s", "--kill-grace", "200ms", "--safety-margin", "500ms"}
			job := func(name string) string {
				return "echo \"$LEADER_EPOCH\" > " + dir + "/" + name + ".epoch; echo $$ > " + dir + "/" + name + ".pid; exec sleep 1000"
			}
			old := start(t, "old leader", nil, withCommand(args, job("old"))...)
			oldPID := readPID(t, dir+"/old.pid")
			standby := start(t, "standby", nil, withCommand(args, job("new"))...)
			waitFor(t, 5*time.Second, "the standby to campaign", func() bool { return strings.Contains(standby.Output(), "waiting for the holder") })
			lock := filepath.Join(dir, "leaderrun", "k.lock")
			switch tamper {
			case "removed":
				if err := os.Remove(lock); err != nil {
					t.Fatal(err)
				}
			case "replaced":
				other := lock + ".other"
				if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(other, lock); err != nil {
					t.Fatal(err)
				}
			}
			var newPID int
			waitFor(t, 8*time.Second, "the standby's job", func() bool {
				if b, err := os.ReadFile(dir + "/new.pid"); err == nil {
					if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && alive(pid) {
						newPID = pid
						if alive(oldPID) {
							t.Fatalf("the standby's job %d runs while the old job %d lives", newPID, oldPID)
						}
						return true
					}
				}
				return false
			})
			if code := old.Wait(5 * time.Second); code != 123 {
				t.Fatalf("old leader exited %d, want 123", code)
			}
			oe, ne := readEpochFile(t, dir+"/old.epoch"), readEpochFile(t, dir+"/new.epoch")
			if ne <= oe {
				t.Fatalf("the standby leads with epoch %d after %d", ne, oe)
			}
		})
	}
}

func readEpochFile(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// The lock directory wiped while a leader runs (rm -rf of /run/leaderrun's
// contents, say): the leader loses at its next renewal, and a waiting
// candidate goes on campaigning in the directory made anew, then leads
// with a larger epoch, rather than giving up.
func TestLocalStandbyOutlivesAWipedLockDir(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--backend", "local", "--lock-dir", dir, "--state-dir", t.TempDir(), "--key", "k",
		"--ttl", "4s", "--renew-interval", "1s", "--kill-grace", "200ms", "--safety-margin", "500ms"}
	out := t.TempDir()
	job := func(name string) string {
		return "echo \"$LEADER_EPOCH\" > " + out + "/" + name + ".epoch; echo $$ > " + out + "/" + name + ".pid; exec sleep 1000"
	}
	old := start(t, "old leader", nil, withCommand(args, job("old"))...)
	oldPID := readPID(t, out+"/old.pid")
	standby := start(t, "standby", nil, withCommand(args, job("new"))...)
	waitFor(t, 5*time.Second, "the standby to campaign", func() bool { return strings.Contains(standby.Output(), "waiting for the holder") })
	// Wiped at once (a tmpfs unmounted, a directory moved away), so that no
	// candidate's new lock file lands in it before it goes.
	sub := filepath.Join(dir, "leaderrun")
	if err := os.Rename(sub, sub+".wiped"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(sub + ".wiped"); err != nil {
		t.Fatal(err)
	}
	if code := old.Wait(5 * time.Second); code != 123 {
		t.Fatalf("old leader exited %d, want 123", code)
	}
	newPID := readPID(t, out+"/new.pid")
	if alive(oldPID) {
		t.Fatalf("the standby's job %d runs while the old job %d lives", newPID, oldPID)
	}
	if oe, ne := readEpochFile(t, out+"/old.epoch"), readEpochFile(t, out+"/new.epoch"); ne <= oe {
		t.Fatalf("the standby leads with epoch %d after %d", ne, oe)
	}
	standby.Signal(syscall.SIGTERM)
	standby.Wait(5 * time.Second)
}

// A lock file truncated or overwritten by hand while held: `leaderrun
// check` in the job then reads no record of this epoch and says "not
// leader", so the holder must not go on running the job as if it led: its
// next renewal finds the record no longer its own, and the term ends as
// lost (123), as for a lock file removed.
func TestLocalLockRecordEditedWhileHeldEndsTheTerm(t *testing.T) {
	for _, tamper := range []string{"truncated", "overwritten"} {
		t.Run(tamper, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--backend", "local", "--lock-dir", dir, "--key", "k",
				"--ttl", "4s", "--renew-interval", "500ms", "--kill-grace", "200ms", "--safety-margin", "500ms"}
			p := start(t, "leader", nil, withCommand(args, "echo $$ > "+dir+"/job.pid; exec sleep 1000")...)
			job := readPID(t, dir+"/job.pid")
			lock := filepath.Join(dir, "leaderrun", "k.lock")
			data := []byte{}
			if tamper == "overwritten" {
				data = []byte(`{"id":"someone","pid":1,"epoch":999}`)
			}
			// Truncating keeps the inode: the path still names the file
			// whose flock leaderrun holds.
			if err := os.WriteFile(lock, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if code := p.Wait(5 * time.Second); code != 123 {
				t.Fatalf("leaderrun exited %d, want 123", code)
			}
			if alive(job) {
				t.Fatal("the job outlived its term")
			}
		})
	}
}
