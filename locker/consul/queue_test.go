package consul

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestQueue runs the candidates' queue (queue.go) on a real Consul server.
func TestQueue(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{Servers: 1})
	addr := c.HTTPAddr(0)
	t.Run("OnlyTheHeadTries", func(t *testing.T) { testOnlyTheHeadTries(t, c, addr) })
	t.Run("DeadEntrySkipped", func(t *testing.T) { testDeadEntrySkipped(t, c, addr) })
	t.Run("DeadEntriesSkippedTogether", func(t *testing.T) { testDeadEntriesTogether(t, c, addr) })
	t.Run("KeyBeneath", func(t *testing.T) { testKeyBeneath(t, c, addr) })
	t.Run("NeverUsedWithEntries", func(t *testing.T) { testNeverUsedWithEntries(t, c, addr) })
	t.Run("EntriesGoWithTheCandidate", func(t *testing.T) { testEntriesGo(t, c, addr) })
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

// testEntriesGo: a candidate that stops waiting (its context ends) and one
// that wins both leave no entry behind.
func testEntriesGo(t *testing.T, c *cluster, addr string) {
	key := lockertest.Key(t)
	a, b := c.locker(t, key, addr), c.locker(t, key, addr)
	la := acquire(t, a)
	if pairs, _, _ := c.admin.KV().List(a.path+queueDir, nil); len(pairs) != 0 {
		t.Errorf("the winner left %d queue entries", len(pairs))
	}
	ctx, cancel := context.WithCancel(context.Background())
	win := lockertest.AcquireAsync(t, ctx, b)
	waitFor(t, 10*time.Second, "b's entry", func() bool { return c.queued(t, b) == 1 })
	cancel()
	if got := <-win; got.Err == nil {
		t.Fatal("b's Acquire returned a lease though its context ended")
	}
	if pairs, _, _ := c.admin.KV().List(a.path+queueDir, nil); len(pairs) != 0 {
		t.Errorf("a cancelled candidate left %d queue entries", len(pairs))
	}
	release(t, la)
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

// testOnlyTheHeadTries: with a leader and seven standbys, each release by
// handle (as the dead-man guard does after a kill -9) is followed by one
// acquire attempt in all, from the standby that queued first.
func testOnlyTheHeadTries(t *testing.T, c *cluster, addr string) {
	const n = 8
	key := lockertest.Key(t)
	ls := make([]*Locker, n)
	for i := range ls {
		ls[i] = c.locker(t, key, addr)
	}
	guard := c.locker(t, key, addr)
	held := acquire(t, ls[0])
	type won struct {
		i int
		lockertest.Acquired
	}
	wins := make(chan won, n)
	for i := 1; i < n; i++ {
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 2*time.Minute), ls[i])
		go func() { wins <- won{i, <-ch} }()
		// One at a time, so the queue's order is known.
		waitFor(t, 10*time.Second, "the standby's session", func() bool { return len(c.sessions(t, ls[i])) == i+1 })
		time.Sleep(100 * time.Millisecond) // its entry follows its session
	}
	if q := c.queued(t, ls[0]); q != n-1 {
		t.Errorf("%d candidates in the queue, want %d", q, n-1)
	}
	time.Sleep(300 * time.Millisecond) // every standby blocks on its query
	for round, next := 1, 1; round <= 2; round, next = round+1, next+1 {
		var before int64
		for _, l := range ls {
			before += l.attempts.Load()
		}
		if err := guard.ReleaseHandle(lockertest.Ctx(t, 5*time.Second), held.Handle()); err != nil {
			t.Fatal(err)
		}
		var got won
		select {
		case got = <-wins:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no standby took over within 10s", round)
		}
		if got.Err != nil {
			t.Fatalf("round %d: standby %d: %v", round, got.i, got.Err)
		}
		if got.i != next {
			t.Errorf("round %d: standby %d took over, want %d, the head of the queue", round, got.i, next)
		}
		held = got.Lease.(*lease)
		time.Sleep(time.Second) // let any other standby wake and try
		var after int64
		for _, l := range ls {
			after += l.attempts.Load()
		}
		t.Logf("round %d: %d acquire attempts among %d standbys", round, after-before, n-round)
		if after-before != 1 {
			t.Errorf("round %d: %d acquire attempts after the release, want 1 (only the head of the queue)", round, after-before)
		}
		select {
		case a := <-wins:
			t.Fatalf("standby %d returned from Acquire as well: %v", a.i, a.Err)
		default:
		}
	}
}

