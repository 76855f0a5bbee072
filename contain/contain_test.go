//go:build linux

package contain

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

func TestMain(m *testing.M) {
	// As leaderrun does: orphans of a job come back to us, not to init.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		panic(err)
	}
	// Build the C programs now: once the reaper runs, it would reap the
	// compiler under os/exec's feet. Errors come back to the tests.
	_, _ = testsupport.ZombieMain()
	_, _ = testsupport.DoubleFork()
	_, _ = testsupport.ForkRelay()
	go reaper.run()
	os.Exit(m.Run())
}

// buildZombieMain builds the zombie-main-thread program of testsupport.
func buildZombieMain(t *testing.T) string {
	t.Helper()
	bin, err := testsupport.ZombieMain()
	if errors.Is(err, testsupport.ErrNoCC) && os.Getenv("CI") != "true" {
		t.Skip("no C compiler (cc) to build the zombie-main-thread program")
	}
	if err != nil {
		t.Fatalf("build the zombie-main-thread program: %v", err)
	}
	return bin
}

// jobs are the shapes of job that leave or outlive their process group.
func jobs(t *testing.T) []struct{ name, script string } {
	zmain := buildZombieMain(t)
	return []struct{ name, script string }{
		{"setsid daemon", `setsid sh -c 'echo $$ >> "$P"; exec sleep 77' & sleep 0.2`},
		{"double fork", `(sh -c 'echo $$ >> "$P"; exec sleep 77' &) ; sleep 0.2`},
		{"double fork, setsid, empty environment", `(setsid env -i sh -c 'echo $$ >> '"$P"'; exec sleep 77' &) ; sleep 0.2`},
		{"zombie main thread, ignores SIGTERM", `trap "" TERM; exec ` + zmain + ` "$P"`},
		{"ignores SIGTERM", `trap '' TERM; echo $$ >> "$P"; while :; do sleep 1; done`},
	}
}

// startJob runs script as a job's first process and waits until it wrote
// n pids to its pids file.
func startJob(t *testing.T, j *Job, script string) (pids []int) {
	t.Helper()
	pfile := filepath.Join(t.TempDir(), "pids")
	startIn(t, j, []string{"/bin/sh", "-c", script}, "P="+pfile)
	testsupport.WaitFor(t, 5*time.Second, "the job to write its pids", func() bool {
		b, _ := os.ReadFile(pfile)
		pids = nil
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
		return len(pids) > 0
	})
	// Let the first process exit where the script says so: what is left is
	// what escaped the group.
	time.Sleep(300 * time.Millisecond)
	return pids
}

// startIn starts argv as the first process of j, in a process group of its
// own, with env added to the test's environment and the job's marker, and
// returns its pid and a channel closed once it is reaped.
func startIn(t *testing.T, j *Job, argv []string, env ...string) (int, <-chan struct{}) {
	t.Helper()
	sys := &syscall.SysProcAttr{Setpgid: true}
	j.SysProcAttr(sys)
	pid, done, err := reaper.start(argv, append(append(os.Environ(), env...), j.Env()), sys)
	if err != nil {
		t.Fatal(err)
	}
	j.Started(pid)
	return pid, done
}

func openMode(t *testing.T, m Mode) *Box {
	t.Helper()
	b, err := Open(m, leaderrunOptions())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("open %s: %v", m, err)
		}
		t.Skipf("open %s: %v", m, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	if b.Mode() != m {
		t.Fatalf("mode %s, want %s (%s)", b.Mode(), m, b.Reason())
	}
	return b
}

// Each job shape is stopped the way the supervisor stops a job (stop
// signal, then SIGKILL), and afterwards nothing of it runs, as /proc tells.
func TestStopWholeJob(t *testing.T) {
	for _, mode := range []Mode{Cgroup, Group} {
		for _, tc := range jobs(t) {
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				b := openMode(t, mode)
				j, err := b.NewJob()
				if err != nil {
					t.Fatal(err)
				}
				pids := startJob(t, j, tc.script)
				for _, pid := range pids {
					if !ProcessAlive(pid) {
						t.Fatalf("pid %d of the job is not running before the stop", pid)
					}
				}
				if !j.Alive() {
					t.Fatalf("job reported gone while pids %v run", pids)
				}
				if err := j.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
				if err := j.Kill(); err != nil {
					t.Fatal(err)
				}
				if !j.WaitGone(5 * time.Second) {
					t.Fatalf("job not gone 5s after SIGKILL; pids %v", pids)
				}
				for _, pid := range pids {
					if ProcessAlive(pid) {
						t.Errorf("pid %d still runs after the job was reported gone", pid)
					}
				}
				if err := j.Remove(); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// A job seen by another process (the guard) through Attach is killed and
// seen gone the same way.
func TestAttachedKill(t *testing.T) {
	for _, mode := range []Mode{Cgroup, Group} {
		t.Run(string(mode), func(t *testing.T) {
			b := openMode(t, mode)
			j, err := b.NewJob()
			if err != nil {
				t.Fatal(err)
			}
			pids := startJob(t, j, `setsid sh -c 'echo $$ >> "$P"; exec sleep 77' & sleep 0.2`)
			other := Attach(j.Cgroup(), j.Pgid(), j.Token(), j.Since())
			if !other.Alive() {
				t.Fatal("attached job reported gone while it runs")
			}
			if err := other.Kill(); err != nil {
				t.Fatal(err)
			}
			if !other.WaitGone(5 * time.Second) {
				t.Fatal("attached job not gone after kill")
			}
			for _, pid := range pids {
				if ProcessAlive(pid) {
					t.Errorf("pid %d still runs", pid)
				}
			}
			_ = j.Remove()
		})
	}
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
		ok   bool
	}{{"auto", Auto, true}, {"CGROUP", Cgroup, true}, {" group", Group, true}, {"pgroup", "", false}, {"", "", false}} {
		t.Run(tc.in, func(t *testing.T) {
			m, err := ParseMode(tc.in)
			if (err == nil) != tc.ok || m != tc.want {
				t.Fatalf("ParseMode(%q) = %q, %v", tc.in, m, err)
			}
		})
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/sys/fs/cgroup\040x`); got != "/sys/fs/cgroup x" {
		t.Fatal(got)
	}
}
