package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// registryEntryOf is the registry entry (contain/registry.go) of a job
// of leaderrun pid: root's registry, live.KEYHASH/PID.N.MONO.START.NS.KEY
// under /run/leaderrun.
func registryEntryOf(t *testing.T, pid int) string {
	t.Helper()
	var entry string
	waitFor(t, 10*time.Second, "the job's registry entry", func() bool {
		m, _ := filepath.Glob("/run/leaderrun/live.*/" + strconv.Itoa(pid) + ".*")
		if len(m) == 1 {
			entry = m[0]
		}
		return entry != ""
	})
	return entry
}

// leftoverAfterRegistryLoss runs leader A, whose job daemonizes once
// standby B (same key, same host, local backend) has swept at its start,
// lets lose do what an operator or a cleaner does to A's registry entry,
// kills A and its guard together and checks that B kills the daemon
// before its own child starts.
func leftoverAfterRegistryLoss(t *testing.T, lose func(t *testing.T, entry string)) {
	dir := t.TempDir()
	leftoverAfterTheStandbysSweep(t, dir, daemonizingJob(dir, "env -u LEADER_KEY "), lose)
}

// leftoverAfterTheStandbysSweep is leftoverAfterRegistryLoss with job
// (which writes its daemon's pid to dir/job.pids) for A's job.
func leftoverAfterTheStandbysSweep(t *testing.T, dir, job string, lose func(t *testing.T, entry string)) {
	args := append(localArgs(dir, "k"), "--contain", "group", "--log-level", "debug")
	later := `while [ ! -e ` + dir + `/go ]; do sleep 0.05; done
` + job
	a := start(t, "A", nil, withCommand(args, later)...)
	waitFor(t, 15*time.Second, "A's child to start", func() bool { return strings.Contains(a.Output(), "child started") })
	b := start(t, "B", nil, withCommand(args, checkingJob(dir))...)
	waitFor(t, 15*time.Second, "the standby to campaign", func() bool { return strings.Contains(b.Output(), "waiting for the holder") })
	testsupport.WriteFile(t, filepath.Join(dir, "go"), "", 0o644)
	daemon := jobPids(t, dir, 1)[0]
	t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
	lose(t, registryEntryOf(t, a.Pid()))
	killBoth(t, a)
	if !contain.ProcessAlive(daemon) {
		t.Fatalf("the daemon %d died with its supervisors: nothing left to sweep", daemon)
	}
	nextLeaderSwept(t, b, dir, daemon, "daemon")
}

