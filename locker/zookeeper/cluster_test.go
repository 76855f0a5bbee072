package zookeeper

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestEnsembleLeaderKilled: sessions outlive the ensemble's leader, so the
// lease stays and renews through the new leader.
func TestEnsembleLeaderKilled(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 3})
	l := newLocker(t, z.Addrs(), lockertest.Key(t), func(c *Config) { c.TTL = 4 * time.Second })
	lease := lockertest.MustAcquire(t, l)
	epoch := lease.Epoch()
	z.Kill(z.Leader(t))
	killed := time.Now()
	var ok time.Time
	for time.Since(killed) < 30*time.Second {
		if _, err := renew(lease, time.Second); err == nil {
			ok = time.Now()
			break
		} else if errors.Is(err, locker.ErrLost) {
			t.Fatalf("lease lost when the ensemble's leader died: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ok.IsZero() {
		t.Fatal("no renewal succeeded within 30s of the leader's death")
	}
	t.Logf("first renewal through the new leader %v after the kill", ok.Sub(killed))
	if testsupport.IsClosed(lease.Lost()) || lease.Epoch() != epoch {
		t.Fatalf("lease lost (%s) or epoch changed (%d -> %d)", lease.LostReason(), epoch, lease.Epoch())
	}
	h, err := l.Leader(lockertest.Ctx(t, 10*time.Second))
	if err != nil || h.Epoch != epoch {
		t.Fatalf("Leader = %+v, %v; want epoch %d", h, err, epoch)
	}
}

// TestEnsembleQuorumLost: with two of three servers gone, no renewal
// succeeds, and the lease reports the loss once the session cannot be
// alive any more.
func TestEnsembleQuorumLost(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 3})
	l := newLocker(t, z.Addrs(), lockertest.Key(t))
	lease := lockertest.MustAcquire(t, l)
	leader := z.Leader(t)
	z.Kill(leader)
	z.Kill((leader + 1) % 3)
	killed := time.Now()
	for time.Since(killed) < 2*testTTL {
		if _, err := renew(lease, 500*time.Millisecond); err == nil {
			t.Fatalf("a renewal sent %v after the quorum was lost succeeded", time.Since(killed))
		}
		time.Sleep(100 * time.Millisecond)
	}
	testsupport.WaitFor(t, 2*testTTL, "Lost after the quorum was gone for longer than the session", func() bool {
		return testsupport.IsClosed(lease.Lost())
	})
	t.Logf("lost: %s", lease.LostReason())
}

// TestFollowerCutOff is the case a read or a ping cannot cover: the
// client's only server is a follower cut off from the quorum. It keeps
// answering the client (reads, pings) until its syncLimit runs out, while
// the leader expires the session and a standby takes over. No renewal sent
// after the cut may succeed.
func TestFollowerCutOff(t *testing.T) {
	// The follower notices the silence only after 40 ticks (8s), long
	// after the 2s session expired on the leader's side.
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 3, SyncLimit: 40})
	leader := z.Leader(t)
	follower := (leader + 1) % 3
	key := lockertest.Key(t)
	a := newLocker(t, []string{z.Addr(follower)}, key)
	lease := lockertest.MustAcquire(t, a)
	if _, err := renew(lease, 2*time.Second); err != nil {
		t.Fatalf("Renew before the cut: %v", err)
	}
	reader := rawConn(t, []string{z.Addr(follower)}, "")
	node := strings.SplitN(lease.Handle(), ":", 3)[2]

	z.Isolate(follower)
	cut := time.Now()
	standby := lockertest.AcquireAsync(t, lockertest.Ctx(t, 60*time.Second), newLocker(t, []string{z.Addr(leader)}, key))

	var took lockertest.Acquired
	for took.At.IsZero() {
		select {
		case took = <-standby:
			if took.Err != nil {
				t.Fatalf("standby: %v", took.Err)
			}
		default:
		}
		if _, err := renew(lease, 500*time.Millisecond); err == nil {
			t.Fatalf("a renewal sent %v after the cut succeeded through the cut-off follower", time.Since(cut))
		}
		if time.Since(cut) > 30*time.Second {
			t.Fatal("standby did not take over within 30s of the cut")
		}
	}
	t.Logf("standby took over %v after the cut (session %v)", took.At.Sub(cut), testTTL)
	// The follower still answers reads from its stale copy: a renewal made
	// of a read would have succeeded here.
	if ok, _, err := reader.Exists(node); err != nil || !ok {
		t.Logf("the cut-off follower no longer serves reads (%v, %v); the contrast is not shown this run", ok, err)
	} else {
		t.Logf("the cut-off follower still says %s exists, after the standby took over", node)
	}
	z.Heal(follower)
	testsupport.WaitFor(t, 30*time.Second, "the cut-off lease learns its loss once healed", func() bool { return testsupport.IsClosed(lease.Lost()) })
	t.Logf("lost: %s", lease.LostReason())
}

