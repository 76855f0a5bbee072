//go:build linux

package contain

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

func TestTokenNamesItsLeaderrunAndKey(t *testing.T) {
	b := &Box{opts: Options{Key: "consul\x00leaderrun\x00billing"}}
	j, err := b.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	o, ok := parseToken(j.Token())
	if !ok {
		t.Fatalf("token %q does not parse", j.Token())
	}
	if o.pid != os.Getpid() || o.start != StartTime(os.Getpid()) || o.ns != pidNamespace() || o.key != keyHash(b.opts.Key) {
		t.Errorf("token %q names %+v", j.Token(), o)
	}
	if _, ok := leftoverOf(j.Token(), o.key); ok {
		t.Errorf("a live leaderrun's own job counted as a leftover")
	}
	for _, bad := range []string{"1.2.3", "x.1.2.3.4.k", "1.1.1.1.1", ""} {
		if _, ok := parseToken(bad); ok {
			t.Errorf("token %q parsed", bad)
		}
	}
}

// markedProcess starts script with a job marker naming owner pid and start
// time, for key; it writes the pids of its processes to a file.
func markedProcess(t *testing.T, pid int, start uint64, key, script string) (*exec.Cmd, string) {
	t.Helper()
	pfile := filepath.Join(t.TempDir(), "pids")
	tok := fmt.Sprintf("%d.1.1.%d.%s.%s", pid, start, pidNamespace(), keyHash(key))
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "P="+pfile, EnvMarker+"="+tok)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, pfile
}

// A sweep kills the processes of a dead leaderrun's job of the same key,
// and their descendants even without the marker; it leaves a live
// leaderrun's job of that key, and another key's leftovers, alone.
func TestSweepKillsOnlyDeadLeaderrunsJobsOfTheKey(t *testing.T) {
	const key = "local\x00leaderrun\x00k"
	owner := exec.Command("sleep", "60")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	go owner.Wait()
	defer owner.Process.Kill()
	testsupport.WaitFor(t, 5*time.Second, "the owner to run", func() bool { return StartTime(owner.Process.Pid) != 0 })
	live := StartTime(owner.Process.Pid)
	me, myStart := os.Getpid(), StartTime(os.Getpid())

	// Dead: this pid, but another start time (a reused pid).
	dead, deadPids := markedProcess(t, me, myStart+1, key, `env -i sleep 61 & echo $! > "$P"; exec sleep 60`)
	var kid int
	testsupport.WaitFor(t, 5*time.Second, "the leftover's child", func() bool {
		b, _ := os.ReadFile(deadPids)
		_, err := fmt.Sscan(string(b), &kid)
		return err == nil
	})
	ofLive, _ := markedProcess(t, owner.Process.Pid, live, key, `exec sleep 60`)
	otherKey, _ := markedProcess(t, me, myStart+1, "local\x00leaderrun\x00other", `exec sleep 60`)
	defer func() { _ = exec.Command("kill", "-9", fmt.Sprint(kid)).Run() }()

	b, err := Open(Group, Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	found, err := b.Sweep(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Owner != me || !slices.Equal(found[0].Pids, slices.Sorted(slices.Values([]int{dead.Process.Pid, kid}))) {
		t.Errorf("found %+v, want one job of owner %d with pids %d and %d", found, me, dead.Process.Pid, kid)
	}
	// Each named with its command, read before it was killed.
	if len(found) == 1 {
		if got, want := ProcessList(found[0].Processes()), ProcessList([]Process{{dead.Process.Pid, "sleep"}, {kid, "sleep"}}); got != want {
			t.Errorf("leftover named %q, want %q", got, want)
		}
	}
	for _, pid := range []int{dead.Process.Pid, kid} {
		if ProcessAlive(pid) {
			t.Errorf("leftover process %d still runs", pid)
		}
	}
	for _, p := range []*exec.Cmd{ofLive, otherKey} {
		if !ProcessAlive(p.Process.Pid) {
			t.Errorf("process %d was killed: not a leftover of this key", p.Process.Pid)
		}
	}
}

// jobDirs looks beside a scope for the other leaderrun scopes of the slice,
// and finds there a populated job cgroup of the key whose leaderrun is dead;
// a live leaderrun's, another key's and one outside the scopes are left.
// The tree is a plain directory standing in for cgroupfs.
func TestLeftoverCgroupsBesideAScope(t *testing.T) {
	const key = "etcd\x00leaderrun\x00k"
	slice := t.TempDir()
	me, myStart := os.Getpid(), StartTime(os.Getpid())
	tok := func(pid int, start uint64, k string) string {
		return fmt.Sprintf("job.%d.1.1.%d.%s.%s", pid, start, pidNamespace(), keyHash(k))
	}
	mk := func(dir string, populated bool) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		ev := "populated 0\nfrozen 0\n"
		if populated {
			ev = "populated 1\nfrozen 0\n"
		}
		if err := os.WriteFile(dir+"/cgroup.events", []byte(ev), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ours := slice + "/leaderrun-k-1.scope"
	mk(ours, true)
	want := slice + "/leaderrun-k-2.scope/" + tok(me, myStart+1, key)
	mk(want, true)
	mk(slice+"/leaderrun-k-3.scope/"+tok(me, myStart, key), true)                            // live owner
	mk(slice+"/leaderrun-k-4.scope/"+tok(me, myStart+1, "etcd\x00leaderrun\x00other"), true) // other key
	mk(slice+"/cron.service/"+tok(me, myStart+1, key), true)                                 // not a scope
	b := &Box{mode: Cgroup, parent: ours, opts: Options{Key: key}}
	got := b.leftoverCgroups(keyHash(key))
	if len(got) != 1 || got[0].dir != want || !got[0].populated || got[0].owner.pid != me {
		t.Errorf("found %+v, want only %s", got, want)
	}
}

// BenchmarkSweep is the cost of a sweep that finds nothing, the usual case:
// one read of every process's stat and environ.
func BenchmarkSweep(b *testing.B) {
	box := &Box{mode: Group, opts: Options{Key: "bench"}}
	for b.Loop() {
		if _, err := box.Sweep(time.Second); err != nil {
			b.Fatal(err)
		}
	}
}
