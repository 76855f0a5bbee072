package postgres

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestMain runs every test on one server (testcluster.SharedPostgres),
// stops it at the end, and fails the package when any goroutine outlives
// the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	testcluster.StopSharedPostgres()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var candidates atomic.Int64

// newLocker returns a Locker for key on dsn with test defaults (TTL 2s),
// adjusted by mods, closed when the test ends.
func newLocker(t testing.TB, dsn, key string, mods ...func(*Config)) *leaserow.Locker {
	t.Helper()
	cfg := Config{
		Options: locker.Options{Key: key, Prefix: "lrtest", ID: fmt.Sprintf("%s-%d", key, candidates.Add(1)),
			TTL: 2 * time.Second, Version: "test"},
		DSN:            dsn,
		ConnectTimeout: 2 * time.Second,
		Logger:         lockertest.DebugLogger(key),
	}
	cfg.Options.Key, cfg.Options.Slot = lockertest.KeySlot(key)
	return lockertest.Open(t, New, cfg, mods...)
}
