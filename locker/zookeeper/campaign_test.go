package zookeeper

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestCampaign runs the single-server behaviour against one real server.
func TestCampaign(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	servers := z.Addrs()

	t.Run("HandOverWithHigherEpoch", func(t *testing.T) {
		key := lockertest.Key(t)
		a, b := newLocker(t, servers, key), newLocker(t, servers, key)
		la := lockertest.MustAcquire(t, a)
		// Counted from the session's connect, not from the renewal's send
		// (relay.go): a little under the negotiated timeout, never over.
		if d, err := renew(la, 5*time.Second); err != nil || d <= 0 || d > testTTL {
			t.Fatalf("Renew = %v, %v; want at most the negotiated %v", d, err, testTTL)
		}
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), b)
		select {
		case r := <-ch:
			t.Fatalf("second candidate acquired while the first leads: %v", r.Err)
		case <-time.After(500 * time.Millisecond):
		}
		h, err := a.Leader(lockertest.Ctx(t, 5*time.Second))
		if err != nil || h.ID != a.opts.ID || h.Epoch != la.Epoch() {
			t.Fatalf("Leader = %+v, %v; want %s at epoch %d", h, err, a.opts.ID, la.Epoch())
		}
		released := time.Now()
		lockertest.Release(la)
		r := <-ch
		if r.Err != nil {
			t.Fatalf("second Acquire: %v", r.Err)
		}
		if r.Lease.Epoch() <= la.Epoch() {
			t.Fatalf("epoch went from %d to %d; want it to grow", la.Epoch(), r.Lease.Epoch())
		}
		t.Logf("hand-over took %v", r.At.Sub(released))
		if testsupport.IsClosed(r.Lease.Lost()) {
			t.Fatalf("new lease lost at once: %s", r.Lease.LostReason())
		}
	})

	// A single attempt while held names the holder (the rest of NoWait is
	// lockertest.LockContract's).
	t.Run("NoWaitNamesTheHolder", func(t *testing.T) {
		key := lockertest.Key(t)
		a := newLocker(t, servers, key)
		lockertest.MustAcquire(t, a)
		b := newLocker(t, servers, key, func(c *Config) { c.NoWait = true })
		_, err := b.Acquire(lockertest.Ctx(t, 10*time.Second))
		if !errors.Is(err, locker.ErrHeld) || !strings.Contains(err.Error(), a.opts.ID) {
			t.Fatalf("NoWait Acquire = %v; want ErrHeld naming %s", err, a.opts.ID)
		}
	})

	t.Run("CancelWhileWaiting", func(t *testing.T) {
		key := lockertest.Key(t)
		a, b := newLocker(t, servers, key), newLocker(t, servers, key)
		la := lockertest.MustAcquire(t, a)
		ctx, cancel := context.WithCancel(context.Background())
		ch := lockertest.AcquireAsync(t, ctx, b)
		time.Sleep(300 * time.Millisecond)
		cancelled := time.Now()
		cancel()
		r := <-ch
		if !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("cancelled Acquire = %v", r.Err)
		}
		// Withdrawing closes the session: one round trip, which
		// go-zookeeper bounds at a second.
		if d := r.At.Sub(cancelled); d > 2*time.Second {
			t.Fatalf("cancelled Acquire returned after %v", d)
		}
		// The withdrawn candidate left no znode behind.
		c := rawConn(t, servers, "")
		names, _, err := c.Children(a.dir)
		if err != nil || len(candidates(names)) != 1 {
			t.Fatalf("candidates after cancel: %v, %v; want only the leader's", names, err)
		}
		if _, err := renew(la, 5*time.Second); err != nil {
			t.Fatalf("leader's Renew: %v", err)
		}
	})

	t.Run("KeyPathDeleted", func(t *testing.T) {
		key := lockertest.Key(t)
		a := newLocker(t, servers, key)
		la := lockertest.MustAcquire(t, a)
		c := rawConn(t, servers, "")
		deleteTree(t, c, "/"+testPrefix)
		testsupport.WaitFor(t, 10*time.Second, "Lost after the key path was deleted", func() bool { return testsupport.IsClosed(la.Lost()) })
		if _, err := renew(la, 5*time.Second); !errors.Is(err, locker.ErrLost) {
			t.Fatalf("Renew after delete = %v; want ErrLost", err)
		}
		// The path is created again, and the epoch still grows (§1.1).
		lb := lockertest.MustAcquire(t, newLocker(t, servers, key))
		if lb.Epoch() <= la.Epoch() {
			t.Fatalf("epoch %d after the path was deleted, was %d; want it to grow", lb.Epoch(), la.Epoch())
		}
	})

	t.Run("SessionExpiredByForce", func(t *testing.T) {
		key := lockertest.Key(t)
		a, b := newLocker(t, servers, key), newLocker(t, servers, key)
		la := lockertest.MustAcquire(t, a)
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), b)
		// Another process ends the session with its id and password, as
		// the guard does.
		if err := b.ReleaseHandle(lockertest.Ctx(t, 5*time.Second), la.Handle()); err != nil {
			t.Fatalf("ReleaseHandle: %v", err)
		}
		r := <-ch
		if r.Err != nil || r.Lease.Epoch() <= la.Epoch() {
			t.Fatalf("standby after ReleaseHandle: %v (epoch %v)", r.Err, r.Lease)
		}
		testsupport.WaitFor(t, 10*time.Second, "old lease notices its session ended", func() bool { return testsupport.IsClosed(la.Lost()) })
		if _, err := renew(la, 5*time.Second); !errors.Is(err, locker.ErrLost) {
			t.Fatalf("Renew on an ended session = %v; want ErrLost", err)
		}
		// Releasing again is not an error.
		if err := b.ReleaseHandle(lockertest.Ctx(t, 5*time.Second), la.Handle()); err != nil {
			t.Fatalf("second ReleaseHandle: %v", err)
		}
		if err := b.ReleaseHandle(lockertest.Ctx(t, 5*time.Second), "1:00:/elsewhere/@x"); !errors.Is(err, locker.ErrRefused) {
			t.Fatalf("foreign handle = %v; want ErrRefused", err)
		}
	})

	t.Run("PredecessorOnlyWakeUp", func(t *testing.T) {
		key := lockertest.Key(t)
		lead := newLocker(t, servers, key)
		ll := lockertest.MustAcquire(t, lead)
		var wakes atomic.Int64
		var chans []<-chan lockertest.Acquired
		for i := 0; i < 4; i++ {
			w := newLocker(t, servers, key)
			w.onWake = func() { wakes.Add(1) }
			chans = append(chans, lockertest.AcquireAsync(t, lockertest.Ctx(t, 60*time.Second), w))
			time.Sleep(100 * time.Millisecond) // a fixed queue order
		}
		time.Sleep(300 * time.Millisecond)
		last := ll
		for i, ch := range chans {
			lockertest.Release(last)
			r := <-ch
			if r.Err != nil {
				t.Fatalf("waiter %d: %v", i, r.Err)
			}
			if r.Lease.Epoch() <= last.Epoch() {
				t.Fatalf("waiter %d epoch %d after %d", i, r.Lease.Epoch(), last.Epoch())
			}
			last = r.Lease
		}
		lockertest.Release(last)
		if n := wakes.Load(); n != 4 {
			t.Fatalf("%d wake-ups for 4 hand-overs; each release must wake one waiter", n)
		}
	})

	t.Run("LeaderWithoutCandidates", func(t *testing.T) {
		_, err := newLocker(t, servers, lockertest.Key(t)).Leader(lockertest.Ctx(t, 5*time.Second))
		if !errors.Is(err, locker.ErrNoLeader) {
			t.Fatalf("Leader of an unused key = %v; want ErrNoLeader", err)
		}
	})

	t.Run("TTLAboveMaxSession", func(t *testing.T) {
		l := newLocker(t, servers, lockertest.Key(t), func(c *Config) { c.TTL = time.Minute })
		_, err := l.Acquire(lockertest.Ctx(t, 10*time.Second))
		var ce *locker.ConfigError
		if !errors.As(err, &ce) || ce.Field != "TTL" || !strings.Contains(ce.Rule, "4s") {
			t.Fatalf("Acquire with a TTL over 20 ticks = %v; want a TTL ConfigError naming 4s", err)
		}
	})

	t.Run("TTLBelowMinSession", func(t *testing.T) {
		// A 400ms session may expire on a loaded machine before the
		// renewal: the TTL is what is checked, so a session lost is tried
		// again; any renewal that succeeds must give 400ms.
		var errs []error
		for range 3 {
			l := newLocker(t, servers, lockertest.Key(t), func(c *Config) { c.TTL = 100 * time.Millisecond })
			lease, err := l.Acquire(lockertest.Ctx(t, 10*time.Second))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			d, err := renew(lease, 5*time.Second)
			lockertest.Release(lease)
			if err == nil {
				if d != 400*time.Millisecond {
					t.Fatalf("Renew = %v; want the 2-tick minimum, 400ms", d)
				}
				return
			}
			errs = append(errs, err)
		}
		t.Fatalf("no renewal of a 100ms-TTL lease succeeded in 3 tries: %v", errs)
	})

	t.Run("Unreachable", func(t *testing.T) {
		l := newLocker(t, []string{"127.0.0.1:1"}, lockertest.Key(t), func(c *Config) { c.DialTimeout = 500 * time.Millisecond })
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := l.Acquire(ctx)
		if err == nil || errors.Is(err, locker.ErrRefused) {
			t.Fatalf("Acquire on an unreachable server = %v; want a retryable error", err)
		}
	})
}

