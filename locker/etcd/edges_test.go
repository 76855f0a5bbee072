package etcd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// A waiting candidate whose caller gives up ends within 1s (DESIGN §3),
// even when etcd cannot be reached to revoke its lease.
func TestWithdrawWhileUnreachable(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	holder := newLocker(t, e.Endpoints(), lockertest.Key(t))
	lockertest.MustAcquire(t, holder)
	waiter := newLocker(t, e.Endpoints(), lockertest.Key(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := lockertest.AcquireAsync(t, ctx, waiter)
	cli := rawClient(t, e.Endpoints())
	testsupport.WaitFor(t, 10*time.Second, "the waiter's election key", func() bool { return len(candidateKeys(t, cli, waiter)) == 2 })

	e.Kill(0)
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	cancel()
	r := <-ch
	took := time.Since(start)
	t.Logf("cancelled wait with etcd down: %v after %v", r.Err, took)
	if !errors.Is(r.Err, context.Canceled) {
		t.Errorf("Acquire = %v, want context.Canceled", r.Err)
	}
	if took > time.Second {
		t.Fatalf("a cancelled wait took %v with etcd unreachable, want within 1s", took)
	}
}

// A holder whose election key is detached from its lease by hand (a put
// without --lease) no longer has a key that expires with its lease: that
// is lost leadership.
func TestKeyDetachedFromLeaseIsLost(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	l := newLocker(t, e.Endpoints(), lockertest.Key(t))
	lease := lockertest.MustAcquire(t, l)
	cli := rawClient(t, e.Endpoints())
	keys := candidateKeys(t, cli, l)
	if len(keys) != 1 {
		t.Fatalf("election keys %v", keys)
	}
	if _, err := cli.Put(lockertest.Ctx(t, 5*time.Second), keys[0], "by hand"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Lost():
		t.Logf("lost: %s", lease.LostReason())
	case <-time.After(5 * time.Second):
		t.Fatal("Lost not closed after the election key was detached from its lease")
	}
	if _, err := lease.Renew(lockertest.Ctx(t, time.Second)); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew after the key was detached: %v, want ErrLost", err)
	}
}

// status and check never name a holder whose lease etcd no longer counts
// as alive (TimeToLive <= 0): its key goes with the lease any moment.
func TestLeaderIgnoresExpiringLease(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	l := newLocker(t, e.Endpoints(), lockertest.Key(t))
	cli := rawClient(t, e.Endpoints())
	// A holder that stopped renewing: a lease of 2s and its election key.
	grant, err := cli.Grant(lockertest.Ctx(t, 5*time.Second), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(lockertest.Ctx(t, 5*time.Second), l.dir+"dead", string(locker.NewHolder(l.opts).Record()), clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		h, err := l.Leader(lockertest.Ctx(t, 2*time.Second))
		switch {
		case errors.Is(err, locker.ErrNoLeader):
		case err != nil:
			t.Fatalf("Leader: %v", err)
		case h.LeaseRemaining <= 0:
			t.Fatalf("Leader names %s (epoch %d) whose lease has %v left", h.ID, h.Epoch, h.LeaseRemaining)
		}
	}
}

// A waiting candidate whose renewals fail for more than two renewal
// intervals, yet less than its TTL, keeps its lease: it retries quickly
// instead of once per interval, which would find the lease gone.
func TestWaiterRidesOutShortOutage(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	holder := newLocker(t, e.Endpoints(), lockertest.Key(t))
	held := lockertest.MustAcquire(t, holder)
	renewing, stop := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	defer func() { stop(); <-renewed }()
	go func() {
		defer close(renewed)
		for retry.Sleep(renewing, time.Second) {
			rctx, cancel := context.WithTimeout(renewing, time.Second)
			_, _ = held.Renew(rctx)
			cancel()
		}
	}()
	proxy, err := chaos.NewProxy(strings.TrimPrefix(e.Endpoints()[0], "http://"), chaos.HTTP2)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	waiter := newLocker(t, []string{proxy.Addr()}, lockertest.Key(t))
	ch := lockertest.AcquireAsync(t, context.Background(), waiter)
	cli := rawClient(t, e.Endpoints())
	testsupport.WaitFor(t, 10*time.Second, "the waiter's election key", func() bool { return len(candidateKeys(t, cli, waiter)) == 2 })

	// Cut right after a renewal went through: the lease then has a TTL
	// (5s) left, and the outage (2.2s) spans a renewal interval (1.67s).
	// A longer outage (3.6s, once) made the test race the client's
	// reconnect backoff (gRPC's default: 1s, then 1.6 times as long each
	// time, ±20%) instead of the lease: 1 run in 7 failed under load.
	out, _ := proxy.Bytes()
	testsupport.WaitFor(t, 5*time.Second, "a renewal through the proxy", func() bool { o, _ := proxy.Bytes(); return o > out })
	proxy.Cut(chaos.Blackhole)
	time.Sleep(2200 * time.Millisecond)
	proxy.Heal()
	time.Sleep(3 * time.Second)
	select {
	case r := <-ch:
		t.Fatalf("the waiter's Acquire ended: %v", r.Err)
	default:
	}
	if keys := candidateKeys(t, cli, waiter); len(keys) != 2 {
		t.Fatalf("election keys after the outage: %v; the waiter's lease lapsed", keys)
	}
}

// With JWT auth tokens, etcd checks the token of a keep-alive stream on
// every renewal; once it expires, a renewal on the old stream is refused as
// an invalid token. Renew then opens a new stream (which authenticates
// again) within the same call: no renewal fails because a token expired.
func TestKeepAliveSurvivesTokenExpiry(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	priv, pubPath := filepath.Join(dir, "jwt.key"), filepath.Join(dir, "jwt.pub")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		t.Fatal(err)
	}
	e := testcluster.StartEtcdWith(t, 1, "--auth-token", "jwt,pub-key="+pubPath+",priv-key="+priv+",sign-method=ES256,ttl=2s")
	eps := e.Endpoints()
	cli := rawClient(t, eps)
	ctx := lockertest.Ctx(t, 10*time.Second)
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", secret); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("set up auth: %v", err)
		}
	}
	l := newLocker(t, eps, lockertest.Key(t), func(c *Config) { c.Username, c.Password = "root", secret })
	lease := lockertest.MustAcquire(t, l)
	for i := 0; i < 8; i++ { // 8 x 700ms: past the 2s token TTL, twice
		if _, err := lease.Renew(lockertest.Ctx(t, time.Second)); err != nil {
			t.Fatalf("renewal %d failed: %v", i, err)
		}
		time.Sleep(700 * time.Millisecond)
	}
}
