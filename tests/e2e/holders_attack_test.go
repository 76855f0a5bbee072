//go:build linux

package e2e

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
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

// holdersNoGhosts: candidates started together fill the N slots without
// waiting for any TTL (an attempt cancelled because another slot was won
// leaves nothing behind that holds or queues on its slot), candidates
// stopped by SIGTERM while campaigning leave no queue entry that would win
// a freed slot for a process that is gone, and a slot given back is taken
// by the next candidate well within the TTL.
func holdersNoGhosts(t *testing.T, args func(key string) []string, ttl time.Duration) {
	key, mark, env := markedKey("ghosts")
	w := watchSlots(mark, 3)
	run := func(id string) *Proc {
		return start(t, id, env, withCommand(append(args(key), "--holders", "3", "--id", id), "exec sleep 600")...)
	}
	procs := map[string]*Proc{}
	t0 := time.Now()
	for _, id := range []string{"h0", "h1", "h2", "w0", "w1"} {
		procs[id] = run(id)
	}
	testsupport.WaitFor(t, ttl/2, "3 slots filled by candidates started together", func() bool { return len(slotChildren(mark)) == 3 })
	t.Logf("5 candidates started together: 3 slots filled in %v (TTL %v)", time.Since(t0).Round(time.Millisecond), ttl)
	leading := map[string]bool{}
	for _, k := range slotChildren(mark) {
		leading[k.id] = true
	}
	var waiting []string
	for id := range procs {
		if !leading[id] {
			waiting = append(waiting, id)
		}
	}
	for _, id := range waiting {
		procs[id].Signal(syscall.SIGTERM)
	}
	for _, id := range waiting {
		if code := procs[id].Wait(10 * time.Second); code != 128+int(syscall.SIGTERM) {
			t.Errorf("waiting candidate %s stopped by SIGTERM: exit %d, want %d", id, code, 128+int(syscall.SIGTERM))
		}
	}
	var victim slotChild
	for _, k := range slotChildren(mark) {
		victim = k
		break
	}
	procs[victim.id].Signal(syscall.SIGTERM)
	procs[victim.id].Wait(20 * time.Second)
	freed := time.Now()
	procs["n0"] = run("n0")
	testsupport.WaitFor(t, ttl/2, "slot given back taken by a new candidate", func() bool {
		for _, k := range slotChildren(mark) {
			if k.id == "n0" {
				return true
			}
		}
		return false
	})
	t.Logf("slot %d given back by SIGTERM: new candidate leads %v later", victim.slot, time.Since(freed).Round(time.Millisecond))
	w.end(t)
	for _, p := range procs {
		if !p.Exited() {
			p.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range procs {
		p.Wait(20 * time.Second)
	}
}

var ghostTTL = []string{"--ttl", "30s", "--renew-interval", "2s", "--kill-grace", "1s", "--safety-margin", "500ms"}

func TestHoldersNoGhostsLocal(t *testing.T) {
	dir := t.TempDir()
	holdersNoGhosts(t, func(key string) []string { return localArgs(dir, key, ghostTTL...) }, 30*time.Second)
}

func TestHoldersNoGhostsEtcd(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	holdersNoGhosts(t, func(key string) []string { return etcdArgs(eps, key, ghostTTL...) }, 30*time.Second)
}

func TestHoldersNoGhostsConsul(t *testing.T) {
	addr := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1}).HTTPAddr(0)
	holdersNoGhosts(t, func(key string) []string { return consulArgs(addr, key, ghostTTL...) }, 30*time.Second)
}

func TestHoldersNoGhostsZooKeeper(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1, MaxSessionTimeout: 40 * time.Second})
	servers := z.Addrs()
	holdersNoGhosts(t, func(key string) []string { return zkArgs(servers, key, ghostTTL...) }, 30*time.Second)
}

func TestHoldersNoGhostsPostgres(t *testing.T) {
	dsn := testcluster.StartPostgres(t).DSN()
	holdersNoGhosts(t, func(key string) []string { return pgArgs(dsn, key, ghostTTL...) }, 30*time.Second)
}

func TestHoldersNoGhostsDynamoDB(t *testing.T) {
	d := testcluster.StartDynalite(t)
	d.SetEnv(t)
	ep := d.Endpoint()
	holdersNoGhosts(t, func(key string) []string { return dynArgs(ep, key, ghostTTL...) }, 30*time.Second)
}

func TestHoldersNoGhostsKubernetes(t *testing.T) {
	k := testcluster.StartKube(t, testcluster.StartEtcd(t, 1))
	admin := k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")
	holdersNoGhosts(t, func(key string) []string { return kubeArgs(admin, key, ghostTTL...) }, 30*time.Second)
}
