package once

import (
	"testing"
	"time"
)

func TestSlotOf(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	cases := []struct {
		period time.Duration
		now    time.Time
		want   string
	}{
		{24 * time.Hour, at("2026-11-30T03:00:02Z"), "2026-11-30T00:00:00Z"},
		{24 * time.Hour, at("2026-11-30T23:59:59Z"), "2026-11-30T00:00:00Z"},
		{time.Hour, at("2026-11-30T03:59:59+02:00"), "2026-11-30T01:00:00Z"},
		{15 * time.Minute, at("2026-11-30T03:14:59Z"), "2026-11-30T03:00:00Z"},
		{15 * time.Minute, at("2026-11-30T03:15:00Z"), "2026-11-30T03:15:00Z"},
		{7 * time.Second, time.Unix(20, 0), time.Unix(14, 0).UTC().Format(time.RFC3339)},
		{time.Minute, time.Unix(-30, 0), "1969-12-31T23:59:00Z"},
	}
	for _, c := range cases {
		if got := SlotOf(c.period, c.now); got != c.want {
			t.Errorf("SlotOf(%v, %v) = %s, want %s", c.period, c.now, got, c.want)
		}
	}
}

func TestValidatePeriod(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, 500 * time.Millisecond, 1500 * time.Millisecond} {
		if ValidatePeriod(d) == nil {
			t.Errorf("ValidatePeriod(%v) accepted", d)
		}
	}
	for _, d := range []time.Duration{time.Second, time.Hour, 24 * time.Hour} {
		if err := ValidatePeriod(d); err != nil {
			t.Errorf("ValidatePeriod(%v): %v", d, err)
		}
	}
}

func TestCatchUpSlot(t *testing.T) {
	day := 24 * time.Hour
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	cases := []struct {
		name          string
		period, grace time.Duration
		now           time.Time
		want          string // "" : no catch-up
	}{
		{"just after the end", day, 6 * time.Hour, at("2026-12-07T00:00:00Z"), "2026-12-06T00:00:00Z"},
		{"within the grace", day, 6 * time.Hour, at("2026-12-07T05:59:59Z"), "2026-12-06T00:00:00Z"},
		{"the grace is over", day, 6 * time.Hour, at("2026-12-07T06:00:00Z"), ""},
		{"late in the period", day, 6 * time.Hour, at("2026-12-07T23:00:00Z"), ""},
		{"a grace of one period covers all of the next", day, day, at("2026-12-07T23:59:59Z"), "2026-12-06T00:00:00Z"},
		// After a week down, the one slot within reach is the latest.
		{"only the latest", day, day, at("2026-12-14T01:00:00Z"), "2026-12-13T00:00:00Z"},
		{"short periods", 4 * time.Second, 2 * time.Second, time.Unix(101, 0), time.Unix(96, 0).UTC().Format(time.RFC3339)},
		{"short periods, past the grace", 4 * time.Second, 2 * time.Second, time.Unix(102, 0), ""},
	}
	for _, c := range cases {
		slot, until, ok := CatchUpSlot(c.period, c.grace, c.now)
		if ok != (c.want != "") || slot != c.want {
			t.Errorf("%s: CatchUpSlot = %q, %v; want %q", c.name, slot, ok, c.want)
		}
		if ok && (!c.now.Before(until) || until.After(c.now.Add(c.period))) {
			t.Errorf("%s: grace ends at %v, want after %v and within one period", c.name, until, c.now)
		}
	}
}

func TestValidateCatchUp(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Hour, 1500 * time.Millisecond, 25 * time.Hour} {
		if ValidateCatchUp(d, 24*time.Hour) == nil {
			t.Errorf("ValidateCatchUp(%v, 24h) accepted", d)
		}
	}
	for _, d := range []time.Duration{time.Second, 6 * time.Hour, 24 * time.Hour} {
		if err := ValidateCatchUp(d, 24*time.Hour); err != nil {
			t.Errorf("ValidateCatchUp(%v, 24h): %v", d, err)
		}
	}
}