// TestSilentServer: the server carrying the session stops answering
// without closing the connection. A renewal that times out moves the
// session to another server at once, so renewals succeed again well
// before go-zookeeper's own receive timeout (two thirds of the session).
func TestSilentServer(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 3})
	var proxies []*chaos.Proxy
	var addrs []string
	for _, a := range z.Addrs() {
		p, err := chaos.NewProxy(a, chaos.Framed)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	const ttl = 4 * time.Second // go-zookeeper gives up on a silent server after 2.67s
	l := newLocker(t, addrs, lockertest.Key(t), func(c *Config) { c.TTL = ttl })
	lease := lockertest.MustAcquire(t, l)
	busiest, most := 0, int64(-1)
	for i, p := range proxies {
		if n := p.Requests(); n > most {
			busiest, most = i, n
		}
	}
	proxies[busiest].Cut(chaos.Blackhole)
	cut := time.Now()
	for {
		if _, err := renew(lease, ttl/10); err == nil {
			break
		} else if errors.Is(err, locker.ErrLost) {
			t.Fatalf("lease lost when one server went silent: %v", err)
		}
		if time.Since(cut) > ttl {
			t.Fatal("no renewal succeeded within the TTL of one server going silent")
		}
	}
	took := time.Since(cut)
	t.Logf("renewals succeeded again %v after the session's server went silent", took)
	if took > ttl/2 {
		t.Errorf("renewals failed for %v after one server went silent; the session should have moved at once", took)
	}
	if testsupport.IsClosed(lease.Lost()) {
		t.Fatalf("lease lost: %s", lease.LostReason())
	}
}

