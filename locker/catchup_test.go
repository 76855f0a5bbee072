package locker

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A mixed fleet: releases that know no catch-up read the records of one
// that does, and ordinary records are encoded as before, byte for byte.
func TestCatchUpRecordsAreReadByOlderReleases(t *testing.T) {
	at := time.Date(2026, 12, 7, 1, 30, 0, 0, time.UTC)
	run := Run{Slot: "2026-12-06T00:00:00Z", Outcome: RunSucceeded, ID: "n1", Hostname: "h1", PID: 7, Epoch: 3, At: at, Expires: at.Add(time.Hour)}
	const oldRun = `{"slot":"2026-12-06T00:00:00Z","outcome":"succeeded","id":"n1","hostname":"h1","pid":7,"epoch":3,"at":"2026-12-07T01:30:00Z","expires":"2026-12-07T02:30:00Z"}`
	if got := string(run.Record()); got != oldRun {
		t.Fatalf("an ordinary run encodes as %s, want the older releases' %s", got, oldRun)
	}
	run.CatchUp = true
	rec := run.Record()
	if !strings.Contains(string(rec), `"catch_up":true`) {
		t.Fatalf("a catch-up run encodes as %s, without its mark", rec)
	}
	// The older releases' Run, field for field.
	var old struct {
		Slot     string    `json:"slot"`
		Outcome  string    `json:"outcome"`
		ID       string    `json:"id"`
		Hostname string    `json:"hostname"`
		PID      int       `json:"pid"`
		Epoch    uint64    `json:"epoch"`
		At       time.Time `json:"at"`
		Expires  time.Time `json:"expires"`
	}
	if err := json.Unmarshal(rec, &old); err != nil || old.Slot != run.Slot || old.Outcome != RunSucceeded || !old.Expires.Equal(run.Expires) {
		t.Fatalf("an older release reads %+v, %v from %s", old, err, rec)
	}
	if got, err := ParseRun(rec); err != nil || !got.CatchUp || got.Slot != run.Slot {
		t.Fatalf("ParseRun(%s) = %+v, %v", rec, got, err)
	}
	if d := run.Describe(); !strings.Contains(d, "slot 2026-12-06T00:00:00Z ran as a catch-up on host h1") {
		t.Fatalf("Describe = %q, want it to say the run was a catch-up", d)
	}

	term := Term{Epoch: 3, ID: "n1", Hostname: "h1", PID: 7, Start: at, Slot: run.Slot, SlotOutcome: RunStarted, Period: 24 * time.Hour}
	if strings.Contains(string(term.Record()), "catch_up") {
		t.Fatalf("an ordinary term encodes a catch-up mark: %s", term.Record())
	}
	term.CatchUp = true
	var oldTerm struct {
		Epoch  uint64        `json:"epoch"`
		Slot   string        `json:"slot"`
		Period time.Duration `json:"period"`
	}
	if err := json.Unmarshal(term.Record(), &oldTerm); err != nil || oldTerm.Epoch != 3 || oldTerm.Slot != run.Slot || oldTerm.Period != term.Period {
		t.Fatalf("an older release reads %+v, %v from %s", oldTerm, err, term.Record())
	}
	if got, err := ParseTerm(term.Record()); err != nil || !got.CatchUp {
		t.Fatalf("ParseTerm of a catch-up term = %+v, %v", got, err)
	}
}
