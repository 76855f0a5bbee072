//go:build linux

package contain

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPidCursorSeesWraps: forks alone do not wrap the cursor; a cursor
// lower than the last sample, or a gap long enough to go round all pids,
// does.
func TestPidCursorSeesWraps(t *testing.T) {
	c := openPidCursor()
	if c == nil {
		t.Fatal("/proc/sys/kernel/ns_last_pid cannot be read")
	}
	defer c.close()
	// A fork between two marks; its exit status does not matter, and a
	// reaper of another test in this package may collect it first.
	fork := exec.Command("true")
	if err := fork.Start(); err != nil {
		t.Fatal(err)
	}
	_ = fork.Wait()
	if c.mark() {
		// Possible only if this fork was the one that went round.
		if c.mark() {
			t.Fatalf("two marks a moment apart, with no fork between, saw a wrap (cursor %d, pid_max %d)", c.last, c.max)
		}
	}
	c.last = c.max // as if the kernel had handed out pid_max last
	if !c.mark() {
		t.Errorf("the cursor went down and mark saw no wrap")
	}
	c.at = time.Now().Add(-time.Hour)
	if !c.mark() {
		t.Errorf("an hour between samples and mark saw no wrap")
	}
	if (*pidCursor)(nil).mark() != true {
		t.Errorf("a cursor that cannot be read must never say wrap-free")
	}
}

// TestSweepRunsAtRaisedPriority: as root, a sweep's thread runs at
// sweepNice and is put back after (raisePriority), so that a host whose
// cores are all busy does not pause its scans long enough to count as a
// wrap.
func TestSweepRunsAtRaisedPriority(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to raise a priority")
	}
	nice := func() int {
		b, err := os.ReadFile("/proc/thread-self/stat")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		n, err := strconv.Atoi(f[16]) // field 19, counted from state (3)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := nice()
	restore := raisePriority()
	if got := nice(); got != sweepNice {
		t.Errorf("nice during the sweep: %d, want %d", got, sweepNice)
	}
	restore()
	if got := nice(); got != before {
		t.Errorf("nice after the sweep: %d, want %d as before", got, before)
	}
}
