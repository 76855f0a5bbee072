//go:build linux

package reap

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// One reaper for the test process, as in leaderrun; a subreaper, so the
// orphans of its children come back to it.
var r = New()

func TestMain(m *testing.M) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// start runs sh -c script through r; the status arrives on the channel.
func start(t *testing.T, script string) (int, <-chan syscall.WaitStatus) {
	t.Helper()
	c := make(chan syscall.WaitStatus, 1)
	argv := []string{"/bin/sh", "-c", script}
	pid, err := r.StartProcess(func() (int, error) {
		return syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	}, func(ws syscall.WaitStatus) { c <- ws })
	if err != nil {
		t.Fatal(err)
	}
	return pid, c
}

func status(t *testing.T, c <-chan syscall.WaitStatus) syscall.WaitStatus {
	t.Helper()
	select {
	case ws := <-c:
		return ws
	case <-time.After(10 * time.Second):
		t.Fatal("no exit status within 10s")
		return 0
	}
}

// state is the one-letter state of pid in /proc ("" once it is gone).
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[0]
}

func TestExitStatusReachesItsWaiter(t *testing.T) {
	before := r.Reaped()
	pid, c := start(t, "exec sleep 60")
	if !r.Started(pid) {
		t.Fatalf("pid %d not reported started while it runs", pid)
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if ws := status(t, c); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("status %v, want killed by SIGTERM", ws)
	}
	_, c = start(t, "exit 3")
	if ws := status(t, c); ws.ExitStatus() != 3 {
		t.Fatalf("exit status %d, want 3", ws.ExitStatus())
	}
	if r.Started(pid) {
		t.Fatalf("pid %d still reported started once reaped", pid)
	}
	if n := r.Reaped() - before; n != 2 {
		t.Fatalf("reaped %d children, want 2", n)
	}
}

// An orphan re-parented to the test process is reaped too, and counted.
func TestOrphansAreReaped(t *testing.T) {
	pidFile := t.TempDir() + "/orphan"
	before := r.Reaped()
	_, c := start(t, "sleep 0.3 & echo $! > "+pidFile)
	status(t, c)
	var orphan int
	testsupport.WaitFor(t, 5*time.Second, "the orphan's pid", func() bool {
		b, _ := os.ReadFile(pidFile)
		orphan, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return orphan > 0
	})
	testsupport.WaitFor(t, 5*time.Second, "the orphan to be reaped", func() bool { return state(orphan) == "" })
	if n := r.Reaped() - before; n != 2 {
		t.Fatalf("reaped %d processes, want the child and its orphan", n)
	}
}

// While Hold runs, a child that exited stays a zombie: its pid is not
// reused under the holder's feet. It is reaped once Hold returns.
func TestHoldKeepsExitedChildrenUnreaped(t *testing.T) {
	pid, c := start(t, "exec sleep 60")
	r.Hold(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		testsupport.WaitFor(t, 5*time.Second, "the child to exit", func() bool { return state(pid) == "Z" })
		time.Sleep(50 * time.Millisecond)
		if state(pid) != "Z" || len(c) != 0 {
			t.Errorf("child reaped during Hold (state %q)", state(pid))
		}
	})
	if ws := status(t, c); ws.Signal() != syscall.SIGKILL {
		t.Fatalf("status %v, want killed by SIGKILL", ws)
	}
}
