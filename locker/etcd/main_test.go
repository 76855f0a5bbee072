package etcd

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/leaderrun/leaderrun/internal/testsupport"
	"github.com/leaderrun/leaderrun/locker"
)

// TestMain fails the package when any goroutine outlives the tests: every
// Locker, Lease and client is closed by then.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testPrefix namespaces the tests' keys.
const testPrefix = "lrtest"

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

var candidates atomic.Int64

// newLocker returns a Locker for key on endpoints with test defaults (TTL 5s,
// dial timeout 2s), adjusted by mods, closed when the test ends.
func newLocker(t testing.TB, endpoints []string, key string, mods ...func(*Config)) *Locker {
	t.Helper()
	cfg := Config{
		Options: locker.Options{
			Key:     key,
			Prefix:  testPrefix,
			ID:      fmt.Sprintf("%s-%d", key, candidates.Add(1)),
			TTL:     5 * time.Second,
			Version: "test",
		},
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
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

// rawClient is a plain etcd client for poking at the cluster by hand.
func rawClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
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
	lease, err := l.Acquire(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { release(lease) })
	return lease
}

// release releases lease with a 2s bound, ignoring errors; for cleanups.
func release(lease locker.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	lease.Release(ctx)
}

// acquired is the outcome of an Acquire run in the background.
type acquired struct {
	lease locker.Lease
	err   error
	at    time.Time
}

// acquireAsync runs Acquire in a goroutine; the result arrives on the
// channel. When the test ends, a still waiting Acquire is cancelled and a
// lease it won is released.
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

// eventually polls cond until it holds or d passes.
var eventually = testsupport.WaitFor

// candidateKeys lists the election keys of key in CreateRevision order.
func candidateKeys(t testing.TB, cli *clientv3.Client, l *Locker) []string {
	t.Helper()
	resp, err := cli.Get(ctxFor(t, 5*time.Second), l.dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("list candidates: %v", err)
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	return keys
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
