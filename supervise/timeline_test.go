package supervise

import (
	"testing"
	"time"
)

func TestNewDeadlineUsesSendTimeAndSmallerTTL(t *testing.T) {
	sent := time.Unix(1000, 0)
	cases := []struct {
		name               string
		requested, granted time.Duration
		want               time.Duration
	}{
		{"granted equals requested", 15 * time.Second, 15 * time.Second, 15 * time.Second},
		{"server raised the TTL", 2 * time.Second, 5 * time.Second, 2 * time.Second},
		{"server granted less", 15 * time.Second, 10 * time.Second, 10 * time.Second},
		{"granted unknown", 15 * time.Second, 0, 15 * time.Second},
	}
	for _, c := range cases {
		if got := NewDeadline(sent, c.requested, c.granted).Sub(sent); got != c.want {
			t.Errorf("%s: deadline = send + %v, want send + %v", c.name, got, c.want)
		}
	}
}

func TestStopTimeline(t *testing.T) {
	d := time.Unix(1000, 0)
	tl := StopTimeline{Deadline: d, SafetyMargin: time.Second, KillGrace: 5 * time.Second}
	if got := d.Sub(tl.TermAt()); got != 6*time.Second {
		t.Errorf("TermAt = deadline - %v, want deadline - 6s", got)
	}
	if got := d.Sub(tl.KillAt()); got != time.Second {
		t.Errorf("KillAt = deadline - %v, want deadline - 1s", got)
	}

	cases := []struct {
		name     string
		now      time.Time
		wantKill time.Time
	}{
		{"early stop gets the full grace", d.Add(-20 * time.Second), d.Add(-15 * time.Second)},
		{"late stop is cut at the kill point", d.Add(-3 * time.Second), d.Add(-time.Second)},
		{"past the kill point kills at once", d.Add(time.Second), d.Add(time.Second)},
	}
	for _, c := range cases {
		s := tl.StartedAt(c.now)
		if !s.TermAt().Equal(c.now) {
			t.Errorf("%s: TermAt = %v, want now %v", c.name, s.TermAt(), c.now)
		}
		if !s.KillAt().Equal(c.wantKill) {
			t.Errorf("%s: KillAt = %v, want %v", c.name, s.KillAt(), c.wantKill)
		}
	}
}

func TestRenewTimeout(t *testing.T) {
	cases := []struct{ ttl, interval, want time.Duration }{
		{15 * time.Second, 5 * time.Second, 1500 * time.Millisecond}, // the defaults
		{3 * time.Second, time.Second, 500 * time.Millisecond},       // never below 500ms
		{3 * time.Second, 400 * time.Millisecond, 400 * time.Millisecond},
		{60 * time.Second, 2 * time.Second, 2 * time.Second}, // never above the interval
	}
	for _, c := range cases {
		s := &Supervisor{cfg: Config{TTL: c.ttl, RenewInterval: c.interval}}
		if got := s.renewTimeout(); got != c.want {
			t.Errorf("ttl %v, interval %v: renew timeout %v, want %v", c.ttl, c.interval, got, c.want)
		}
	}
}

// The one calculation of stop points: a Config's margins turn a deadline
// into the timeline the term arms, the latest send of a renewal, and (in
// the deadline file) the stop point the job reads.
func TestConfigTimelineAndRenewBy(t *testing.T) {
	d := time.Unix(1000, 0)
	cfg := Config{TTL: 15 * time.Second, RenewInterval: 5 * time.Second, SafetyMargin: time.Second, KillGrace: 2 * time.Second}
	tl := cfg.Timeline(d)
	if tl != (StopTimeline{Deadline: d, SafetyMargin: time.Second, KillGrace: 2 * time.Second}) {
		t.Fatalf("Timeline = %+v", tl)
	}
	if got := d.Sub(tl.TermAt()); got != 3*time.Second {
		t.Errorf("TermAt = deadline - %v, want deadline - 3s (margin + grace)", got)
	}
	if got := d.Sub(tl.RenewBy(500 * time.Millisecond)); got != 3500*time.Millisecond {
		t.Errorf("RenewBy(500ms) = deadline - %v, want deadline - 3.5s", got)
	}

	// nextRenewal brings a renewal forward to exactly RenewBy after a
	// short grant, and keeps the interval after a full one.
	clk := newFakeClock()
	s := &Supervisor{cfg: cfg, clock: clk}
	sent := clk.Now()
	short := NewDeadline(sent, cfg.TTL, 6*time.Second)
	if got, want := s.nextRenewal(sent, short), cfg.Timeline(short).RenewBy(s.renewTimeout()); !got.Equal(want) {
		t.Errorf("after a 6s grant: next renewal at send + %v, want send + %v", got.Sub(sent), want.Sub(sent))
	}
	full := NewDeadline(sent, cfg.TTL, cfg.TTL)
	if got := s.nextRenewal(sent, full).Sub(sent); got != cfg.RenewInterval {
		t.Errorf("after a full grant: next renewal at send + %v, want send + the interval", got)
	}
}
