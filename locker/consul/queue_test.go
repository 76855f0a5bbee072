package consul

import (
	"cmp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/locker/queue"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestQueue runs the candidates' queue (queue.go) on a real Consul server.
func TestQueue(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{Servers: 1})
	addr := c.HTTPAddr(0)
	lockertest.QueueContract(t, lockertest.Queue[*Locker]{
		New:      func(t *testing.T, key string) *Locker { return c.locker(t, key, addr) },
		TTL:      c.locker(t, "ttl", addr).opts.TTL,
		Attempts: func(l *Locker) int64 { return l.attempts.Load() },
		Queued:   c.queued,
		Stopped:  c.stoppedEntry,
	})
	t.Run("KeyBeneath", func(t *testing.T) { testKeyBeneath(t, c, addr) })
	t.Run("NeverUsedWithEntries", func(t *testing.T) { testNeverUsedWithEntries(t, c, addr) })
	t.Run("OnlyTheNearRewrite", func(t *testing.T) { testOnlyTheNearRewrite(t, c, addr) })
	t.Run("JoinRetried", func(t *testing.T) { testJoinRetried(t, c, addr) })
}

// testOnlyTheNearRewrite: with a leader and five candidates queued, only
// the head and the one behind it rewrite their entries; the three deeper
// write theirs once, so over three TTLs their ModifyIndex stays put. Then
// the candidate behind the head and one deeper lose the server (every
// request they send fails, as for a host killed or cut off): the first is
// passed over and deleted within TTL + allowance, as a silent entry that
// rewrites; the deeper one, which never rewrote, once Consul invalidates
// its session (within two TTLs) and its successor finds it unlocked.
func testOnlyTheNearRewrite(t *testing.T, c *cluster, addr string) {
	const n = 5
	key := lockertest.Key(t)
	leader := c.locker(t, key, addr)
	held := acquire(t, leader)
	defer release(t, held)
	defer keepRenewing(t, leader, held)()
	cut := map[int]*testsupport.FaultyHTTP{1: nil, 3: nil}
	ls := make([]*Locker, n)
	for i := range ls {
		a := addr
		if _, ok := cut[i]; ok {
			cut[i] = testsupport.NewFaultyHTTP(t, addr)
			a = cut[i].Addr
		}
		ls[i] = c.locker(t, key, a)
		lockertest.AcquireAsync(t, lockertest.Ctx(t, 3*time.Minute), ls[i])
		// One at a time, so the queue's order is known.
		waitFor(t, 10*time.Second, "the candidate's entry", func() bool { return c.queued(t, leader) == i+1 })
	}
	entries := func() []*api.KVPair {
		pairs, _, err := c.admin.KV().List(leader.path+queueDir, &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(pairs, func(a, b *api.KVPair) int { return cmp.Compare(a.CreateIndex, b.CreateIndex) })
		return pairs
	}
	// Every candidate has read the queue and the near ones have begun to
	// rewrite by the second renewal.
	ttl := leader.opts.TTL
	time.Sleep(ttl/3 + time.Second)
	first := entries()
	if len(first) != n {
		t.Fatalf("%d entries, want %d", len(first), n)
	}
	writes := make([]int, n)
	last := make([]uint64, n)
	for i, p := range first {
		last[i] = p.ModifyIndex
	}
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		for i, p := range entries() {
			if i < n && p.ModifyIndex != last[i] {
				writes[i]++
				last[i] = p.ModifyIndex
			}
		}
	}
	t.Logf("entry writes over %v by place in the queue: %v", 3*ttl, writes)
	for i, w := range writes {
		switch {
		case i < 2 && w < 3:
			t.Errorf("the entry at place %d was written %d times in three TTLs, want one per TTL/3: it must prove it is alive", i, w)
		case i >= 2 && w != 0:
			t.Errorf("the entry at place %d was written %d times in three TTLs, want 0: only the head and the one behind it rewrite", i, w)
		}
	}
	if _, head := queue.Mode(toEntry(entries()[0])); !head {
		t.Errorf("the head's entry %q does not say it is the head", entries()[0].Value)
	}

	behind, deep := entries()[1].Key, entries()[3].Key
	cutAt := time.Now()
	cut[1].FailPrefix("/")
	cut[3].FailPrefix("/")
	gone := func(key string) bool {
		pair, _, err := c.admin.KV().Get(key, &api.QueryOptions{RequireConsistent: true})
		return err == nil && pair == nil
	}
	bound := ttl + observe.Allowance(ttl)
	waitFor(t, bound+3*time.Second, "the entry behind the head passed over and deleted", func() bool { return gone(behind) })
	t.Logf("the entry behind the head was deleted %v after its candidate was cut off (TTL + allowance %v)", time.Since(cutAt).Round(time.Millisecond), bound)
	waitFor(t, 2*ttl+observe.Allowance(ttl)+3*time.Second, "the deep entry passed over and deleted", func() bool { return gone(deep) })
	t.Logf("the deep entry was deleted %v after its candidate was cut off (2 x TTL + allowance %v)", time.Since(cutAt).Round(time.Millisecond), 2*ttl+observe.Allowance(ttl))
	if got := c.queued(t, leader); got != n-2 {
		t.Errorf("%d live entries after two candidates went, want %d", got, n-2)
	}
}

