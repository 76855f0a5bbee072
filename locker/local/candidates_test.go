//go:build linux

package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

func TestCandidates(t *testing.T) {
	dir := t.TempDir()
	lockertest.CandidatesContract(t, lockertest.Waiting[*Locker]{
		New: func(t *testing.T, key string, opts func(*locker.Options)) *Locker {
			o := locker.Options{Key: key, Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second}
			opts(&o)
			l, err := New(Config{Options: o, Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		},
		Unordered: true,
	})
}

// waitingRecords lists the waiting records beside key's lock file.
func waitingRecords(t *testing.T, dir, key string) []string {
	t.Helper()
	names, err := os.ReadDir(filepath.Join(dir, "leaderrun"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n.Name(), key+".lock"+waitingInfix) {
			out = append(out, n.Name())
		}
	}
	return out
}

// A record whose candidate died waiting (no flock on it) is not listed,
// and the next candidate to wait deletes it; a candidate that stops
// waiting deletes its own.
func TestCandidatesDeadRecord(t *testing.T) {
	dir := t.TempDir()
	key := lockertest.Key(t)
	leader := newLockerKey(t, dir, key)
	defer leader.Close()
	lockertest.MustAcquire(t, leader)
	dead := filepath.Join(dir, "leaderrun", key+".lock"+waitingInfix+"0123456789abcdef")
	h := locker.Holder{ID: "died", Hostname: "h", PID: os.Getpid(), AcquiredAt: time.Now()}
	if err := os.WriteFile(dead, h.Record(), 0o600); err != nil {
		t.Fatal(err)
	}
	if cs, err := leader.Candidates(lockertest.Ctx(t, 5*time.Second)); err != nil || len(cs) != 0 {
		t.Fatalf("Candidates with a dead candidate's record = %+v, %v; want none", cs, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	standby := newLockerKey(t, dir, key)
	defer standby.Close()
	done := lockertest.AcquireAsync(t, ctx, standby)
	var cs []locker.Candidate
	testsupport.WaitFor(t, 10*time.Second, "the standby listed", func() bool {
		cs, _ = leader.Candidates(lockertest.Ctx(t, 5*time.Second))
		return len(cs) == 1
	})
	if cs[0].ID != "me" || cs[0].PID != os.Getpid() || cs[0].Place != 0 {
		t.Errorf("the standby listed as %+v", cs[0])
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead candidate's record is still there: %v", err)
	}
	cancel()
	if got := <-done; got.Err == nil {
		t.Fatal("the standby acquired a held key")
	}
	if left := waitingRecords(t, dir, key); len(left) != 0 {
		t.Errorf("records left after the standby stopped waiting: %v", left)
	}
}
