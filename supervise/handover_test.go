//go:build linux

package supervise

import (
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// TestHandoverWindow: a preemption keeps the key for 2×TTL + kill-grace,
// at least 10s, and never beyond the bound every reader holds a
// step-down to (a window past it would be void to them).
func TestHandoverWindow(t *testing.T) {
	for _, c := range []struct {
		ttl, grace, want time.Duration
	}{
		{time.Second, time.Second, 10 * time.Second},
		{15 * time.Second, 10 * time.Second, 40 * time.Second},
		{24 * time.Hour, 10 * time.Second, locker.MaxReservation},
	} {
		s := &Supervisor{cfg: Config{TTL: c.ttl, KillGrace: c.grace}}
		if got := s.handoverWindow(); got != c.want {
			t.Errorf("TTL %v, kill-grace %v: window %v, want %v", c.ttl, c.grace, got, c.want)
		}
	}
}
