//go:build linux

package e2e

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// holdersMixedN: N is a property of the key, whichever slot its holder
// holds. Four --holders 4 candidates fill slots 0..3, and all but the
// holder of slot 3 stop. Two --holders 2 candidates started then, and a
// --holders 1 candidate after them, are each refused with 125 naming both
// numbers and the holder: none of them runs a child beside it (slots 0
// and 1, which they campaign for, are free, so only a read of slot 3
// finds it).
func holdersMixedN(t *testing.T, args func(key string) []string) {
	key, mark, env := markedKey("mixedn")
	w := watchSlots(mark, 4)
	procs := map[string]*Proc{}
	for i := range 4 {
		id := "n4_" + strconv.Itoa(i)
		procs[id] = start(t, id, env, withCommand(append(args(key), "--holders", "4", "--id", id), "exec sleep 600")...)
	}
	waitChildren(t, mark, 4)
	var keep string
	for _, k := range slotChildren(mark) {
		if k.slot == 3 {
			keep = k.id
		}
	}
	for id, p := range procs {
		if id != keep {
			p.Signal(syscall.SIGTERM)
		}
	}
	for id, p := range procs {
		if id != keep {
			p.Wait(30 * time.Second)
		}
	}
	waitChildren(t, mark, 1)
	refused := func(id string, n int, p *Proc) {
		t.Helper()
		if code := p.Wait(60 * time.Second); code != 125 {
			t.Errorf("--holders %d beside %s, the holder of slot 3 of 4: exit %d, want 125\n%s", n, keep, code, p.Output())
			return
		}
		out := p.Output()
		for _, want := range []string{"--holders " + strconv.Itoa(n), "--holders 4", keep} {
			if !strings.Contains(out, want) {
				t.Errorf("refusal of %s does not name %q:\n%s", id, want, out)
			}
		}
	}
	two := map[string]*Proc{}
	for _, id := range []string{"n2_a", "n2_b"} {
		two[id] = start(t, id, env, withCommand(append(args(key), "--holders", "2", "--id", id), "exec sleep 600")...)
	}
	for id, p := range two {
		refused(id, 2, p)
	}
	one := start(t, "n1", env, withCommand(append(args(key), "--id", "n1"), "exec sleep 600")...)
	refused("n1", 1, one)
	if kids := slotChildren(mark); len(kids) != 1 || kids[0].id != keep {
		t.Errorf("children alive after the refusals: %v, want only %s's", kids, keep)
	}
	w.end(t)
	stopAll(procs[keep])
}

