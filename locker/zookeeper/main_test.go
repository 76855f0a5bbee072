package zookeeper

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/leaderrun/leaderrun/locker"
)

// TestMain fails the package when any goroutine outlives the tests: every
// Locker, Lease and connection is closed by then.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testPrefix = "lrtest"

// testTTL is two seconds: ten ticks of the test ensembles (200ms), well
// inside ZooKeeper's default session limits of 2 to 20 ticks.
const testTTL = 2 * time.Second

// keyFor turns a test name into a valid, unique leadership key.
func keyFor(t testing.TB) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
			return r
		}
		return '-'
	}, t.Name())
}

var ids atomic.Int64

// newLocker returns a Locker for key on servers with test defaults,
// adjusted by mods, closed when the test ends.
func newLocker(t testing.TB, servers []string, key string, mods ...func(*Config)) *Locker {
	t.Helper()
	cfg := Config{
		Options: locker.Options{
			Key: key, Prefix: testPrefix, ID: fmt.Sprintf("%s-%d", key, ids.Add(1)),
			TTL: testTTL, Version: "test",
		},
		Servers:     servers,
		DialTimeout: 3 * time.Second,
	}
	if os.Getenv("LEADERRUN_TEST_DEBUG") != "" {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: key, Level: hclog.Debug, Output: os.Stderr})
	}
	for _, m := range mods {
		m(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// rawConn is a plain go-zookeeper connection for poking at the ensemble.
func rawConn(t testing.TB, servers []string, auth string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(servers, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkLogger{hclog.NewNullLogger()}))
	if err != nil {
		t.Fatalf("zk connect: %v", err)
	}
	t.Cleanup(c.Close)
	if auth != "" {
		if err := c.AddAuth("digest", []byte(auth)); err != nil {
			t.Fatalf("add auth: %v", err)
		}
	}
	return c
}

// ctxFor returns a context that ends after d or with the test.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustAcquire acquires or fails the test; the lease is released at the end.
func mustAcquire(t testing.TB, l *Locker) locker.Lease {
	t.Helper()
	lease, err := l.Acquire(ctxFor(t, 20*time.Second))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { release(lease) })
	return lease
}

func release(lease locker.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	lease.Release(ctx)
}

type acquired struct {
	lease locker.Lease
	err   error
	at    time.Time
}

// acquireAsync runs Acquire in a goroutine; when the test ends, a waiting
// Acquire is cancelled and a lease it won released.
func acquireAsync(t testing.TB, ctx context.Context, l *Locker) <-chan acquired {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan acquired, 1)
	done := make(chan struct{})
	var won locker.Lease
	go func() {
		defer close(done)
		lease, err := l.Acquire(ctx)
		won = lease
		ch <- acquired{lease, err, time.Now()}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if won != nil {
			release(won)
		}
	})
	return ch
}

// eventually polls cond every 10ms until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// renew makes one renewal bounded by d.
func renew(lease locker.Lease, d time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return lease.Renew(ctx)
}

// deleteTree deletes p and everything below it.
func deleteTree(t testing.TB, c *zk.Conn, p string) {
	t.Helper()
	children, _, err := c.Children(p)
	if err == zk.ErrNoNode {
		return
	}
	if err != nil {
		t.Fatalf("children of %s: %v", p, err)
	}
	for _, ch := range children {
		deleteTree(t, c, p+"/"+ch)
	}
	if err := c.Delete(p, -1); err != nil && err != zk.ErrNoNode {
		t.Fatalf("delete %s: %v", p, err)
	}
}
