//go:build linux

package contain

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
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
	// Until a full sweep made its registry, a key's recheck asks for one.
	if why := b.Recheck(); !strings.Contains(why, "is gone") {
		t.Fatalf("recheck of a key never swept here: %q, want a sweep asked for", why)
	}
	if _, err := b.Sweep(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if why := b.Recheck(); why != "" {
		t.Fatalf("recheck of a key swept, never run: %q", why)
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

// A job that is not registered (a leaderrun of an older version) and whose
// leaderrun is alive when a sweep runs is spared by it; once that
// leaderrun dies, Recheck must ask for a sweep, though nothing is
// registered.
func TestRecheckWatchesTheLeaderrunsOfUnregisteredJobs(t *testing.T) {
	if err := SealError(); err != nil {
		t.Skipf("no marker key: %v", err)
	}
	key := "local\x00leaderrun\x00unregistered-" + strconv.Itoa(os.Getpid())
	owner := exec.Command("sleep", "60")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	go owner.Wait()
	defer owner.Process.Kill()
	testsupport.WaitFor(t, 5*time.Second, "the owner to run", func() bool { return StartTime(owner.Process.Pid) != 0 })
	job, _ := markedProcess(t, owner.Process.Pid, StartTime(owner.Process.Pid), key, `exec sleep 60`)
	testsupport.WaitFor(t, 5*time.Second, "the job to run", func() bool { return len(markers(job.Process.Pid)) > 0 })

	b, err := Open(Group, Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Sweep(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !ProcessAlive(job.Process.Pid) {
		t.Fatal("a live leaderrun's job was swept")
	}
	if why := b.Recheck(); why != "" {
		t.Fatalf("recheck while the job's leaderrun lives: %q", why)
	}
	_ = owner.Process.Kill()
	testsupport.WaitFor(t, 5*time.Second, "the owner to die", func() bool { return !ProcessAlive(owner.Process.Pid) })
	why := b.Recheck()
	if !strings.Contains(why, strconv.Itoa(owner.Process.Pid)) {
		t.Fatalf("recheck once the unregistered job's leaderrun died: %q, want a sweep asked for", why)
	}
	if _, err := b.Sweep(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if ProcessAlive(job.Process.Pid) {
		t.Error("the dead leaderrun's job survived the sweep")
	}
	if why := b.Recheck(); why != "" {
		t.Errorf("recheck after that sweep: %q", why)
	}
}

// A registry directory removed since the last sweep (an operator's rm -rf,
// a cleaner of old files) took the entries of live jobs with it: Recheck
// must ask for a sweep, whether the directory is missing or was made
// again by the next job, until a sweep has read the new one.
func TestRecheckSweepsOnceTheRegistryWasDeleted(t *testing.T) {
	if err := SealError(); err != nil {
		t.Skipf("no marker key: %v", err)
	}
	key := "local\x00leaderrun\x00removed-" + strconv.Itoa(os.Getpid())
	b, err := Open(Group, Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if why := b.Recheck(); why == "" {
		t.Error("recheck before any sweep vouched for the host")
	}
	if _, err := b.Sweep(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if why := b.Recheck(); why != "" {
		t.Fatalf("recheck after a sweep: %q", why)
	}
	dir := filepath.Join(sealDir(), liveDir(keyHash(key)))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if why := b.Recheck(); !strings.Contains(why, "is gone") {
		t.Errorf("recheck with the registry removed: %q, want a full sweep asked for", why)
	}
	j, err := b.NewJob() // makes the directory again
	if err != nil {
		t.Fatal(err)
	}
	defer j.Remove()
	if why := b.Recheck(); why == "" {
		t.Error("recheck with the registry made again vouched for the host")
	}
	if _, err := b.Sweep(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if why := b.Recheck(); why != "" {
		t.Errorf("recheck after the sweep that read the new registry: %q", why)
	}
}

// An entry removed by hand (an operator cleaning what the docs say stays
// behind, a cleaner of old files) while its job runs: should its
// leaderrun and guard then be killed together, nothing would name the
// leftover to a Recheck. The tally shows the entry missing, and Recheck
// asks for a sweep until one finds every live job of the key with its
// entry again; an entry removed as its job ends leaves nothing missing.
func TestRecheckSweepsOnceAnEntryWasRemovedByHand(t *testing.T) {
	b, _ := sweptBox(t, "tally")
	if why := b.Recheck(); why != "" {
		t.Fatalf("recheck of a key just swept: %q", why)
	}
	ended, err := b.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	kept, err := b.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	if err := ended.Remove(); err != nil { // its job is gone
		t.Fatal(err)
	}
	if why := b.Recheck(); why != "" {
		t.Fatalf("recheck after a job's own removal: %q", why)
	}
	base, _ := unseal(kept.token)
	if err := os.Remove(filepath.Join(sealDir(), liveDir(tokenKey(base)), base)); err != nil {
		t.Fatal(err)
	}
	why := b.Recheck()
	if !strings.Contains(why, "fewer than were registered") {
		t.Fatalf("recheck after an entry was removed by hand: %q, want a sweep asked for", why)
	}
	// A sweep that finds the job's process alive without its entry
	// (none runs here: the job never started) leaves it asking; one that
	// finds every live job registered settles the tally.
	if _, err := b.Sweep(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if why := b.Recheck(); why != "" {
		t.Fatalf("recheck after a sweep found every live job registered: %q", why)
	}
	_ = kept.Remove()
}

// An entry removed by hand after a sweep's last scan, which saw its job
// registered, and before the sweep's recount: counting the entries then
// left would take the loss into the tally, and the next Recheck would
// vouch for the host should the job's leaderrun and guard be killed
// together. The recount keeps the tally when more entries are missing
// than were before the scans.
func TestRecountKeepsAnEntryRemovedDuringTheSweep(t *testing.T) {
	b, key := sweptBox(t, "recount")
	kept, err := b.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Remove()
	// What a sweep reads before its scans.
	before, err := registeredTally(keyHash(key), true)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := unseal(kept.token)
	if err := os.Remove(filepath.Join(sealDir(), liveDir(tokenKey(base)), base)); err != nil {
		t.Fatal(err)
	}
	// Its scans found the job registered: every live job had its entry.
	recount(keyHash(key), before.id, true, false, before)
	if why := b.Recheck(); !strings.Contains(why, "fewer than were registered") {
		t.Fatalf("recheck after an entry was removed during a sweep: %q, want a sweep asked for", why)
	}
}

// An entry the tally never counted (written by a leaderrun of the
// version before the tally, run beside this one during an upgrade with
// --holders 2, or by one killed between its entry and the tally's
// raise) and another entry removed by hand: as many entries as the
// tally counts, and a Recheck that compared counts vouched for the
// host, though the removed entry's job could be left behind. The tally
// names the entries it counts.
func TestRecheckSweepsOnceAnEntryWasRemovedBesideAnUncountedOne(t *testing.T) {
	b, _ := sweptBox(t, "uncounted")
	kept, err := b.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Remove()
	base, _ := unseal(kept.token)
	dir := filepath.Join(sealDir(), liveDir(tokenKey(base)))
	// An older leaderrun's entry: the file alone, of a live leaderrun
	// (this process, as another job of it).
	f := strings.Split(base, ".")
	f[1] += "0000"
	old := strings.Join(f, ".")
	if err := os.WriteFile(filepath.Join(dir, old), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(dir, old))
	if err := os.Remove(filepath.Join(dir, base)); err != nil {
		t.Fatal(err)
	}
	if why := b.Recheck(); why == "" {
		t.Fatal("recheck after an entry was removed beside an uncounted one vouched for the host, want a sweep asked for")
	}
}

// Jobs and health checks registered and removed as a leader runs them,
// with nothing removed by hand: the tally follows them and Recheck never
// asks for a full sweep (each would cost a term a scan of /proc).
func TestRecheckVouchesWhileJobsAndChecksComeAndGo(t *testing.T) {
	b, _ := sweptBox(t, "steady")
	for i := range 3 {
		j, err := b.NewJob()
		if err != nil {
			t.Fatal(err)
		}
		c, err := b.NewCheck()
		if err != nil {
			t.Fatal(err)
		}
		if why := b.Recheck(); why != "" {
			t.Fatalf("round %d, recheck beside a running job and check: %q", i, why)
		}
		_ = c.Remove() // not seen gone: its entry stays
		if err := j.Remove(); err != nil {
			t.Fatal(err)
		}
		if why := b.Recheck(); why != "" {
			t.Fatalf("round %d, recheck once they ended: %q", i, why)
		}
	}
}

// An entry removed by hand whose job then ends as jobs do (seen gone):
// its name leaves the tally with it, and Recheck vouches at once, with
// no full sweep left to settle a count.
func TestRecheckVouchesOnceAJobWhoseEntryWasRemovedEnded(t *testing.T) {
	b, _ := sweptBox(t, "ended")
	j, err := b.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	base, _ := unseal(j.token)
	if err := os.Remove(filepath.Join(sealDir(), liveDir(tokenKey(base)), base)); err != nil {
		t.Fatal(err)
	}
	if why := b.Recheck(); why == "" {
		t.Fatal("recheck while a job's entry is missing vouched for the host")
	}
	if err := j.Remove(); err != nil {
		t.Fatal(err)
	}
	if why := b.Recheck(); why != "" {
		t.Fatalf("recheck once the job ended: %q", why)
	}
}

// sweptBox opens a group-mode box of a key of its own, named after name
// and this process, and sweeps it once: its registry is then the one
// Recheck trusts. It skips without a marker key.
func sweptBox(t *testing.T, name string) (*Box, string) {
	t.Helper()
	if err := SealError(); err != nil {
		t.Skipf("no marker key: %v", err)
	}
	key := "local\x00leaderrun\x00" + name + "-" + strconv.Itoa(os.Getpid())
	b, err := Open(Group, Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Sweep(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	return b, key
}