// stoppedEntry puts an entry in l's queue whose session lives on (renewed
// until the test ends) but which nobody writes again, as a frozen host
// leaves it (Consul alone would end such a session after two TTLs).
func (c *cluster) stoppedEntry(t *testing.T, l *Locker) func() bool {
	sid, _, err := c.admin.Session().Create(&api.SessionEntry{TTL: l.ttlString(), Behavior: api.SessionBehaviorRelease, Checks: []string{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.admin.KV().Acquire(&api.KVPair{Key: l.entryKey(sid), Session: sid, Value: []byte("stopped")}, nil); !ok || err != nil {
		t.Fatalf("stopped entry: %v %v", ok, err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(l.opts.TTL / 3):
			}
			c.admin.Session().Renew(sid, nil)
		}
	}()
	t.Cleanup(func() { close(stop); <-done; c.admin.Session().Destroy(sid, nil) })
	return func() bool {
		pair, _, _ := c.admin.KV().Get(l.entryKey(sid), &api.QueryOptions{RequireConsistent: true})
		return pair != nil
	}
}

// testKeyBeneath: a key may be named "<key>/.queue/x" (locker.ValidateKey
// allows it), or reach that path through its prefix. Its lock key, held
// and silent between heartbeats, is no candidate of <key>: a candidate of
// <key> takes the free key at once, and leaves the other key's lock alone.
func testKeyBeneath(t *testing.T, c *cluster, addr string) {
	key := lockertest.Key(t)
	below := c.locker(t, key+"/.queue/x", addr)
	held := acquire(t, below)
	other := c.locker(t, "x", addr, func(cfg *Config) { cfg.Prefix = "leaderrun-test/" + key + "/.queue" })
	if other.path != below.path {
		t.Fatalf("prefix game: %q, want %q", other.path, below.path)
	}
	l := c.locker(t, key, addr)
	start := time.Now()
	got := acquire(t, l)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Acquire of a free key took %v: the lock key %s stood in its queue", took, below.path)
	}
	release(t, got)
	pair, _, err := c.admin.KV().Get(below.path, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if pair == nil || pair.Session != held.session {
		t.Fatalf("the lock key %s is no longer held by its holder: %+v", below.path, pair)
	}
	release(t, held)
}

// testNeverUsedWithEntries: queue entries alone (a candidate killed before
// its first acquire leaves one) do not make a key read as used.
func testNeverUsedWithEntries(t *testing.T, c *cluster, addr string) {
	key := lockertest.Key(t)
	l := c.locker(t, key, addr)
	if _, err := c.admin.KV().Put(&api.KVPair{Key: l.entryKey("gone"), Value: []byte("left behind")}, nil); err != nil {
		t.Fatal(err)
	}
	lockertest.NeverUsed(t, l, func() { release(t, acquire(t, l)) }, "KV "+l.path)
}

// queued counts the live entries in the queue of l's key.
func (c *cluster) queued(t *testing.T, l *Locker) int {
	t.Helper()
	pairs, _, err := c.admin.KV().List(l.path+queueDir, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pairs {
		if p.Session != "" {
			n++
		}
	}
	return n
}

// keepRenewing renews held every TTL/3, as its supervisor would, until the
// returned stop is called or the test ends.
func keepRenewing(t *testing.T, l *Locker, held *lease) (stop func()) {
	renewing, renewed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(renewed)
		for {
			select {
			case <-renewing:
				return
			case <-time.After(l.opts.TTL / 3):
			}
			if _, err := held.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
				t.Errorf("the leader's renewal failed: %v", err)
				return
			}
		}
	}()
	stop = sync.OnceFunc(func() { close(renewing); <-renewed })
	t.Cleanup(stop)
	return stop
}

// testJoinRetried: a candidate whose first queue write fails (here its
// server answers 500 to every queue write for 2s; at a hundred candidates
// starting at once, slow servers time them out) joins the queue once the
// write goes through, instead of campaigning without it: a release then
// wakes only the head.
func testJoinRetried(t *testing.T, c *cluster, addr string) {
	key := lockertest.Key(t)
	leader := c.locker(t, key, addr)
	held := acquire(t, leader)
	stopRenewing := keepRenewing(t, leader, held)

	head := c.locker(t, key, addr)
	headWon := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), head)
	waitFor(t, 10*time.Second, "the first standby's entry", func() bool { return c.queued(t, leader) == 1 })

	faulty := testsupport.NewFaultyHTTP(t, addr)
	faulty.FailPrefix("/v1/kv/" + leader.path + queueDir)
	late := c.locker(t, key, faulty.Addr)
	lateWon := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), late)
	time.Sleep(2 * time.Second)
	faulty.FailPrefix("")
	waitFor(t, 10*time.Second, "the standby whose first queue write failed in the queue", func() bool { return c.queued(t, leader) == 2 })

	stopRenewing()
	release(t, held)
	lockertest.OnlyTheHeadTakes(t, headWon, lateWon, late.attempts.Load)
}
