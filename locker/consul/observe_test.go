package consul

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// holderLoop renews ls the way the supervisor does (one attempt per
// interval, each bounded by a tenth of the TTL) and keeps the send time of
// the last successful renewal: the holder's deadline is that + TTL
// (DESIGN §1.2).
type holderLoop struct {
	mu     sync.Mutex
	lastOK time.Time
	oks    int
	stop   context.CancelFunc
	done   chan struct{}
}

func startHolder(ls *lease, interval time.Duration) *holderLoop {
	ctx, cancel := context.WithCancel(context.Background())
	h := &holderLoop{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			sent := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, MinTTL/10)
			_, err := ls.Renew(rctx)
			rcancel()
			if err == nil {
				h.mu.Lock()
				h.lastOK, h.oks = sent, h.oks+1
				h.mu.Unlock()
			}
			if errors.Is(err, locker.ErrLost) || !retry.Sleep(ctx, interval) {
				return
			}
		}
	}()
	return h
}

func (h *holderLoop) last() (time.Time, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastOK, h.oks
}

func (h *holderLoop) halt() {
	h.stop()
	<-h.done
}

// TestObserverTakeover: a holder whose heartbeat writes fail while its
// session is renewed (and one whose session renewals fail) is taken over by
// a standby about one TTL after its last successful renewal, never before
// that renewal's send time + TTL, when the holder's job is dead. With the
// session alive, Consul alone would never free the key.
func TestObserverTakeover(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.ConsulOptions{Servers: 1})
	for _, tc := range []struct{ name, fail string }{
		{"HeartbeatFails", "/v1/txn"},
		{"SessionRenewalFails", "/v1/session/renew/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testTakeover(t, c, tc.fail)
		})
	}
}

func testTakeover(t *testing.T, c *cluster, fail string) {
	proxy := testsupport.NewFaultyHTTP(t, c.HTTPAddr(0))
	key := "takeover" + strings.ReplaceAll(fail, "/", "-")
	a := c.locker(t, key, proxy.Addr, func(cfg *Config) { cfg.LockDelay = MinTTL })
	b := c.locker(t, key, c.HTTPAddr(0), func(cfg *Config) { cfg.LockDelay = MinTTL })
	la := acquire(t, a)
	h := startHolder(la, 2*time.Second)
	defer h.halt()

	type result struct {
		ls  locker.Lease
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*MinTTL)
	defer cancel()
	go func() {
		ls, err := b.Acquire(ctx)
		done <- result{ls, err, time.Now()}
	}()
	// Let the standby watch a few heartbeats: none may lead to a takeover.
	waitFor(t, 15*time.Second, "three successful renewals", func() bool { _, n := h.last(); return n >= 3 })
	select {
	case r := <-done:
		t.Fatalf("the standby acquired while the holder renewed: %v %v", r.ls, r.err)
	default:
	}

	proxy.FailPrefix(fail)
	cut := time.Now()
	r := <-done
	if r.err != nil {
		t.Fatalf("standby Acquire: %v", r.err)
	}
	lb := r.ls.(*lease)
	defer release(t, lb)
	lastOK, _ := h.last()
	deadline := lastOK.Add(MinTTL)
	t.Logf("fault %s: standby took over %v after the cut, %v after the holder's deadline (epochs %d -> %d)",
		fail, r.at.Sub(cut).Round(time.Millisecond), r.at.Sub(deadline).Round(time.Millisecond), la.Epoch(), lb.Epoch())
	if !r.at.After(deadline) {
		t.Fatalf("standby took over at %v, before the holder's deadline %v (last successful renewal sent %v)",
			r.at.Format(time.StampMilli), deadline.Format(time.StampMilli), lastOK.Format(time.StampMilli))
	}
	if limit := deadline.Add(observe.Allowance(MinTTL) + 3*time.Second); r.at.After(limit) {
		t.Errorf("standby took over %v after the holder's deadline; want about the allowance (%v)", r.at.Sub(deadline), observe.Allowance(MinTTL))
	}
	if lb.Epoch() <= la.Epoch() {
		t.Errorf("epoch %d after %d: not increasing", lb.Epoch(), la.Epoch())
	}

	// The old holder learns it lost, and never renews again.
	h.halt()
	proxy.FailPrefix("")
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	if _, err := la.Renew(rctx); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("old holder's Renew after the takeover: %v, want ErrLost", err)
	}
	waitLost(t, la, time.Now(), 5*time.Second)
	hold, err := b.Leader(rctx)
	if err != nil || hold.Epoch != lb.Epoch() {
		t.Fatalf("Leader after the takeover: %+v, %v; want epoch %d", hold, err, lb.Epoch())
	}
	_ = la.Release(rctx)
}

// TestAmbiguousAcquireGivesKeyBack: an acquire that Consul applied but
// whose answer was lost makes Acquire fail; the key must be given back
// before the session is destroyed, or Consul's lock-delay (here the TTL)
// would keep our own next attempt, and everyone else, out.
func TestAmbiguousAcquireGivesKeyBack(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.ConsulOptions{Servers: 1})
	u, err := url.Parse("http://" + c.HTTPAddr(0))
	if err != nil {
		t.Fatal(err)
	}
	var swallow atomic.Bool
	swallow.Store(true)
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/txn" && swallow.Load() {
			// Apply the transaction, lose the answer.
			rp.ServeHTTP(httptest.NewRecorder(), r)
			http.Error(w, "injected fault after forwarding", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer srv.Close()

	set := func(cfg *Config) { cfg.LockDelay = MinTTL }
	a := c.locker(t, "ambiguous", strings.TrimPrefix(srv.URL, "http://"), set)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	ls, err := a.Acquire(ctx)
	cancel()
	if err == nil {
		ls.Release(context.Background())
		t.Fatal("Acquire succeeded though its answer was lost")
	}
	t.Logf("ambiguous acquire: %v", err)
	swallow.Store(false)

	b := c.locker(t, "ambiguous", c.HTTPAddr(0), set)
	start := time.Now()
	lb := acquire(t, b)
	defer release(t, lb)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the next acquire took %v: the key sat in its lock-delay", took)
	}
}

// TestServerRefusesSessionSetup: settings the servers will never accept
// are configuration errors, refused at once and naming the setting, not
// failures retried forever.
func TestServerRefusesSessionSetup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		opts   testcluster.ConsulOptions
		change func(*Config)
		field  string
	}{
		{"session_ttl_min above the TTL", testcluster.ConsulOptions{Servers: 1, SessionTTLMin: "20s"}, func(*Config) {}, "TTL"},
		{"unknown datacenter", testcluster.ConsulOptions{Servers: 1}, func(c *Config) { c.Datacenter = "dc9" }, "Datacenter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, tt.opts)
			l := c.locker(t, "refused", c.HTTPAddr(0), tt.change)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := l.Acquire(ctx)
			var ce *locker.ConfigError
			if !errors.Is(err, locker.ErrRefused) || !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("Acquire: %v; want a ConfigError on %s", err, tt.field)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}
