//go:build linux

package contain

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// leaderrunOptions are the options leaderrun opens its Box with
// (contain_cli.go), with the test reaper in place of supervise's.
func leaderrunOptions() Options {
	return Options{AdoptOrphans: true, Known: reaper.Started, Reaped: reaper.Reaped, HoldReaps: reaper.Hold}
}

// view is one way of looking at a running job: leaderrun's own, the guard's
// while leaderrun lives, the guard's once leaderrun died.
type view struct {
	name string
	of   func(j *Job) *Job
}

var views = []view{
	{"leaderrun", func(j *Job) *Job { return j }},
	{"guard", func(j *Job) *Job {
		g := Attach(j.Cgroup(), j.Pgid(), j.Token(), j.Since())
		g.AdoptFrom(os.Getpid()) // the test process plays the supervisor
		return g
	}},
	{"guard after leaderrun died", func(j *Job) *Job {
		return Attach(j.Cgroup(), j.Pgid(), j.Token(), j.Since())
	}},
}

func cProgram(t *testing.T, build func() (string, error)) string {
	t.Helper()
	bin, err := build()
	if errors.Is(err, testsupport.ErrNoCC) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func readPids(file string) []int {
	b, _ := os.ReadFile(file)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// markedAlive lists, straight from /proc, the live processes whose
// environment holds the job's marker.
func markedAlive(token string) []int {
	want := []byte(EnvMarker + "=" + token)
	var out []int
	for _, pid := range testsupport.Pids() {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		if ProcessAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// A daemon that double-forks (fork, setsid, fork, exit) right after the
// job's first process exited is never judged gone while it lives: the
// middle process may be listed by a scan, fork after the listing and exit
// before it is read. Each view asks Alive over and over from the first
// process's exit until the daemon has written its pid, as a supervisor
// polling for the job's end does, with 1ms and 200µs between the forks.
func TestDoubleForkNeverJudgedGone(t *testing.T) {
	prog := cProgram(t, testsupport.DoubleFork)
	const runs = 25
	for _, v := range views {
		for _, us := range []int{1000, 200} {
			t.Run(fmt.Sprintf("%s/%dus", v.name, us), func(t *testing.T) {
				b := openMode(t, Group)
				fooled := 0
				for run := range runs {
					j, err := b.NewJob()
					if err != nil {
						t.Fatal(err)
					}
					pfile := filepath.Join(t.TempDir(), "daemon.pid")
					_, done := startIn(t, j, []string{prog, strconv.Itoa(us), pfile})
					w := v.of(j)
					<-done // the first process exited and was reaped
					judgedGone := false
					end := time.Now().Add(5 * time.Second)
					for len(readPids(pfile)) == 0 && time.Now().Before(end) {
						if !w.Alive() {
							judgedGone = true
						}
					}
					pids := readPids(pfile)
					if len(pids) != 1 {
						t.Fatalf("run %d: the daemon wrote no pid", run)
					}
					daemon := pids[0]
					if judgedGone && ProcessAlive(daemon) {
						fooled++
						t.Errorf("run %d: the job was judged gone while its daemon %d runs", run, daemon)
					}
					if !w.Alive() {
						t.Errorf("run %d: the job is reported gone while its daemon %d runs", run, daemon)
					}
					if err := w.Kill(); err != nil {
						t.Error(err)
					}
					testsupport.WaitFor(t, 5*time.Second, "the daemon to die", func() bool {
						if ProcessAlive(daemon) {
							_ = syscall.Kill(daemon, syscall.SIGKILL) // even if Kill missed it
							return false
						}
						return true
					})
					_ = j.Remove()
				}
				if fooled > 0 {
					t.Errorf("judged gone in %d of %d runs while the daemon ran", fooled, runs)
				}
			})
		}
	}
}

// A job of processes that fork without pause, each moving to a new session
// and exiting as soon as its child runs, is killed whole by one Kill:
// afterwards no process with its marker runs, as /proc tells, and the
// storm's heartbeat has stopped.
func TestForkStormKilledByKill(t *testing.T) {
	prog := cProgram(t, testsupport.ForkRelay)
	for _, v := range views {
		t.Run(v.name, func(t *testing.T) {
			b := openMode(t, Group)
			j, err := b.NewJob()
			if err != nil {
				t.Fatal(err)
			}
			beat := filepath.Join(t.TempDir(), "beat")
			startIn(t, j, []string{prog, "4", "100", "20", beat})
			t.Cleanup(func() {
				// Do not leave a storm running for its 20 seconds, whatever
				// failed: it would be every later job's orphan.
				for end := time.Now().Add(10 * time.Second); testsupport.Growing(beat, 50*time.Millisecond) && time.Now().Before(end); {
					_ = j.Kill()
				}
			})
			w := v.of(j)
			// The storm starts beating a moment after its start, later on
			// a loaded machine.
			running := false
			for end := time.Now().Add(10 * time.Second); !running && time.Now().Before(end); {
				running = testsupport.Growing(beat, 100*time.Millisecond)
			}
			if !running {
				t.Fatal("the storm is not running")
			}
			t0 := time.Now()
			if err := w.Kill(); err != nil {
				t.Error(err)
			}
			// As its users do (the supervisor, the guard: DESIGN §1.4), Kill
			// again while the job is alive: one Kill sweeps for a bounded
			// time, which a loaded machine's storm can outlast. A job that
			// Alive calls gone while a process of it runs fails below.
			kills := 1
			for end := time.Now().Add(5 * time.Second); w.Alive() && time.Now().Before(end); kills++ {
				_ = w.Kill()
			}
			took := time.Since(t0)
			t.Logf("%d Kill calls took %v", kills, took)
			for range 10 {
				if left := markedAlive(j.Token()); len(left) > 0 {
					t.Fatalf("processes of the job run after Kill (%v): %v", took, left)
				}
			}
			if testsupport.Growing(beat, 300*time.Millisecond) {
				t.Fatalf("the storm goes on after Kill (%v)", took)
			}
			if w.Alive() {
				t.Error("the job is reported alive after Kill")
			}
		})
	}
}

// startStranger starts a process that is not part of any job: sleep, in a
// process group of its own.
func startStranger(t *testing.T) (pid int, start uint64) {
	t.Helper()
	pid, done, err := reaper.start([]string{"/bin/sleep", "60"}, os.Environ(), &syscall.SysProcAttr{Setpgid: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-done
	})
	testsupport.WaitFor(t, 5*time.Second, "the stranger to run", func() bool { return StartTime(pid) != 0 })
	return pid, StartTime(pid)
}

// A process that merely holds the number of the job's process group (and
// pid) is never signalled, nor counted as the job: an older one, a younger
// one to which the numbers passed after the job's group emptied (the
// guard's view once leaderrun died), and the same during a restart wait in
// leaderrun's own view.
func TestGroupNumberOfAStrangerNotSignalled(t *testing.T) {
	cases := []struct {
		name string
		// setup returns the job and the stranger holding its numbers.
		setup func(t *testing.T) (j *Job, stranger int, start uint64)
	}{
		{"stranger older than the job", func(t *testing.T) (*Job, int, uint64) {
			pid, start := startStranger(t)
			// The job's first process started a clock tick after it.
			return Attach("", pid, "", start+1), pid, start
		}},
		{"numbers reused after the job's group emptied, guard's view", func(t *testing.T) (*Job, int, uint64) {
			pid, start := startStranger(t)
			// The job's first process had this pid and started earlier.
			return Attach("", pid, "no-such-token", start-1), pid, start
		}},
		{"numbers reused during a restart wait, leaderrun's view", func(t *testing.T) (*Job, int, uint64) {
			b := openMode(t, Group)
			j, err := b.NewJob()
			if err != nil {
				t.Fatal(err)
			}
			_, done := startIn(t, j, []string{"/bin/true"})
			<-done
			time.Sleep(30 * time.Millisecond) // a clock tick or more later
			pid, start := startStranger(t)
			// As if the kernel had handed the first process's pid, and so
			// its process group's number, to the stranger.
			j.pid, j.pgid = pid, pid
			return j, pid, start
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j, pid, start := tc.setup(t)
			if j.Alive() {
				t.Error("the stranger is counted as the job")
			}
			if err := j.Signal(syscall.SIGTERM); err != nil {
				t.Error(err)
			}
			if err := j.Kill(); err != nil {
				t.Error(err)
			}
			time.Sleep(50 * time.Millisecond)
			if !ProcessAlive(pid) || StartTime(pid) != start {
				t.Fatalf("the stranger %d, holding the job's process group number, was killed", pid)
			}
		})
	}
}

// signalMember checks the start time again once the pidfd is open: a pid
// that names another process than the scan saw is left alone.
func TestSignalMemberChecksStartTime(t *testing.T) {
	pid, start := startStranger(t)
	if err := signalMember(procInfo{pid: pid, start: start + 1}, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if !ProcessAlive(pid) {
		t.Fatal("a process was signalled by a pid whose start time did not match")
	}
	if err := signalMember(procInfo{pid: pid, start: start}, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 5*time.Second, "the matching process to die", func() bool { return !ProcessAlive(pid) })
}
