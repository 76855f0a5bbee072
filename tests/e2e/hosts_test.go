package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// host is one leaderrun "host" in a failover test: a leaderrun process and
// the files its child writes into dir.
type host struct {
	name string
	dir  string
	p    *Proc
}

// hostScript is the child every host runs. At its start it records its pid,
// epoch and start time, and whether the other host's child was still alive
// at that moment (the overlap a safe failover never has). A stop signal is
// answered after a short clean-up, recording the exit time.
func hostScript(dir, name, other string) string {
	f := func(suffix string) string { return filepath.Join(dir, name+"."+suffix) }
	o := filepath.Join(dir, other+".pid")
	return strings.Join([]string{
		"date +%s%N > " + f("start"),
		"if [ -f " + o + " ]; then p=$(cat " + o + "); " +
			"if [ -e /proc/$p/stat ] && ! grep -q ') [ZX]' /proc/$p/stat; then echo $p > " + f("overlap") + "; fi; fi",
		"echo $LEADER_EPOCH > " + f("epoch"),
		"trap 'sleep 0.2; date +%s%N > " + f("end") + "; exit 0' TERM",
		"echo $$ > " + f("pid"),
		"sleep 1000 & wait",
	}, "\n")
}

// startHost starts leaderrun for host name with the backend args.
func startHost(t *testing.T, dir, name, other string, args []string, env ...string) *host {
	t.Helper()
	args = append(append([]string{"--id", name}, args...), "--", "sh", "-c", hostScript(dir, name, other))
	return &host{name: name, dir: dir, p: start(t, name, env, args...)}
}

func (h *host) file(suffix string) string { return filepath.Join(h.dir, h.name+"."+suffix) }

// started reports whether the host's child has started.
func (h *host) started() bool {
	_, err := os.Stat(h.file("pid"))
	return err == nil
}

// waitStarted waits for the child and returns its pid.
func (h *host) waitStarted(t *testing.T, within time.Duration) int {
	t.Helper()
	waitFor(t, within, h.name+"'s child to start", h.started)
	return readPID(t, h.file("pid"))
}

func (h *host) epoch(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile(h.file("epoch"))
	if err != nil {
		t.Fatalf("%s: no epoch: %v", h.name, err)
	}
	e, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: bad epoch %q", h.name, b)
	}
	return e
}

// stamp reads a nanosecond timestamp the child wrote.
func (h *host) stamp(t *testing.T, suffix string) time.Time {
	t.Helper()
	var ns int64
	waitFor(t, 5*time.Second, h.name+"."+suffix, func() bool {
		b, err := os.ReadFile(h.file(suffix))
		if err != nil {
			return false
		}
		ns, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return err == nil
	})
	return time.Unix(0, ns)
}

// noOverlap fails if h's child saw the other host's child alive at its start.
func (h *host) noOverlap(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(h.file("overlap")); err == nil {
		t.Fatalf("%s's child started while the old leader's child (pid %s) was alive", h.name, strings.TrimSpace(string(b)))
	}
}

// pair starts host a, waits for it to lead, then starts standby b.
func pair(t *testing.T, args []string, env ...string) (a, b *host) {
	t.Helper()
	dir := t.TempDir()
	a = startHost(t, dir, "a", "b", args, env...)
	a.waitStarted(t, 30*time.Second)
	b = startHost(t, dir, "b", "a", args, env...)
	waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
	return a, b
}

// failoverAfterKill9: kill -9 of the leader's leaderrun; the guard kills the
// child and releases, and the standby's child starts within the bound, with
// a higher epoch, never while the old child lived.
func failoverAfterKill9(t *testing.T, args []string, bound time.Duration) {
	failoverAfterKill9Guarded(t, args, bound, false)
}

