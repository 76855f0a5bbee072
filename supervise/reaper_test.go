package supervise

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/signals"
)

// The reaper hears of stops (WUNTRACED), for Ctrl-Z at a terminal: a stop is
// neither the child's exit nor a reap, and its exit is still reported after.
func TestStoppedChildIsNotAnExit(t *testing.T) {
	box, err := contain.Open(contain.Group, contain.Options{Reaped: Reaped, HoldReaps: HoldReaps})
	if err != nil {
		t.Fatal(err)
	}
	job, err := box.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = job.Kill(); _ = job.Remove() })
	c, err := StartChild(Command{Path: "/bin/sh", Args: []string{"sh", "-c", "kill -STOP $$; exit 7"}, Env: os.Environ()}, job)
	if err != nil {
		t.Fatal(err)
	}
	job.Started(c.Pid())
	waitUntil(t, "the child to stop itself", func() bool {
		st, ok := signals.ReadStat(c.Pid())
		return ok && st.State == 'T'
	})
	reaped := Reaped()
	// Its SIGCHLD is handled by now or within a moment.
	time.Sleep(100 * time.Millisecond)
	select {
	case <-c.Done():
		t.Fatalf("the stopped child was reported gone: %s", c.Describe())
	default:
	}
	if Reaped() != reaped {
		t.Fatal("a stop was counted as a reap")
	}
	if err := c.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the child's exit was never reported")
	}
	if code := c.ExitCode(); code != 7 {
		t.Fatalf("exit %d, want 7", code)
	}
}
