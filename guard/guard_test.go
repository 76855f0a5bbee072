package guard

import (
	"context"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/leaderrun/leaderrun/signals"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// group starts `sh -c 'sleep 1000 & wait'` as its own process group and
// reaps it in the background.
func group(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", "sleep 1000 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = signals.Group(cmd.Process.Pid, syscall.SIGKILL); <-done })
	return cmd.Process.Pid
}

func waitGone(t *testing.T, pgid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for signals.GroupAlive(pgid) {
		if time.Now().After(deadline) {
			t.Fatalf("group %d still alive after %v", pgid, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type run struct {
	w        *io.PipeWriter
	code     chan int
	released atomic.Value // the handle released, if any
}

func startGuard(t *testing.T) *run {
	t.Helper()
	r, w := io.Pipe()
	g := &run{w: w, code: make(chan int, 1)}
	release := func(_ context.Context, hello []byte, handle string) error {
		g.released.Store(string(hello) + "|" + handle)
		return nil
	}
	go func() { g.code <- Run(r, release, hclog.NewNullLogger()) }()
	return g
}

func (g *run) send(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(g.w, msg); err != nil {
		t.Fatal(err)
	}
}

func (g *run) wait(t *testing.T) {
	t.Helper()
	defer g.w.Close() // as leaderrun closes the pipe after "done"
	select {
	case <-g.code:
	case <-time.After(10 * time.Second):
		t.Fatal("guard did not exit")
	}
}

func TestKillsGroupWhenKillPointPasses(t *testing.T) {
	pgid := group(t)
	g := startGuard(t)
	at := MonoNow() + int64(200*time.Millisecond)
	g.send(t, Hello([]byte(`{}`))+Lease("h1")+Watch(pgid, at))
	waitGone(t, pgid, 5*time.Second)
	if MonoNow() < at {
		t.Fatal("group killed before its kill point")
	}
	g.send(t, Done())
	g.wait(t)
	if v := g.released.Load(); v != nil {
		t.Fatalf("released %v although leaderrun said done", v)
	}
}

func TestExtendPostponesTheKill(t *testing.T) {
	pgid := group(t)
	g := startGuard(t)
	g.send(t, Watch(pgid, MonoNow()+int64(300*time.Millisecond)))
	later := MonoNow() + int64(time.Hour)
	g.send(t, Extend(later))
	// An earlier extension never shortens the kill point.
	g.send(t, Extend(MonoNow()))
	time.Sleep(500 * time.Millisecond) // past the first kill point: nothing may happen
	if !signals.GroupAlive(pgid) {
		t.Fatal("group killed although the kill point was extended")
	}
	g.send(t, Done())
	g.wait(t)
	if !signals.GroupAlive(pgid) {
		t.Fatal("done must not kill the group")
	}
}

func TestLeaderrunDeathKillsAndReleases(t *testing.T) {
	pgid := group(t)
	g := startGuard(t)
	g.send(t, Hello([]byte(`{"backend":"x"}`))+Lease("lease-7")+Watch(pgid, MonoNow()+int64(time.Hour)))
	start := time.Now()
	_ = g.w.Close() // leaderrun died: end of input without "done"
	g.wait(t)
	waitGone(t, pgid, time.Second)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("took %v to kill and release", took)
	}
	if v, _ := g.released.Load().(string); v != `{"backend":"x"}|lease-7` {
		t.Fatalf("released %q, want the hello payload and lease-7", v)
	}
}

func TestForgetsAGroupThatIsGone(t *testing.T) {
	pgid := group(t)
	g := startGuard(t)
	g.send(t, Lease("h")+Watch(pgid, MonoNow()+int64(time.Hour)))
	_ = signals.Group(pgid, syscall.SIGKILL)
	waitGone(t, pgid, 5*time.Second)
	time.Sleep(3 * pollInterval)
	_ = g.w.Close()
	g.wait(t)
	if g.released.Load() == nil {
		t.Fatal("lease not released after leaderrun died")
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	for _, msg := range []string{Watch(42, 123), Extend(456), Lease("a b"), Hello([]byte(`{"k":1}`)), Done()} {
		if !strings.HasSuffix(msg, "\n") || strings.Count(msg, "\n") != 1 {
			t.Errorf("message %q is not one line", msg)
		}
	}
	if got := Watch(42, 123); got != "watch 42 "+strconv.Itoa(123)+"\n" {
		t.Errorf("Watch = %q", got)
	}
}