// TestRelayGap measures what Renew cannot prove: the ensemble's leader
// counts a session's timeout from the last activity a follower relayed to
// it (every tickTime/2), not from the renewal. The client talks to one
// follower (through a proxy) and renews at a steady cadence, as the
// supervisor does, so the lease reads once before each renewal (relay.go);
// right after the last renewal the follower is cut off from the quorum,
// and a standby on the other side takes over when the leader expires the
// session. The standby must not lead more than half a tick before
// leaderrun's own deadline: the renewal's send + the time Renew granted.
//
// Two things keep the test able to fail. Each renewal gets less time than
// the two ping periods Renew would need to make a missing read itself
// (lease.touchNow), so the steady read and the accounting carry the
// claim alone. Trials 2 to 7 hold the last read back at the proxy until
// just before the renewal: it is answered too late to have been relayed,
// and only the accounting (granted counted from the previous renewal)
// keeps the claim within what the ensemble holds. Trials 8 and 9 renew
// 2.5 intervals late (a stalled leaderrun): the reads in between must keep
// the claim sound. A short tick keeps the leader's rounding of expiries
// (one tick) small against the gap a wrong claim opens (an interval).
func TestRelayGap(t *testing.T) {
	const tick = 200 * time.Millisecond
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 3, Tick: tick, SyncLimit: 100})
	leader := z.Leader(t)
	follower := (leader + 1) % 3
	// Below two ping periods (tick/2 + 10ms each): no read in Renew.
	const ttl, every, attempt = 3 * time.Second, time.Second, 200 * time.Millisecond
	isExists := func(b []byte) bool { return len(b) >= 12 && binary.BigEndian.Uint32(b[8:12]) == 3 }
	for trial := 0; trial < 10; trial++ {
		lateRead := trial >= 2 && trial < 8
		overdue := trial >= 8 // the last renewal comes 2.5 intervals late
		// A proxy of its own: an earlier trial's lease, lost, still
		// reads through its old one.
		p, err := chaos.NewProxy(z.Addr(follower), chaos.Framed)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		key := fmt.Sprintf("%s-%d", lockertest.Key(t), trial)
		a := newLocker(t, []string{p.Addr()}, key, func(c *Config) { c.TTL = ttl })
		lease := lockertest.MustAcquire(t, a)
		var sent time.Time
		var granted time.Duration
		// The phase against the client's own pings (every TTL/3 from
		// the connect, which also count as activity) moves from trial to
		// trial: where a ping comes just after a renewal, nothing else of
		// the client's is relayed until the next one.
		time.Sleep(time.Duration(trial%6) * every / 6)
		const n = 5
		for i := 0; i < n; i++ {
			switch {
			case overdue && i == n-1:
				time.Sleep(time.Until(sent.Add(every * 5 / 2)))
			case i > 0:
				time.Sleep(time.Until(sent.Add(every)))
			}
			sent = time.Now()
			// A busy machine may need retries (a failed attempt
			// moves the session to a new connection); a claim made
			// after one must hold all the same.
			for _, d := range []time.Duration{attempt, time.Second, time.Second, 2 * time.Second} {
				if granted, err = renew(lease, d); err == nil {
					break
				}
				t.Logf("trial %d: renew %d: %v", trial, i, err)
			}
			if err != nil {
				t.Fatalf("trial %d: renew %d failed", trial, i)
			}
			if lateRead && i == n-2 {
				// The read before the last renewal reaches the server
				// just before that renewal is sent.
				hold := sent.Add(every - 10*time.Millisecond)
				p.BeforeForward(isExists, func() { time.Sleep(time.Until(hold)) })
			}
		}
		p.BeforeForward(nil, nil)
		z.Isolate(follower)
		r := <-lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), newLocker(t, []string{z.Addr(leader)}, key))
		if r.Err != nil {
			t.Fatalf("trial %d: standby: %v", trial, r.Err)
		}
		deadline := sent.Add(min(ttl, granted))
		early := deadline.Sub(r.At)
		t.Logf("trial %d (late read %v, overdue %v): granted %v; the standby led %v after the renewal's send; %v before leaderrun's deadline", trial, lateRead, overdue, granted, r.At.Sub(sent), early)
		if early > tick/2 {
			t.Errorf("trial %d: the standby led %v before leaderrun's deadline, more than half a tick (%v)", trial, early, tick/2)
		}
		z.Heal(follower)
		z.WaitServing(t)
	}
}

