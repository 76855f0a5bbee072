package zookeeper

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestSafetyMarginWarning: on an ensemble with the usual tickTime of 2s, the
// default safety margin of 1s is not above tickTime/2 and the first
// campaign warns, naming the flag; 1.5s is enough and says nothing. The
// tickTime is learnt from the granted session timeout when the TTL is below
// two ticks (3s), and from a probe session otherwise (6s).
func TestSafetyMarginWarning(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Tick: 2 * time.Second})
	servers := z.Addrs()

	minTimeout, err := zkwire.MinSessionTimeout(lockertest.Ctx(t, 5*time.Second), servers[0])
	if err != nil || minTimeout != 4*time.Second {
		t.Fatalf("MinSessionTimeout = %v, %v; want 4s (two ticks)", minTimeout, err)
	}

	for _, tc := range []struct {
		ttl, margin time.Duration
		warn        bool
	}{
		{6 * time.Second, time.Second, true},
		{6 * time.Second, 1500 * time.Millisecond, false},
		{3 * time.Second, time.Second, true},
		{3 * time.Second, 1500 * time.Millisecond, false},
	} {
		t.Run(tc.ttl.String()+"/"+tc.margin.String(), func(t *testing.T) {
			var out testsupport.SyncBuffer
			l := newLocker(t, servers, lockertest.Key(t), func(c *Config) {
				c.TTL, c.SafetyMargin = tc.ttl, tc.margin
				c.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &out})
			})
			lockertest.Release(lockertest.MustAcquire(t, l))
			warned := strings.Contains(out.String(), "--safety-margin")
			if warned != tc.warn {
				t.Fatalf("TTL %v, margin %v: warned %v, want %v; log:\n%s", tc.ttl, tc.margin, warned, tc.warn, out.String())
			}
			if warned && !strings.Contains(out.String(), "tick_time=2s") {
				t.Errorf("the warning does not give the tickTime it inferred:\n%s", out.String())
			}
		})
	}
}
