//go:build linux

package contain

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveStaleJudgesOnlyItsOwnNamespace: a leaderrun removes the job
// cgroup parents of dead leaderruns of its own PID namespace, and never one
// named by a pid of another namespace, which it cannot check.
func TestRemoveStaleJudgesOnlyItsOwnNamespace(t *testing.T) {
	dir := t.TempDir()
	dead := 1 << 22           // above the default pid_max: no such process
	names := map[string]bool{ // name -> should survive
		ownerDirName(os.Getpid()):      true,  // alive, ours
		ownerDirName(dead):             false, // dead, ours
		"leaderrun.4026531000.1":       true,  // another namespace's pid 1
		"leaderrun.4026531000.4194304": true,  // another namespace, whatever its pid
		"leaderrun.77":                 true,  // not a name we make
	}
	for name := range names {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removeStale(dir)
	for name, keep := range names {
		_, err := os.Stat(filepath.Join(dir, name))
		if exists := err == nil; exists != keep {
			t.Errorf("%s: exists=%v after removeStale, want %v", name, exists, keep)
		}
	}
}

func TestOwnerPID(t *testing.T) {
	own := ownerDirName(42)
	for _, tc := range []struct {
		name     string
		pid      int
		same, ok bool
	}{
		{own, 42, true, true},
		{"leaderrun.1.42", 42, pidNamespace() == "1", true},
		{"leaderrun.42", 0, false, false},
		{"leaderrun.x.y", 0, false, false},
		{"job.1.2", 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, same, ok := OwnerPID(tc.name)
			if pid != tc.pid || same != tc.same || ok != tc.ok {
				t.Fatalf("OwnerPID(%q) = %d, %v, %v; want %d, %v, %v", tc.name, pid, same, ok, tc.pid, tc.same, tc.ok)
			}
		})
	}
}