// TestTouchOncePerRenewal: a leader renewing at a steady cadence sends its
// server one read per renewal besides the renewal itself (and the
// client's pings), not one every 100ms. Requests are counted at a proxy.
func TestTouchOncePerRenewal(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	p, err := chaos.NewProxy(z.Addr(0), chaos.Framed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	const ttl, every, n = 3 * time.Second, time.Second, 6
	lease := lockertest.MustAcquire(t, newLocker(t, []string{p.Addr()}, lockertest.Key(t), func(c *Config) { c.TTL = ttl }))
	var sent time.Time
	var before int64
	for i := 0; i < 3+n; i++ {
		if i > 0 {
			time.Sleep(time.Until(sent.Add(every)))
		}
		if i == 3 {
			before = p.Requests() // the cadence is known from here on
		}
		sent = time.Now()
		if _, err := renew(lease, 2*time.Second); err != nil {
			t.Fatalf("renew %d: %v", i, err)
		}
	}
	got := p.Requests() - before
	// Per renewal: the multi, one read, the read that sets the leader's
	// watch on its znode again (the renewal's write fired it), and at
	// most one ping (every TTL/3); one more in all for a renewal the
	// loaded machine made late (the dense reads before it). The old reads
	// every 100ms made 62.
	t.Logf("%d requests over %d steady renewals", got, n)
	if got > 4*n+2 {
		t.Errorf("%d requests over %d renewals at %v: more than the renewal, two reads and one ping each", got, n, every)
	}
}

// TestFirstRenewalGap: a candidate that waited its turn through a
// follower was last counted by the ensemble's leader at one of its pings
// (every third of the session), not at its acquisition. Its first renewal,
// made at once, must not claim the whole timeout from there: cut off right
// after it, the follower relays nothing more, and a standby on the other
// side must not lead more than half a tick before the first deadline.
func TestFirstRenewalGap(t *testing.T) {
	const tick = 200 * time.Millisecond
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 3, Tick: tick, SyncLimit: 100})
	leader := z.Leader(t)
	follower := (leader + 1) % 3
	const ttl = 3 * time.Second
	for trial := 0; trial < 4; trial++ {
		key := fmt.Sprintf("%s-%d", lockertest.Key(t), trial)
		first := lockertest.MustAcquire(t, newLocker(t, []string{z.Addr(leader)}, key, func(c *Config) { c.TTL = ttl }))
		b := lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), newLocker(t, []string{z.Addr(follower)}, key, func(c *Config) { c.TTL = ttl }))
		// The waiter's pings fall at another phase each trial.
		time.Sleep(2*time.Second + time.Duration(trial)*ttl/12)
		lockertest.Release(first)
		r := <-b
		if r.Err != nil {
			t.Fatalf("trial %d: waiter: %v", trial, r.Err)
		}
		sent := time.Now()
		granted, err := renew(r.Lease, 2*time.Second)
		if err != nil {
			t.Fatalf("trial %d: first renewal: %v", trial, err)
		}
		z.Isolate(follower)
		s := <-lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), newLocker(t, []string{z.Addr(leader)}, key))
		if s.Err != nil {
			t.Fatalf("trial %d: standby: %v", trial, s.Err)
		}
		early := sent.Add(min(ttl, granted)).Sub(s.At)
		t.Logf("trial %d: granted %v; the standby led %v after the first renewal's send, %v before its deadline", trial, granted, s.At.Sub(sent), early)
		if early > tick/2 {
			t.Errorf("trial %d: the standby led %v before the first renewal's deadline, more than half a tick (%v)", trial, early, tick/2)
		}
		z.Heal(follower)
		z.WaitServing(t)
	}
}

// TestTimeoutShrunkOnReconnect: a reconnect to a server with a lower
// maxSessionTimeout (a rolling restart that lowers it) makes the ensemble
// count the shorter timeout from then on, which may end before a deadline
// already granted on the longer one. The lease must report the loss at
// once. The server's connect answer is handed to the session as its
// reader would on such a reconnect (test servers share one config).
func TestTimeoutShrunkOnReconnect(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	const ttl = 3 * time.Second
	l := lockertest.MustAcquire(t, newLocker(t, z.Addrs(), lockertest.Key(t), func(c *Config) { c.TTL = ttl }))
	if _, err := renew(l, 2*time.Second); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	s := l.(*lease).s
	s.mu.Lock()
	id, passwd := s.id, s.passwd
	s.mu.Unlock()
	s.granted(id, ttl/2, passwd, time.Now())
	testsupport.WaitFor(t, time.Second, "Lost after the session timeout shrank", func() bool { return testsupport.IsClosed(l.Lost()) })
	t.Logf("lost: %s", l.LostReason())
}

