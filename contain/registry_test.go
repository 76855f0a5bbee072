//go:build linux

package contain

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The registry of live jobs: a job is registered from NewJob until it is
// removed; Recheck names a registered job of a dead leaderrun of the key,
// and nothing else, until a Sweep that began after that leaderrun died
// forgets it.
func TestRecheckFindsRegisteredJobsOfDeadLeaderruns(t *testing.T) {
	if err := SealError(); err != nil {
		t.Skipf("no marker key: %v", err)
	}
	key := "local\x00leaderrun\x00recheck-" + strconv.Itoa(os.Getpid())
	b, err := Open(Group, Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if why := b.Recheck(); why != "" {
		t.Fatalf("recheck of a key never run: %q", why)
	}
	entry := func(tok string) string {
		base, _ := unseal(tok)
		return filepath.Join(sealDir(), liveDir(tokenKey(base)), base)
	}
	j, err := b.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(entry(j.token)); err != nil {
		t.Fatalf("the job is not registered: %v", err)
	}
	if why := b.Recheck(); why != "" {
		t.Errorf("recheck beside this process's own job: %q", why)
	}

	// This pid with another start time: a dead leaderrun. And one of
	// another key.
	me, myStart := os.Getpid(), StartTime(os.Getpid())
	dead := fmt.Sprintf("%d.%d.%d.%d.%s.%s", me, 1, monoNow(), myStart+1, self().ns, keyHash(key))
	other := fmt.Sprintf("%d.%d.%d.%d.%s.%s", me, 1, monoNow(), myStart+1, self().ns, keyHash(key+"-other"))
	for _, tok := range []string{dead, other} {
		if err := register(tok); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { unregister(other) })
	if why := b.Recheck(); !strings.Contains(why, dead) {
		t.Errorf("recheck with a dead leaderrun's job registered: %q, want it named", why)
	}
	if _, err := b.Sweep(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if why := b.Recheck(); why != "" {
		t.Errorf("recheck after a sweep: %q", why)
	}
	if _, err := os.Stat(entry(other)); err != nil {
		t.Errorf("the sweep forgot another key's entry: %v", err)
	}
	if _, err := os.Stat(entry(j.token)); err != nil {
		t.Errorf("the sweep forgot a live leaderrun's entry: %v", err)
	}
	if err := j.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(entry(j.token)); !os.IsNotExist(err) {
		t.Errorf("the job's entry outlived its removal: %v", err)
	}
}
