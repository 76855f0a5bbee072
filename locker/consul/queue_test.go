package consul

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
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
