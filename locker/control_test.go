package locker

import (
	"testing"
	"time"
)

// TestControlHolds: who a record holds back from campaigning for a name.
func TestControlHolds(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	until := now.Add(time.Minute)
	sd := func(key string, epoch uint64, to string, taken uint64, until time.Time) Control {
		return Control{StepDown: &StepDown{Key: key, Epoch: epoch, To: to, Until: until, Taken: taken}}
	}
	cases := []struct {
		name        string
		c           Control
		key, id     string
		steppedDown uint64
		want        bool
	}{
		{"empty record", Control{}, "k", "a", 0, false},
		{"paused holds everyone", Control{Pause: &Pause{}}, "k", "a", 0, true},
		{"paused holds another slot too", Control{Pause: &Pause{}}, "k~2", "a", 0, true},
		{"step-down holds the one who stepped down", sd("k", 5, "", 0, until), "k", "a", 5, true},
		{"step-down lets the others campaign", sd("k", 5, "", 0, until), "k", "b", 0, false},
		{"step-down of an older term holds nobody", sd("k", 5, "", 0, until), "k", "a", 7, false},
		{"to: holds everyone but to", sd("k", 5, "b", 0, until), "k", "c", 0, true},
		{"to: holds the one who stepped down", sd("k", 5, "b", 0, until), "k", "a", 5, true},
		{"to: lets to campaign", sd("k", 5, "b", 0, until), "k", "b", 0, false},
		{"to: over at until", sd("k", 5, "b", 0, now), "k", "c", 0, false},
		{"to: over once taken", sd("k", 5, "b", 6, until), "k", "c", 0, false},
		{"to: another slot is free", sd("k~1", 5, "b", 0, until), "k~2", "c", 0, false},
		{"to: the key is not its slot", sd("k~1", 5, "b", 0, until), "k", "c", 0, false},
		{"to: up to the bound and its skew", sd("k", 5, "b", 0, now.Add(MaxReservation+ReservationSkew)), "k", "c", 0, true},
		{"to: beyond the bound is void", sd("k", 5, "b", 0, now.Add(MaxReservation+ReservationSkew+time.Second)), "k", "c", 0, false},
		{"to: until 9999 is void", sd("k", 5, "b", 0, time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)), "k", "c", 0, false},
		{"void holds not the one who stepped down", sd("k", 5, "", 0, now.Add(10*365*24*time.Hour)), "k", "a", 5, false},
	}
	for _, tc := range cases {
		if got := tc.c.Holds(tc.key, tc.id, tc.steppedDown, now); got != tc.want {
			t.Errorf("%s: Holds = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestControlAsksToStepDown: only a pause, or a live step-down of exactly
// that term, asks a term to stop; a stale request never does.
func TestControlAsksToStepDown(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	until := now.Add(time.Minute)
	req := &StepDown{Key: "k", Epoch: 5, By: "op@h", Until: until}
	cases := []struct {
		name  string
		c     Control
		key   string
		epoch uint64
		want  bool
	}{
		{"empty record", Control{}, "k", 5, false},
		{"pause", Control{Pause: &Pause{By: "op@h", Reason: "r"}}, "k~3", 9, true},
		{"this term", Control{StepDown: req}, "k", 5, true},
		{"a later term: stale", Control{StepDown: req}, "k", 6, false},
		{"an earlier term", Control{StepDown: req}, "k", 4, false},
		{"another slot", Control{StepDown: req}, "k~1", 5, false},
		{"past until", Control{StepDown: &StepDown{Key: "k", Epoch: 5, Until: now}}, "k", 5, false},
		{"taken", Control{StepDown: &StepDown{Key: "k", Epoch: 5, Until: until, Taken: 6}}, "k", 5, false},
		{"within the bound", Control{StepDown: &StepDown{Key: "k", Epoch: 5, Until: now.Add(MaxReservation)}}, "k", 5, true},
		{"void: until 9999", Control{StepDown: &StepDown{Key: "k", Epoch: 5, Until: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}}, "k", 5, false},
	}
	for _, tc := range cases {
		if why, got := tc.c.AsksToStepDown(tc.key, tc.epoch, now); got != tc.want || got != (why != "") {
			t.Errorf("%s: AsksToStepDown = %v %q, want %v", tc.name, got, why, tc.want)
		}
	}
}

// TestStepDownReserves: a void step-down is not pending, but still
// stands on the record (status shows it, resume clears it) until its until.
func TestStepDownReserves(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	far := &StepDown{Key: "k", Epoch: 5, Until: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}
	if !far.Void(now) || far.Pending(now) || !far.Reserves(now) {
		t.Errorf("until 9999: void %v, pending %v, reserves %v; want true, false, true", far.Void(now), far.Pending(now), far.Reserves(now))
	}
	var none *StepDown
	if none.Pending(now) || none.Reserves(now) {
		t.Error("no step-down is pending or reserves")
	}
}

// TestParseControl: a record round-trips with its version, an empty value
// is an empty record, and garbage is an error, not an empty record.
func TestParseControl(t *testing.T) {
	c := Control{Pause: &Pause{By: "op@h", Reason: "r"}, StepDown: &StepDown{Key: "k", Epoch: 3}}
	got, err := ParseControl(c.Record(), "7")
	if err != nil || got.Version != "7" || got.Pause == nil || got.StepDown == nil || got.StepDown.Epoch != 3 {
		t.Errorf("round trip: %+v %v", got, err)
	}
	if got, err := ParseControl(nil, "1"); err != nil || got.Paused() || got.StepDown != nil || got.Version != "1" {
		t.Errorf("empty value: %+v %v", got, err)
	}
	for _, bad := range []string{"{not json", `{"pause":"yes"}`, `[]`} {
		if _, err := ParseControl([]byte(bad), "1"); err == nil {
			t.Errorf("ParseControl(%q): no error", bad)
		}
	}
}
