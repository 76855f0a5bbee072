package etcd

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

// TestMain fails the package when any goroutine outlives the tests: every
// Locker, Lease and client is closed by then.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testPrefix namespaces the tests' keys.
const testPrefix = "lrtest"

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
	cfg.Options.Key, cfg.Options.Slot = lockertest.KeySlot(key)
	cfg.Logger = lockertest.DebugLogger(key)
	return lockertest.Open(t, New, cfg, mods...)
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

// candidateKeys lists the election keys of key in CreateRevision order.
func candidateKeys(t testing.TB, cli *clientv3.Client, l *Locker) []string {
	t.Helper()
	resp, err := cli.Get(lockertest.Ctx(t, 5*time.Second), l.dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("list candidates: %v", err)
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	return keys
}