// failoverAfterKill9Guarded is failoverAfterKill9; with small it also
// asserts that the leader's guard is the leaderrun-guard binary, which
// then released the lease itself. It returns the two hosts, b leading.
func failoverAfterKill9Guarded(t *testing.T, args []string, bound time.Duration, small bool) (a, b *host) {
	a, b = pair(t, args)
	if small {
		wantSmallGuard(t, a.p)
	}
	if b.started() {
		t.Fatal("standby's child runs while the leader leads")
	}
	aPid := readPID(t, a.file("pid"))
	a.p.Signal(syscall.SIGKILL)
	killed := time.Now()
	b.waitStarted(t, bound+5*time.Second)
	took := b.stamp(t, "start").Sub(killed)
	t.Logf("kill -9 of the leader -> standby's child started: %v", took.Round(time.Millisecond))
	if took > bound {
		t.Errorf("standby's child started %v after kill -9, want within %v", took, bound)
	}
	if alive(aPid) {
		t.Error("old child still alive")
	}
	b.noOverlap(t)
	if ea, eb := a.epoch(t), b.epoch(t); eb <= ea {
		t.Errorf("epoch after failover %d, want > %d", eb, ea)
	}
	return a, b
}

// gracefulHandoff: SIGTERM to the leader; the standby's child starts within
// 500ms of the old child's exit.
func gracefulHandoff(t *testing.T, args []string) {
	a, b := pair(t, args)
	a.p.Signal(syscall.SIGTERM)
	if code := a.p.Wait(30 * time.Second); code != 0 {
		t.Errorf("leader exit %d after graceful stop, want the child's 0", code)
	}
	b.waitStarted(t, 10*time.Second)
	gap := b.stamp(t, "start").Sub(a.stamp(t, "end"))
	t.Logf("old child exited -> new child started: %v", gap.Round(time.Millisecond))
	if gap > 500*time.Millisecond {
		t.Errorf("standby's child started %v after the old child exited, want < 500ms", gap)
	}
	if gap <= 0 {
		t.Errorf("standby's child started %v before the old child exited", -gap)
	}
	b.noOverlap(t)
}

// frozenLeader: SIGSTOP the leader's leaderrun past its TTL. Its guard kills
// the child at the kill point; the standby takes over only after that; on
// SIGCONT the old leader exits 123 and never restarts its child.
func frozenLeader(t *testing.T, args []string, takeover time.Duration) {
	a, b := pair(t, args)
	aPid := readPID(t, a.file("pid"))
	a.p.Signal(syscall.SIGSTOP)
	frozen := time.Now()
	b.waitStarted(t, takeover)
	t.Logf("leader frozen -> standby's child started: %v", b.stamp(t, "start").Sub(frozen).Round(time.Millisecond))
	if alive(aPid) {
		t.Fatal("old leader's child alive when the standby's child started")
	}
	b.noOverlap(t)
	a.p.Signal(syscall.SIGCONT)
	if code := a.p.Wait(15 * time.Second); code != 123 {
		t.Fatalf("resumed leader exit %d, want 123\n%s", code, a.p.Output())
	}
	if n := strings.Count(a.p.Output(), "child started"); n != 1 {
		t.Fatalf("resumed leader started its child %d times, want once", n)
	}
	if eb, ea := b.epoch(t), a.epoch(t); eb <= ea {
		t.Fatalf("new epoch %d, want > %d", eb, ea)
	}
}

// keyDeletedByHand: removing the leader's key or session stops the child at
// once (well before the TTL could run out), exit 123.
func keyDeletedByHand(t *testing.T, args []string, remove func(), ttl time.Duration) {
	dir := t.TempDir()
	a := startHost(t, dir, "a", "b", args)
	a.waitStarted(t, 30*time.Second)
	remove()
	removed := time.Now()
	code := a.p.Wait(ttl + 10*time.Second)
	took := time.Since(removed)
	if code != 123 {
		t.Fatalf("exit %d, want 123\n%s", code, a.p.Output())
	}
	// The child takes 200ms to answer SIGTERM; waiting out the TTL would
	// take far longer.
	if took > ttl/2 {
		t.Fatalf("took %v to stop after the key was removed; it waited for the TTL (%v)?", took, ttl)
	}
	t.Logf("key removed by hand -> leaderrun exited 123: %v", took.Round(time.Millisecond))
}

func fmtArgs(format string, a ...any) []string { return strings.Fields(fmt.Sprintf(format, a...)) }