// TestTakeoverWithoutPingPeriod: a standby that waited its turn through a
// follower takes over from a released leader, and confirms its first
// renewal, in less than a ping period (tickTime/2): it counts the client's
// pings (pings.go) instead of reading and waiting for that read to be
// relayed. The first renewal still claims only what the pings prove.
// tickTime 1000ms keeps the ping period (550ms) clear of the machine's
// noise.
func TestTakeoverWithoutPingPeriod(t *testing.T) {
	const tick = time.Second
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 3, Tick: tick})
	leader := z.Leader(t)
	follower := (leader + 1) % 3
	const ttl = 6 * time.Second
	period := newRelayBound(tick, true).period
	for trial := 0; trial < 3; trial++ {
		key := fmt.Sprintf("%s-%d", lockertest.Key(t), trial)
		first := lockertest.MustAcquire(t, newLocker(t, []string{z.Addr(leader)}, key, func(c *Config) { c.TTL = ttl }))
		b := lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), newLocker(t, []string{z.Addr(follower)}, key, func(c *Config) { c.TTL = ttl }))
		// Long enough for the waiter's connect to be old, at another
		// phase of its pings (every 2s) each trial.
		time.Sleep(3*time.Second + time.Duration(trial)*700*time.Millisecond)
		released := time.Now()
		lockertest.Release(first)
		r := <-b
		if r.Err != nil {
			t.Fatalf("trial %d: waiter: %v", trial, r.Err)
		}
		granted, err := renew(r.Lease, 2*time.Second)
		if err != nil {
			t.Fatalf("trial %d: first renewal: %v", trial, err)
		}
		confirmed := time.Now()
		pings := r.Lease.(*lease).s.pingActivities()
		t.Logf("trial %d: led %v after the release, first renewal answered %v after it, granted %v; %d pings counted",
			trial, r.At.Sub(released), confirmed.Sub(released), granted, len(pings))
		if took := confirmed.Sub(released); took >= period {
			t.Errorf("trial %d: took %v from the release to the first renewal's answer, not less than a ping period (%v)", trial, took, period)
		}
		// What the pings prove: at most a ping interval and a period
		// (and the round trips) before the renewal, less the allowance.
		if least := ttl - ttl/3 - 2*period; granted < least {
			t.Errorf("trial %d: first renewal granted %v, less than %v", trial, granted, least)
		}
		lockertest.Release(r.Lease)
	}
}

// TestTakeoverThroughCutFollower: the follower a waiting standby talks to
// is cut off from the ensemble just as the standby wakes. It keeps
// answering the client's pings from its own state, but relays nothing
// more: those pings must not make a lease. Whatever the standby gets, no
// renewal of it succeeds while the follower is cut off.
func TestTakeoverThroughCutFollower(t *testing.T) {
	const tick = 200 * time.Millisecond
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 3, Tick: tick, SyncLimit: 100})
	leader := z.Leader(t)
	follower := (leader + 1) % 3
	const ttl = 3 * time.Second
	key := lockertest.Key(t)
	first := lockertest.MustAcquire(t, newLocker(t, []string{z.Addr(leader)}, key, func(c *Config) { c.TTL = ttl }))
	w := newLocker(t, []string{z.Addr(follower)}, key, func(c *Config) { c.TTL = ttl; c.DialTimeout = time.Second })
	w.onWake = func() { z.Isolate(follower) }
	b := lockertest.AcquireAsync(t, lockertest.Ctx(t, 10*time.Second), w)
	time.Sleep(2 * time.Second) // pings answered by the follower, relayed so far
	lockertest.Release(first)
	r := <-b
	if r.Err == nil {
		granted, err := renew(r.Lease, time.Second)
		if err == nil {
			t.Errorf("a lease through the cut-off follower renewed: granted %v", granted)
		}
		t.Logf("led, but the first renewal failed: %v", err)
	} else {
		t.Logf("no lease through the cut-off follower: %v", r.Err)
	}
	z.Heal(follower)
	z.WaitServing(t)
}

// TestPingsAfterReconnect: a reconnect to another server starts the
// count of pings over: none answered by the server left behind is
// counted, and the renewal after it counts from what the new connection
// proves.
func TestPingsAfterReconnect(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 3, SyncLimit: 100})
	leader := z.Leader(t)
	a, b := (leader+1)%3, (leader+2)%3
	const ttl = 3 * time.Second
	l := lockertest.MustAcquire(t, newLocker(t, []string{z.Addr(a), z.Addr(b)}, lockertest.Key(t), func(c *Config) { c.TTL = ttl }))
	s := l.(*lease).s
	testsupport.WaitFor(t, 5*time.Second, "two pings answered", func() bool { return len(s.pingActivities()) >= 2 })
	before := s.establishedAt()
	s.dropConn()
	testsupport.WaitFor(t, 5*time.Second, "a reconnect", func() bool {
		expired, disconnected, _, _ := s.state()
		return !expired && disconnected.IsZero() && s.establishedAt().After(before)
	})
	dialed := s.establishedAt()
	for _, p := range s.pingActivities() {
		if p.sent.Before(dialed) {
			t.Errorf("a ping sent %v before the reconnect's dial is still counted", dialed.Sub(p.sent))
		}
	}
	if _, err := renew(l, 2*time.Second); err != nil {
		t.Fatalf("renewal after the reconnect: %v", err)
	}
	lockertest.Release(l)
}
