//go:build linux

package cmdline

import (
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/supervise"
)

// TestCatchUpTermsOfARun: a run started at 00:30 with --once-per 1h
// --catch-up 45m has a catch-up term for 23:00 until 00:45, and its own
// period stays 00:00 however long the catch-up takes; at 00:50 there is
// none. The catch-up term never restarts its command.
func TestCatchUpTermsOfARun(t *testing.T) {
	start := time.Date(2026, 12, 7, 0, 30, 0, 0, time.UTC)
	cfg := &runConfig{once: &onceSettings{period: time.Hour, grace: 45 * time.Minute, record: "success"}}
	cfg.sup.Restart = supervise.RestartOnFailure
	cu := catchUpOf(cfg, start)
	if cu == nil || cu.once.catchUp != "2026-12-06T23:00:00Z" || !cu.once.until.Equal(start.Add(15*time.Minute)) {
		t.Fatalf("catch-up term %+v, want 2026-12-06T23:00:00Z until 00:45", cu)
	}
	if cfg.once.catchUp != "" {
		t.Fatal("the run's own configuration became a catch-up")
	}
	// One attempt for the missed period; the run's own keeps its restarts.
	if cu.sup.Restart != supervise.RestartNever || cfg.sup.Restart != supervise.RestartOnFailure {
		t.Fatalf("restart policies: catch-up %q, own %q; want never and on-failure", cu.sup.Restart, cfg.sup.Restart)
	}
	if got := cfg.once.startedOr(start.Add(2 * time.Hour)); !got.Equal(start) {
		t.Fatalf("after a two-hour catch-up the run's period is that of %v, want %v", got, start)
	}
	late := &runConfig{once: &onceSettings{period: time.Hour, grace: 45 * time.Minute}}
	if cu := catchUpOf(late, start.Add(20*time.Minute)); cu != nil {
		t.Fatalf("catch-up term past the grace: %+v", cu.once)
	}
	off := &runConfig{once: &onceSettings{period: time.Hour}}
	if catchUpOf(off, start) != nil || catchUpOf(&runConfig{}, start) != nil {
		t.Fatal("catch-up term without --catch-up")
	}
}
