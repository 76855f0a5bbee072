package kubernetes

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/internal/testcluster"
	"github.com/leaderrun/leaderrun/locker"
)

// testNamespace holds the tests' Leases.
const testNamespace = "default"

// server is one kube-apiserver (on its own etcd) shared by a test's
// subtests.
type server struct {
	kube  *testcluster.Kube
	etcd  *testcluster.Etcd
	admin string // kubeconfig of testcluster.KubeAdmin
}

func startServer(t *testing.T, users ...testcluster.KubeUser) *server {
	t.Helper()
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e, users...)
	return &server{kube: k, etcd: e, admin: k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")}
}

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

// newLocker returns a Locker for key with test defaults (TTL 2s, admin
// credentials, namespace default), adjusted by mods.
func (s *server) newLocker(t testing.TB, key string, mods ...func(*Config)) *Locker {
	t.Helper()
	cfg := Config{
		Options: locker.Options{
			Key:     key,
			ID:      fmt.Sprintf("%s-%d", key, candidates.Add(1)),
			TTL:     2 * time.Second,
			Version: "test",
		},
		Kubeconfig: s.admin,
		Namespace:  testNamespace,
		Timeout:    5 * time.Second,
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

// ctxFor returns a context that ends after d or with the test.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustAcquire acquires and confirms (the supervisor's first renewal), or
// fails the test; the lease is released at the end.
func mustAcquire(t testing.TB, l *Locker) locker.Lease {
	t.Helper()
	lease, err := l.Acquire(ctxFor(t, 20*time.Second))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { release(lease) })
	if _, err := lease.Renew(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatalf("first Renew: %v", err)
	}
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
