//go:build linux

package contain

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// startN runs script as j's first process and waits until it wrote n pids
// to its pids file ($P).
func startN(t *testing.T, j *Job, n int, script string) []int {
	t.Helper()
	pfile := filepath.Join(t.TempDir(), "pids")
	startIn(t, j, []string{"/bin/sh", "-c", script}, "P="+pfile)
	testsupport.WaitFor(t, 10*time.Second, "the pids", func() bool { return len(readPids(pfile)) >= n })
	time.Sleep(200 * time.Millisecond) // let the first shell exit where it does
	return readPids(pfile)
}

// A health check and a job run side by side in one Box, each leaving an
// orphan re-parented to the test process (which plays leaderrun, a child
// subreaper): neither counts the other's processes, the check's kill takes
// all of the check and nothing of the job, and the job's all of the job.
func TestCheckAndJobApart(t *testing.T) {
	for _, mode := range []Mode{Cgroup, Group} {
		t.Run(string(mode), func(t *testing.T) {
			b := openMode(t, mode)
			job, err := b.NewJob()
			if err != nil {
				t.Fatal(err)
			}
			jobPids := startN(t, job, 2, `(setsid sh -c 'echo $$ >> "$P"; exec sleep 77' &); echo $$ >> "$P"; exec sleep 77`)
			check, err := b.NewCheck()
			if err != nil {
				t.Fatal(err)
			}
			if !check.IsCheck() || job.IsCheck() || !IsCheckToken(check.Token()) || IsCheckToken(job.Token()) {
				t.Fatalf("check and job tokens mixed up: %s, %s", check.Token(), job.Token())
			}
			// The check's shell exits at once: its daemon is an orphan of
			// the test process, known only by its marker.
			checkPids := startN(t, check, 1, `(setsid sh -c 'echo $$ >> "$P"; exec sleep 78' &); sleep 0.1; exit 0`)
			if len(jobPids) != 2 || len(checkPids) != 1 {
				t.Fatalf("pids: job %v, check %v", jobPids, checkPids)
			}
			guard := Attach(job.Cgroup(), job.Pgid(), job.Token(), job.Since())
			guard.AdoptFrom(os.Getpid())
			for name, j := range map[string]*Job{"job": job, "guard's view of the job": guard} {
				for _, p := range j.Processes() {
					if slices.Contains(checkPids, p.Pid) {
						t.Errorf("%s counts the check's %v", name, p)
					}
				}
			}
			for _, p := range check.Processes() {
				if slices.Contains(jobPids, p.Pid) {
					t.Errorf("the check counts the job's %v", p)
				}
			}
			if !check.Alive() {
				t.Fatal("the check reported gone while its daemon runs")
			}
			if err := check.Kill(); err != nil {
				t.Fatal(err)
			}
			if !check.WaitGone(5 * time.Second) {
				t.Fatal("the check not gone 5s after its kill")
			}
			for _, pid := range checkPids {
				if ProcessAlive(pid) {
					t.Errorf("the check's %d outlived its kill", pid)
				}
			}
			for _, pid := range jobPids {
				if !ProcessAlive(pid) {
					t.Errorf("the check's kill took the job's %d", pid)
				}
			}
			if err := check.Remove(); err != nil {
				t.Error(err)
			}
			if !job.Alive() {
				t.Fatal("the job reported gone while it runs")
			}
			if err := job.Kill(); err != nil {
				t.Fatal(err)
			}
			if !job.WaitGone(5 * time.Second) {
				t.Fatal("the job not gone 5s after its kill")
			}
			for _, pid := range jobPids {
				if ProcessAlive(pid) {
					t.Errorf("the job's %d outlived its kill", pid)
				}
			}
			if err := job.Remove(); err != nil {
				t.Error(err)
			}
		})
	}
}
