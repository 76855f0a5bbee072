//go:build linux

package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/tests/chaos"
)

// The lease-row backends (PostgreSQL, DynamoDB) share these: a standby
// decides on its own clock that a silent holder is gone, so the tests
// check the whole timeline against the TTL and the allowance.

// cutOffLeader starts leader a, reaching the server at addr through a
// proxy (via turns the proxy's address into a's backend args), and
// standby b on direct, then blackholes a's proxy: a's child must end
// before the TTL since the cut (its last renewal was sent before it), b's
// child must start no earlier than TTL + allowance - renewInterval after
// it (b's count began at the latest read before the cut) and after a's
// child ended, with a higher epoch, and a must exit 123. It returns both
// hosts, b still leading.
func cutOffLeader(t *testing.T, dir, addr string, via func(proxy string) []string, direct []string, ttl, renewInterval time.Duration) (a, b *host) {
	t.Helper()
	px, err := chaos.NewProxy(addr, chaos.Raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	a = startHost(t, dir, "a", "b", via(px.Addr()))
	a.waitStarted(t, 30*time.Second)
	b = startHost(t, dir, "b", "a", direct)
	waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "campaigning") })
	time.Sleep(time.Second)
	px.Cut(chaos.Blackhole)
	cut := time.Now()
	b.waitStarted(t, ttl+10*time.Second)
	aEnd, bStart := a.stamp(t, "end"), b.stamp(t, "start")
	t.Logf("cut -> old child ended %v, new child started %v", aEnd.Sub(cut).Round(time.Millisecond), bStart.Sub(cut).Round(time.Millisecond))
	if aEnd.After(cut.Add(ttl)) {
		t.Errorf("old child ended %v after the cut, past its deadline (TTL %v)", aEnd.Sub(cut), ttl)
	}
	if min := ttl + observe.Allowance(ttl) - renewInterval; bStart.Sub(cut) < min {
		t.Errorf("standby led %v after the cut, before TTL + allowance - renew interval (%v)", bStart.Sub(cut), min)
	}
	if !bStart.After(aEnd) {
		t.Errorf("standby's child started before the old child ended")
	}
	b.noOverlap(t)
	if eb, ea := b.epoch(t), a.epoch(t); eb <= ea {
		t.Errorf("epoch after takeover %d, want > %d", eb, ea)
	}
	if code := a.p.Wait(20 * time.Second); code != 123 {
		t.Errorf("cut-off leader exit %d, want 123\n%s", code, a.p.Output())
	}
	return a, b
}

// stopHost ends h's leaderrun with SIGTERM: it stops its child and
// releases.
func stopHost(t *testing.T, h *host) {
	t.Helper()
	h.p.Signal(syscall.SIGTERM)
	if code := h.p.Wait(10 * time.Second); code != 0 {
		t.Errorf("%s: exit %d after SIGTERM, want the child's 0\n%s", h.name, code, h.p.Output())
	}
}

// refusedOneLine runs leaderrun with args and a child that would leave a
// file: it must exit 125 within bound with one error line naming want,
// and run nothing.
func refusedOneLine(t *testing.T, args, env []string, want string, bound time.Duration) {
	t.Helper()
	dir := t.TempDir()
	begin := time.Now()
	p := start(t, "refused", env, append(args, "--", "touch", dir+"/ran")...)
	code := p.Wait(bound + 10*time.Second)
	took := time.Since(begin)
	out := strings.TrimSpace(p.Output())
	var errLines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "[ERROR]") || strings.HasPrefix(l, "leaderrun:") {
			errLines = append(errLines, l)
		}
	}
	t.Logf("exit %d after %v: %s", code, took.Round(time.Millisecond), strings.Join(errLines, " | "))
	if code != 125 || len(errLines) != 1 || !strings.Contains(errLines[0], want) {
		t.Fatalf("exit %d, want 125 and one error line naming %q:\n%s", code, want, out)
	}
	if took > bound {
		t.Errorf("took %v, want within %v", took, bound)
	}
	if ranFile(dir) {
		t.Fatal("the child ran")
	}
}