// TestLeftoverSweptAfterItsRegistryEntryWasRemoved: one registry entry
// of a live job removed (an operator cleaning the entries the docs say
// stay behind, or a cleaner of old files under /tmp/leaderrun-UID, where
// a user's registry lives, aging the entry of a job that has run for
// days), then its leaderrun and guard killed together. The standby's
// re-check found neither the entry nor a changed directory, and its child
// started beside the leftover; the registry's tally now shows the entry
// missing.
func TestLeftoverSweptAfterItsRegistryEntryWasRemoved(t *testing.T) {
	leftoverAfterRegistryLoss(t, func(t *testing.T, entry string) {
		if err := os.Remove(entry); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLeftoverSweptAfterTheRegistryDirectoryWasRemoved: an operator
// removes the key's registry directory (`rm -rf /run/leaderrun/live.*`,
// cleaning up the entries the docs say stay behind) while a job runs;
// then its leaderrun and guard are killed together. The standby's term
// must still kill the leftover before its child starts: the re-check
// alone found nothing to sweep (the registry was gone) and started the
// child beside it.
func TestLeftoverSweptAfterTheRegistryDirectoryWasRemoved(t *testing.T) {
	leftoverAfterRegistryLoss(t, func(t *testing.T, entry string) {
		if err := os.RemoveAll(filepath.Dir(entry)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLeftoverOfALeaderrunWithoutMarkerKeySwept: a leaderrun of this
// version that has no marker key registered nothing. Here another user
// makes /tmp/leaderrun-UID first, so that leader A of user UID runs
// without one (unsealed markers, no registry), then removes it again
// (their own directory in sticky /tmp) before standby B of the same user
// and key starts: B has a registry, and A, who had no job when B swept
// (between two runs of its child), is not watched. A's next job
// daemonizes; A and its guard are killed together; B's re-check finds
// nothing and started its child beside the daemon. Such a leaderrun now
// registers its jobs wherever the directory has become its user's own.
func TestLeftoverOfALeaderrunWithoutMarkerKeySwept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run leaderrun as another user")
	}
	const uid = 47111
	bin, dir := asUser(t, uid, "")
	keyDir := "/tmp/leaderrun-" + strconv.Itoa(uid)
	_ = os.RemoveAll(keyDir)
	t.Cleanup(func() { _ = os.RemoveAll(keyDir) })
	// Another user's directory, made first.
	if err := os.Mkdir(keyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(keyDir, testsupport.Nobody, testsupport.Nobody); err != nil {
		t.Fatal(err)
	}
	as := func(name, script string) *Proc {
		args := append(localArgs(dir, "k"), "--contain", "group", "--log-level", "debug")
		if name == "A" {
			args = append(args, "--restart", "always", "--restart-delay", "3s")
		}
		cmd := exec.Command(bin, withCommand(args, script)...)
		cmd.Env = append(os.Environ(), "HOME="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return launch(t, name, cmd)
	}
	later := `if [ ! -e ` + dir + `/go ]; then exit 0; fi
` + daemonizingJob(dir, "env -u LEADER_KEY ")
	a := as("A", later)
	waitFor(t, 15*time.Second, "A's first child to exit", func() bool { return strings.Contains(a.Output(), "child exited") })
	if !strings.Contains(a.Output(), "not sealed") {
		t.Fatalf("A has a marker key:\n%s", a.Output())
	}
	// The other user removes their directory: B makes its own.
	if err := os.RemoveAll(keyDir); err != nil {
		t.Fatal(err)
	}
	b := as("B", checkingJob(dir))
	waitFor(t, 15*time.Second, "the standby to campaign", func() bool { return strings.Contains(b.Output(), "waiting for the holder") })
	if strings.Contains(b.Output(), "not sealed") {
		t.Fatalf("B has no marker key:\n%s", b.Output())
	}
	testsupport.WriteFile(t, filepath.Join(dir, "go"), "", 0o644)
	daemon := jobPids(t, dir, 1)[0]
	t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
	killBoth(t, a)
	if !contain.ProcessAlive(daemon) {
		t.Fatalf("the daemon %d died with its supervisors: nothing left to sweep", daemon)
	}
	nextLeaderSwept(t, b, dir, daemon, "daemon")
}

// TestLeftoverSweptAcrossContainmentModes: leader A and standby B of one
// key on one host in different containment modes (a unit changed from
// --contain cgroup to group, or back, while another instance runs). A's
// job daemonizes once B has swept at its start; A and its guard are
// killed together. B's re-check reads no job cgroups in group mode, and
// in cgroup mode not A's: the registry must still make B kill the daemon
// before its child starts.
func TestLeftoverSweptAcrossContainmentModes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, for a cgroup of leaderrun's own")
	}
	for _, modes := range [][2]contain.Mode{{contain.Cgroup, contain.Group}, {contain.Group, contain.Cgroup}} {
		t.Run(string(modes[0])+"-"+string(modes[1]), func(t *testing.T) {
			dir := t.TempDir()
			args := func(m contain.Mode) []string {
				return append(localArgs(dir, "k"), "--contain", string(m), "--log-level", "debug")
			}
			later := `while [ ! -e ` + dir + `/go ]; do sleep 0.05; done
` + daemonizingJob(dir, "env -u LEADER_KEY ")
			a := start(t, "A", nil, withCommand(args(modes[0]), later)...)
			waitFor(t, 15*time.Second, "A's child to start", func() bool { return strings.Contains(a.Output(), "child started") })
			b := start(t, "B", nil, withCommand(args(modes[1]), checkingJob(dir))...)
			waitFor(t, 15*time.Second, "the standby to campaign", func() bool { return strings.Contains(b.Output(), "waiting for the holder") })
			for i, p := range []*Proc{a, b} {
				if !strings.Contains(p.Output(), "mode="+string(modes[i])) {
					t.Fatalf("containment mode %s not in force:\n%s", modes[i], p.Output())
				}
			}
			testsupport.WriteFile(t, filepath.Join(dir, "go"), "", 0o644)
			daemon := jobPids(t, dir, 1)[0]
			t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
			killBoth(t, a)
			if !contain.ProcessAlive(daemon) {
				t.Fatalf("the daemon %d died with its supervisors: nothing left to sweep", daemon)
			}
			nextLeaderSwept(t, b, dir, daemon, "daemon")
		})
	}
}

// TestLeftoverThatSwitchedUserAfterTheStandbysSweepIsSwept: A's job
// daemonizes and switches to nobody (setpriv) once standby B has swept;
// A and its guard are killed together. B's re-check must send it to the
// full sweep, which finds the daemon by its sealed marker.
func TestLeftoverThatSwitchedUserAfterTheStandbysSweepIsSwept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to switch user")
	}
	dir := t.TempDir()
	job := `(setsid sh -c 'echo $$ >> ` + dir + `/job.pids; exec setpriv --reuid=65534 --regid=65534 --clear-groups sleep 1000' >/dev/null 2>&1 </dev/null &)
exec sleep 1000`
	leftoverAfterTheStandbysSweep(t, dir, job, func(t *testing.T, entry string) {
		pid := jobPids(t, dir, 1)[0]
		waitFor(t, 5*time.Second, "the daemon to run as nobody", func() bool {
			st, err := os.Stat("/proc/" + strconv.Itoa(pid))
			return err == nil && st.Sys().(*syscall.Stat_t).Uid == testsupport.Nobody
		})
	})
}

// TestLeftoverSweptAfterACleanerAgedItsRegistryEntry: a user's registry
// lives under /tmp/leaderrun-UID, which systemd-tmpfiles ages (10 days by
// default): the entry of a job that has run that long, never read since
// it was written, is removed, though its directory's stamp, read by a
// later sweep or re-check, is kept. Then the job's leaderrun and guard
// are killed together. Here the age is one second, on root's registry:
// the standby's re-check found nothing and started its child beside the
// leftover. The cleaner leaves alone a file with the sticky bit set.
func TestLeftoverSweptAfterACleanerAgedItsRegistryEntry(t *testing.T) {
	tmpfiles, err := exec.LookPath("systemd-tmpfiles")
	if err != nil {
		t.Skip("no systemd-tmpfiles")
	}
	leftoverAfterRegistryLoss(t, func(t *testing.T, entry string) {
		live := filepath.Dir(entry)
		conf := filepath.Join(t.TempDir(), "age.conf")
		testsupport.WriteFile(t, conf, "e "+live+" - - - 1s\n", 0o644)
		time.Sleep(1500 * time.Millisecond)
		// The stamp was read lately, the entry not.
		now := time.Now()
		if err := os.Chtimes(filepath.Join(live, "stamp"), now, now); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(tmpfiles, "--clean", conf).CombinedOutput(); err != nil {
			t.Fatalf("systemd-tmpfiles --clean: %v\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(live, "stamp")); err != nil {
			t.Fatalf("the cleaner removed the stamp read lately: %v", err)
		}
		if _, err := os.Stat(entry); err == nil {
			t.Logf("the cleaner left the entry: %s", entry)
		}
	})
}

// TestLeftoverSweptAfterTheTallyAndAnEntryWereRemovedAndAnotherSweep:
// an operator removes the registry's tally and then a live job's entry
// (cleaning the whole of live.KEYHASH by hand, file by file), and a
// third leaderrun of the key starts on the host and stops again before
// the job's leaderrun and guard are killed together. Its start-up sweep
// spared the unregistered job (its leaderrun lived) but, finding no
// tally, set one to the entries left: the entry's loss was laundered,
// and the standby, whose own sweep predates it all, re-checked nothing
// missing and started its child beside the leftover. A sweep that
// spared a live job without an entry must leave no tally at all.
func TestLeftoverSweptAfterTheTallyAndAnEntryWereRemovedAndAnotherSweep(t *testing.T) {
	dir := t.TempDir()
	leftoverAfterTheStandbysSweep(t, dir, daemonizingJob(dir, "env -u LEADER_KEY "), func(t *testing.T, entry string) {
		for _, f := range []string{filepath.Join(filepath.Dir(entry), "tally"), entry} {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		args := append(localArgs(dir, "k"), "--contain", "group", "--log-level", "debug")
		c := start(t, "C", nil, withCommand(args, "sleep 1000")...)
		waitFor(t, 15*time.Second, "the third leaderrun to campaign", func() bool { return strings.Contains(c.Output(), "waiting for the holder") })
		c.Signal(syscall.SIGTERM)
		c.Wait(15 * time.Second)
	})
}

// TestLeftoverSweptAfterTheTallyWasGarbledAndAnEntryRemoved: the tally
// overwritten by hand (a count, as the tally of an earlier version held,
// or anything else it cannot read as names of entries), then a live
// job's entry removed, then its leaderrun and guard killed together: a
// tally that cannot be read is none, and the standby sweeps in full.
func TestLeftoverSweptAfterTheTallyWasGarbledAndAnEntryRemoved(t *testing.T) {
	leftoverAfterRegistryLoss(t, func(t *testing.T, entry string) {
		testsupport.WriteFile(t, filepath.Join(filepath.Dir(entry), "tally"), "1\n", 0o600)
		if err := os.Remove(entry); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLeftoverSweptAfterAnEntryWasRemovedWithTwoHolders: --holders 2,
// both holders on this host, each with a job registered; standby B of
// the same key sweeps at its start. A1's entry is removed by hand, then
// A1 and its guard are killed together while A2 runs on. B takes A1's
// place: the tally names A1's entry missing, and B's re-check must not
// take A2's entry for it.
func TestLeftoverSweptAfterAnEntryWasRemovedWithTwoHolders(t *testing.T) {
	dir := t.TempDir()
	args := func(id string) []string {
		return append(localArgs(dir, "k"), "--holders", "2", "--id", id, "--contain", "group", "--log-level", "debug")
	}
	later := `while [ ! -e ` + dir + `/go ]; do sleep 0.05; done
` + daemonizingJob(dir, "env -u LEADER_KEY ")
	a1 := start(t, "A1", nil, withCommand(args("a1"), later)...)
	waitFor(t, 15*time.Second, "A1's child to start", func() bool { return strings.Contains(a1.Output(), "child started") })
	a2 := start(t, "A2", nil, withCommand(args("a2"), "exec sleep 1000")...)
	waitFor(t, 15*time.Second, "A2's child to start", func() bool { return strings.Contains(a2.Output(), "child started") })
	b := start(t, "B", nil, withCommand(args("b"), checkingJob(dir))...)
	waitFor(t, 15*time.Second, "the standby to campaign", func() bool { return strings.Contains(b.Output(), "campaigning") })
	testsupport.WriteFile(t, filepath.Join(dir, "go"), "", 0o644)
	daemon := jobPids(t, dir, 1)[0]
	t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
	if err := os.Remove(registryEntryOf(t, a1.Pid())); err != nil {
		t.Fatal(err)
	}
	registryEntryOf(t, a2.Pid())
	killBoth(t, a1)
	if !contain.ProcessAlive(daemon) {
		t.Fatalf("the daemon %d died with its supervisors: nothing left to sweep", daemon)
	}
	nextLeaderSwept(t, b, dir, daemon, "daemon")
	a2.Signal(syscall.SIGTERM)
	a2.Wait(15 * time.Second)
}