func TestAuth(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	servers := z.Addrs()
	key := lockertest.Key(t)
	const good, bad = "alice:s3cret-good", "alice:s3cret-wrong"
	a := newLocker(t, servers, key, func(c *Config) { c.Auth = good })
	la := lockertest.MustAcquire(t, a)

	// The znodes are the creator's only.
	c := rawConn(t, servers, "")
	if _, _, err := c.Get(a.dir); err == nil {
		t.Fatal("an unauthenticated client reads the key's znode")
	}
	acl, _, err := rawConn(t, servers, good).GetACL(a.dir)
	if err != nil || len(acl) != 1 || acl[0].Scheme != "digest" || !strings.HasPrefix(acl[0].ID, "alice:") {
		t.Fatalf("ACL of %s = %+v, %v; want digest alice only", a.dir, acl, err)
	}

	for _, auth := range []string{bad, ""} {
		b := newLocker(t, servers, key, func(c *Config) { c.Auth = auth })
		_, err := b.Acquire(lockertest.Ctx(t, 10*time.Second))
		if !errors.Is(err, locker.ErrRefused) {
			t.Fatalf("Acquire with auth %q = %v; want ErrRefused", auth, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("error shows the password: %v", err)
		}
		if _, err := b.Leader(lockertest.Ctx(t, 5*time.Second)); !errors.Is(err, locker.ErrRefused) {
			t.Fatalf("Leader with auth %q = %v; want ErrRefused", auth, err)
		}
	}
	if _, err := renew(la, 5*time.Second); err != nil {
		t.Fatalf("Renew with auth: %v", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	base := Config{Options: locker.Options{Key: "k", TTL: time.Second}}
	cases := []struct {
		name  string
		mod   func(*Config)
		field string
	}{
		{"bad key", func(c *Config) { c.Key = "../x" }, "Key"},
		{"zero ttl", func(c *Config) { c.TTL = 0 }, "TTL"},
		{"no port", func(c *Config) { c.Servers = []string{"zk1"} }, "Servers"},
		{"bad port", func(c *Config) { c.Servers = []string{"zk1:99999"} }, "Servers"},
		{"chroot in the middle", func(c *Config) { c.Servers = []string{"zk1:2181/a,zk2:2181"} }, "Servers"},
		{"chroot twice", func(c *Config) { c.Servers = []string{"zk1:2181/a"}; c.Chroot = "/b" }, "Chroot"},
		{"relative chroot", func(c *Config) { c.Chroot = "apps" }, "Chroot"},
		{"chroot with ..", func(c *Config) { c.Chroot = "/a/../b" }, "Chroot"},
		{"auth without password", func(c *Config) { c.Auth = "alice" }, "Auth"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mod(&cfg)
			_, err := New(cfg)
			var ce *locker.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, locker.ErrRefused) {
				t.Fatalf("New = %v; want a ConfigError on %s", err, tc.field)
			}
		})
	}
	l, err := New(Config{Options: locker.Options{Key: "k", TTL: time.Second}, Servers: []string{"zk1:2181,zk2:2181/apps/prod"}})
	if err != nil || l.dir != "/apps/prod/leaderrun/k" || len(l.servers) != 2 {
		t.Fatalf("connect string with chroot: %v, dir %q, servers %v", err, l.dir, l.servers)
	}
}

func TestParseConnectResponse(t *testing.T) {
	// length 28: version 0, timeout 4000ms, session 0x1234, 8-byte password.
	b := []byte{0, 0, 0, 28, 0, 0, 0, 0, 0, 0, 0x0f, 0xa0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8}
	id, timeout, passwd, ok := parseConnectResponse(b)
	if !ok || id != 0x1234 || timeout != 4*time.Second || len(passwd) != 8 {
		t.Fatalf("parse = %x %v %x %v", id, timeout, passwd, ok)
	}
	if _, _, _, ok := parseConnectResponse(b[:20]); ok {
		t.Fatal("a partial response parsed")
	}
}