// testDeadEntrySkipped: a candidate that stopped in the queue (a session
// and an entry nobody writes any more, as a kill -9 leaves them) holds the
// queue up for TTL + allowance after its last write, not until Consul
// invalidates its session (up to twice the TTL).
func testDeadEntrySkipped(t *testing.T, c *cluster, addr string) {
	key := lockertest.Key(t)
	a, b := c.locker(t, key, addr), c.locker(t, key, addr)
	la := acquire(t, a)
	sid, _, err := c.admin.Session().Create(&api.SessionEntry{TTL: a.ttlString(), Behavior: api.SessionBehaviorRelease, Checks: []string{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.admin.Session().Destroy(sid, nil) })
	if ok, _, err := c.admin.KV().Acquire(&api.KVPair{Key: a.entryKey(sid), Session: sid, Value: []byte("dead")}, nil); !ok || err != nil {
		t.Fatalf("dead entry: %v %v", ok, err)
	}
	written := time.Now()
	win := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), b)
	waitFor(t, 10*time.Second, "b's session", func() bool { return len(c.sessions(t, b)) == 2 })
	time.Sleep(200 * time.Millisecond) // its entry follows its session
	release(t, la)
	bound := a.opts.TTL + observe.Allowance(a.opts.TTL)
	select {
	case got := <-win:
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		took := got.At.Sub(written)
		t.Logf("b took over %v after the dead entry's last write (bound %v)", took.Round(time.Millisecond), bound)
		if took < bound {
			t.Errorf("b took over %v after the dead entry's last write, before its TTL + allowance %v", took, bound)
		}
		lockertest.Release(got.Lease)
	case <-time.After(bound + 5*time.Second):
		t.Fatalf("b did not take over within %v of the dead entry's last write", bound+5*time.Second)
	}
	if pair, _, _ := c.admin.KV().Get(a.entryKey(sid), nil); pair != nil {
		t.Errorf("the dead entry is still there: %+v", pair)
	}
}

// testDeadEntriesTogether: three candidates that stopped in the queue at
// the same moment (a host frozen whole), their sessions still alive, hold
// the one behind them up for one TTL + allowance, not for one each.
func testDeadEntriesTogether(t *testing.T, c *cluster, addr string) {
	key := lockertest.Key(t)
	b := c.locker(t, key, addr)
	var sids []string
	for i := range 3 {
		sid, _, err := c.admin.Session().Create(&api.SessionEntry{TTL: b.ttlString(), Behavior: api.SessionBehaviorRelease, Checks: []string{}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.admin.Session().Destroy(sid, nil) })
		if ok, _, err := c.admin.KV().Acquire(&api.KVPair{Key: b.entryKey(sid), Session: sid, Value: []byte("frozen " + strconv.Itoa(i))}, nil); !ok || err != nil {
			t.Fatalf("frozen entry: %v %v", ok, err)
		}
		sids = append(sids, sid)
	}
	written := time.Now()
	// Their sessions live on (Consul alone would end them after two
	// TTLs); only their entries stay unwritten.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(b.opts.TTL / 3):
			}
			for _, sid := range sids {
				c.admin.Session().Renew(sid, nil)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	bound := b.opts.TTL + observe.Allowance(b.opts.TTL)
	win := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), b)
	select {
	case got := <-win:
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		took := got.At.Sub(written)
		t.Logf("b acquired %v after three entries ahead stopped (TTL + allowance %v)", took.Round(time.Millisecond), bound)
		if took > bound+3*time.Second {
			t.Errorf("b acquired %v after three entries ahead stopped together, want within one TTL + allowance (%v)", took, bound)
		}
		lockertest.Release(got.Lease)
	case <-time.After(4*bound + 5*time.Second):
		t.Fatalf("b did not acquire within %v", 4*bound+5*time.Second)
	}
}
