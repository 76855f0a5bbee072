package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillAfterGraceIsSaidUnderQuiet: a job that ignores the stop signal
// is SIGKILLed once --kill-grace is over, and leaderrun says so at WARN,
// which -q still shows: a job that never gets to clean up is something
// wrong.
func TestKillAfterGraceIsSaidUnderQuiet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, "leader", nil, withCommand(localArgs(dir, "k", "-q"), "trap '' TERM; "+grandchildScript(dir))...)
	child, gc := readPID(t, dir+"/child.pid"), readPID(t, dir+"/gc.pid")
	p.Signal(syscall.SIGTERM)
	code := p.Wait(15 * time.Second)
	if alive(child) || alive(gc) {
		t.Fatalf("exit %d; child alive=%v grandchild alive=%v", code, alive(child), alive(gc))
	}
	out := p.Output()
	if !strings.Contains(out, "[WARN]") || !strings.Contains(out, "the job did not stop within --kill-grace; killing it") {
		t.Fatalf("exit %d; -q said nothing of the SIGKILL after the kill grace:\n%s", code, out)
	}
}
