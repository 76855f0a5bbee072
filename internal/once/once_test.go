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
