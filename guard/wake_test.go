//go:build linux

package guard

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// voluntarySwitches sums voluntary_ctxt_switches over every thread of pid:
// how often it went to sleep, so how often it woke.
func voluntarySwitches(t *testing.T, pid int) int64 {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				k, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += k
			}
		}
	}
	return n
}

// TestGuardWakesOncePerMessage: the leaderrun-guard binary wakes about
// once per message (its reading thread leaving epoll), not three times:
// a read(2) or timerfd_settime(2) made as a syscall the scheduler sees
// woke the runtime's monitor thread, which then slept again. At one
// message per renewal the guard so wakes twice in 10s at the default
// timing, under its target of 5.
func TestGuardWakesOncePerMessage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), Name)
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/leaderrun/leaderrun/cmd/leaderrun-guard").CombinedOutput(); err != nil {
		t.Fatalf("go build leaderrun-guard: %v\n%s", err, out)
	}
	spec := &Spec{Path: bin, Args: []string{Name, "--release-with", "/bin/false"}, Env: os.Environ(), Hello: []byte(`{}`)}
	p, err := Start(spec, "h", nil, testStarter, nullLog{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	far := MonoNow() + int64(time.Hour)
	p.Watch(far, job(t))
	// Past its start and the trim of its pages 2s after it (TrimResident;
	// the next is at 30s), which cost tens of wake-ups.
	time.Sleep(3 * time.Second)
	const messages = 30
	before := voluntarySwitches(t, p.Pid())
	for i := range messages {
		p.Extend(far + int64(i))
		time.Sleep(100 * time.Millisecond) // each message alone, as renewals come
	}
	woke := voluntarySwitches(t, p.Pid()) - before
	t.Logf("%d wake-ups for %d messages", woke, messages)
	if woke > 2*messages {
		t.Fatalf("the guard woke %d times for %d messages, want at most 2 a message", woke, messages)
	}
	select {
	case <-p.Exited():
		t.Fatal("the guard exited")
	default:
	}
}