// waitChildren waits until exactly n children of mark are alive.
func waitChildren(t *testing.T, mark string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for len(slotChildren(mark)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d children alive, want %d: %v", len(slotChildren(mark)), n, slotChildren(mark))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestHoldersMixedNLocal(t *testing.T) {
	dir := t.TempDir()
	holdersMixedN(t, func(key string) []string { return localArgs(dir, key, ghostTTL...) })
}

func TestHoldersMixedNEtcd(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	holdersMixedN(t, func(key string) []string { return etcdArgs(eps, key, ghostTTL...) })
}

func TestHoldersMixedNPostgres(t *testing.T) {
	dsn := testcluster.StartPostgres(t).DSN()
	holdersMixedN(t, func(key string) []string { return pgArgs(dsn, key, ghostTTL...) })
}

// TestHoldersStaleRecordLocal: a lock file keeps the record of its last
// holder after that holder is gone, until the next holder, which takes
// the flock first, writes its own. Four --holders 4 candidates run and
// exit; then two --holders 2 candidates started together must both run
// (exit 0): the records the --holders 4 holders left are no live holder,
// also for the moment a --holders 2 candidate holds a slot's flock and
// has not written its record yet.
func TestHoldersStaleRecordLocal(t *testing.T) {
	dir := t.TempDir()
	for round := range 4 {
		key := newKey("stale" + strconv.Itoa(round))
		args := func(id string, n int, script string) []string {
			return withCommand(localArgs(dir, key, append(ghostTTL, "--holders", strconv.Itoa(n), "--id", id)...), script)
		}
		var four []*Proc
		for i := range 4 {
			id := "n4_" + strconv.Itoa(i)
			four = append(four, start(t, id, nil, args(id, 4, "sleep 1")...))
		}
		for i, p := range four {
			if code := p.Wait(60 * time.Second); code != 0 {
				t.Fatalf("round %d: --holders 4 candidate %d: exit %d\n%s", round, i, code, p.Output())
			}
		}
		a := start(t, "n2_a", nil, args("n2_a", 2, "sleep 1")...)
		b := start(t, "n2_b", nil, args("n2_b", 2, "sleep 1")...)
		for _, p := range []*Proc{a, b} {
			if code := p.Wait(60 * time.Second); code != 0 {
				t.Errorf("round %d: %s after the --holders 4 holders exited: exit %d, want 0\n%s", round, p.name, code, p.Output())
			}
		}
	}
}

// holdersCrashedOtherN: on a backend that expires nothing, a holder that
// died together with its guard keeps its row until someone takes its
// slot over; candidates of another N never do. Four --holders 4
// candidates fill slots 0..3; the holder of slot 3 and its guard are
// killed at once (stopped, then SIGKILL), the others stop. Two --holders
// 2 candidates started then must run (exit 0) once the dead row has not
// changed for its TTL and allowance, not be refused for good.
func holdersCrashedOtherN(t *testing.T, args func(key string) []string, ttl time.Duration) {
	key, mark, env := markedKey("crashedn")
	procs := map[string]*Proc{}
	for i := range 4 {
		id := "n4_" + strconv.Itoa(i)
		procs[id] = start(t, id, env, withCommand(append(args(key), "--holders", "4", "--id", id), "exec sleep 600")...)
	}
	waitChildren(t, mark, 4)
	var victim slotChild
	for _, k := range slotChildren(mark) {
		if k.slot == 3 {
			victim = k
		}
	}
	p := procs[victim.id]
	g := guardOf(t, p)
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		_ = syscall.Kill(g, sig)
		_ = syscall.Kill(p.Pid(), sig)
	}
	p.Wait(20 * time.Second)
	for id, q := range procs {
		if id != victim.id {
			q.Signal(syscall.SIGTERM)
		}
	}
	for id, q := range procs {
		if id != victim.id {
			q.Wait(30 * time.Second)
		}
	}
	t0 := time.Now()
	var two []*Proc
	for _, id := range []string{"n2_a", "n2_b"} {
		two = append(two, start(t, id, env, withCommand(append(args(key), "--holders", "2", "--id", id), "exit 0")...))
	}
	for _, q := range two {
		if code := q.Wait(ttl + 60*time.Second); code != 0 {
			t.Errorf("%s beside the row of a --holders 4 holder killed with its guard: exit %d, want 0\n%s", q.name, code, q.Output())
		}
	}
	t.Logf("--holders 2 candidates ran %v after the holder of slot 3 of 4 died (TTL %v)", time.Since(t0).Round(time.Millisecond), ttl)
	if kids := slotChildren(mark); len(kids) != 0 {
		for _, k := range kids {
			_ = syscall.Kill(k.pid, syscall.SIGKILL)
		}
	}
}

func TestHoldersCrashedOtherNPostgres(t *testing.T) {
	dsn := testcluster.StartPostgres(t).DSN()
	holdersCrashedOtherN(t, func(key string) []string { return pgArgs(dsn, key, slowTTL...) }, 8*time.Second)
}

func TestHoldersMixedNZooKeeper(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1, MaxSessionTimeout: 40 * time.Second})
	servers := z.Addrs()
	holdersMixedN(t, func(key string) []string { return zkArgs(servers, key, ghostTTL...) })
}

func TestHoldersMixedNDynamoDB(t *testing.T) {
	d := testcluster.StartDynalite(t)
	d.SetEnv(t)
	ep := d.Endpoint()
	holdersMixedN(t, func(key string) []string { return dynArgs(ep, key, ghostTTL...) })
}

func TestHoldersCrashedOtherNDynamoDB(t *testing.T) {
	d := testcluster.StartDynalite(t)
	d.SetEnv(t)
	ep := d.Endpoint()
	holdersCrashedOtherN(t, func(key string) []string { return dynArgs(ep, key, slowTTL...) }, 8*time.Second)
}

func TestHoldersMixedNConsul(t *testing.T) {
	addr := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1}).HTTPAddr(0)
	holdersMixedN(t, func(key string) []string { return consulArgs(addr, key, ghostTTL...) })
}
