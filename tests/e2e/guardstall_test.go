package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A guard that stops reading (SIGSTOP, or stuck) while leaderrun renews
// fills its pipe: leaderrun's writes never block, so the kill points (and a
// new run's watch) it sends after that would be lost, and the guard, once
// it ran again, would act on the last one it read: fire at a kill point long
// past and kill a healthy leader's job, or, had leaderrun died, kill an old
// run and release while the current one lived. A guard that takes no more
// messages is replaced, like one that died, and the job runs on.
func TestStalledGuardIsReplacedBeforeItsPipeLosesMessages(t *testing.T) {
	dir := t.TempDir()
	// A renewal every 2ms fills the guard's 64KiB pipe in a few seconds.
	args := []string{"--backend", "local", "--lock-dir", dir, "--key", "k",
		"--ttl", "2s", "--renew-interval", "2ms", "--kill-grace", "100ms", "--safety-margin", "500ms"}
	p := start(t, "leader", nil, withCommand(args, "echo $$ > "+dir+"/child.pid; exec sleep 1000")...)
	child := readPID(t, dir+"/child.pid")
	g := guardOf(t, p)
	if err := syscall.Kill(g, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(g, syscall.SIGCONT) })
	waitFor(t, 30*time.Second, "the pipe of the stopped guard to fill", func() bool {
		if strings.Contains(p.Output(), "cannot reach the guard") {
			return true
		}
		next := guardsOf(p.Pid())
		return len(next) == 1 && next[0] != g
	})
	// The stopped guard runs again; its last kill point read is past.
	_ = syscall.Kill(g, syscall.SIGCONT)
	time.Sleep(3 * time.Second)
	if !alive(child) {
		t.Fatal("the job of a leader that renews all along was killed by the guard it could not reach")
	}
	if p.Exited() {
		t.Fatalf("leaderrun exited %d while it renewed all along", p.Wait(0))
	}
	if next := guardsOf(p.Pid()); len(next) != 1 || next[0] == g {
		t.Fatalf("guards of leaderrun: %v, want one other than the stopped %d", next, g)
	}
	p.Signal(syscall.SIGTERM)
	p.Wait(10 * time.Second)
	if alive(child) {
		t.Fatal("the job outlived leaderrun")
	}
	_ = os.Remove(dir + "/child.pid")
}
