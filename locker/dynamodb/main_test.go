package dynamodb

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestMain runs every test on one dynalite (testcluster.SharedDynalite)
// with fake credentials, stops it at the end, and fails the package when
// any goroutine outlives the tests.
func TestMain(m *testing.M) {
	for _, kv := range fakeAWS {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	code := m.Run()
	testcluster.StopSharedDynalite()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fakeAWS are credentials and a region no AWS account has: dynalite checks
// no signature, and no real profile or instance role is ever asked.
var fakeAWS = (&testcluster.Dynalite{}).Env()

var candidates atomic.Int64

// newLocker returns a Locker for key on the server at endpoint with test
// defaults (TTL 2s), adjusted by mods, closed when the test ends.
func newLocker(t testing.TB, endpoint, key string, mods ...func(*Config)) *leaserow.Locker {
	t.Helper()
	return lockertest.Open(t, New, lockerConfig(endpoint, key), mods...)
}

// lockerConfig is newLocker's Config: a candidate of its own for key.
func lockerConfig(endpoint, key string) Config {
	k, slot := lockertest.KeySlot(key)
	return Config{
		Options: locker.Options{Key: k, Slot: slot, Prefix: "lrtest", ID: fmt.Sprintf("%s-%d", key, candidates.Add(1)),
			TTL: 2 * time.Second, Version: "test"},
		Endpoint:    endpoint,
		CreateTable: true,
		Timeout:     2 * time.Second,
		Logger:      lockertest.DebugLogger(key),
	}
}
