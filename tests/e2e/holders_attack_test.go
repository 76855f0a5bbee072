//go:build linux

package e2e

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestHoldersSetupFailureFreesSlot: a --holders run wins its slot before
// it opens the metrics listener, the guard and the containment; one that
// fails there (here --http-addr already in use) exits 125 and must give
// the slot back at once, not leave it held by a dead process until its
// TTL. The check: right after the failed run, two --no-wait candidates
// both win (with the failed run's slot still held the second gets 124).
func TestHoldersSetupFailureFreesSlot(t *testing.T) {
	c := testcluster.StartEtcd(t, 1)
	eps := c.Endpoints()
	key := newKey("setupfail")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	args := func(extra ...string) []string {
		return etcdArgs(eps, key, append([]string{"--ttl", "30s", "--renew-interval", "1s", "--holders", "2"}, extra...)...)
	}
	bad := start(t, "bad", nil, withCommand(args("--id", "bad", "--http-addr", busy.Addr().String()), "exit 0")...)
	if code := bad.Wait(20 * time.Second); code != 125 {
		t.Fatalf("run with a busy --http-addr: exit %d, want 125\n%s", code, bad.Output())
	}
	a := start(t, "a", nil, withCommand(args("--id", "a", "--no-wait"), "sleep 60")...)
	defer a.Signal(syscall.SIGTERM)
	time.Sleep(3 * time.Second)
	if a.Exited() {
		t.Fatalf("--no-wait candidate a exited: %s", a.Output())
	}
	b := start(t, "b", nil, withCommand(args("--id", "b", "--no-wait"), "exit 0")...)
	if code := b.Wait(20 * time.Second); code != 0 {
		t.Errorf("--no-wait candidate b beside a: exit %d, want 0 (the failed run's slot free)\n%s", code, b.Output())
	}
}
