package zookeeper

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
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
	cfg.Options.Key, cfg.Options.Slot = lockertest.KeySlot(key)
	cfg.Logger = lockertest.DebugLogger(key)
	return lockertest.Open(t, New, cfg, mods...)
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
