//go:build linux

package supervise

import (
	"testing"
	"time"
)

// TestRerace: with Rerace, a lost term and --on-lost rejoin make Run
// return ExitRerace once the job is gone and the lease given back, and it
// does not campaign for the same key again: a second lease stays unused.
func TestRerace(t *testing.T) {
	first, second := newTestLease(1, 15*time.Second), newTestLease(2, 15*time.Second)
	var lk *testLocker
	clock, rec, done := harness(t, "exec sleep 1000", first, func(c *Config) {
		c.OnLost, c.Rerace = LostRejoin, true
		lk = c.Locker.(*testLocker)
	})
	clock.Settle(t)
	lk.leases <- second
	first.markLost()
	var code int
	deadline := time.Now().Add(10 * time.Second)
	for code == 0 {
		select {
		case code = <-done:
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("Run did not return after the loss (%d starts)", rec.count("started"))
			}
			clock.Advance(100 * time.Millisecond)
		}
	}
	if code != ExitRerace {
		t.Fatalf("Run returned %d after a loss, want ExitRerace", code)
	}
	select {
	case <-first.released:
	default:
		t.Error("the lost lease was not given back before Run returned")
	}
	if len(lk.leases) != 1 || rec.count("started") != 1 {
		t.Errorf("campaigned for the same key again (%d leases left, %d starts)", len(lk.leases), rec.count("started"))
	}
}
