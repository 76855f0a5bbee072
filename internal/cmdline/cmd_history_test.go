//go:build linux

package cmdline

import (
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// TestHistoryRowsShowMissedSlots: once-per terms every hour with 02:00
// never run, the newest at 04:00, read at 06:30: 02:00 and 05:00 (over,
// nobody ran it) are missed, 06:00 (still running its period) is not.
func TestHistoryRowsShowMissedSlots(t *testing.T) {
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	term := func(epoch uint64, hour int) locker.Term {
		s := day.Add(time.Duration(hour) * time.Hour)
		return locker.Term{Epoch: epoch, ID: "h", Start: s.Add(time.Minute), End: s.Add(2 * time.Minute), Ended: locker.TermExited,
			Slot: s.Format(time.RFC3339), SlotOutcome: locker.RunSucceeded, Period: time.Hour}
	}
	terms := []locker.Term{term(4, 4), term(3, 3), term(2, 1), term(1, 0)} // newest first, as Terms gives them
	rows := historyRows(terms, 0, day.Add(6*time.Hour+30*time.Minute))
	var got []string
	for _, r := range rows {
		tag := r.Slot[11:16]
		if r.Missed {
			tag += " missed"
		}
		got = append(got, tag)
	}
	want := []string{"05:00 missed", "04:00", "03:00", "02:00 missed", "01:00", "00:00"}
	if len(got) != len(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("rows %v, want %v", got, want)
		}
	}
}

// TestHistoryRowsWithoutPeriodMissNothing: terms of --run-id (no period)
// and of plain runs never give missed rows; an open term of the current
// holder is "leading".
func TestHistoryRowsWithoutPeriodMissNothing(t *testing.T) {
	now := time.Now()
	terms := []locker.Term{
		{Epoch: 3, Start: now.Add(-time.Minute)},
		{Epoch: 2, Start: now.Add(-time.Hour), End: now.Add(-50 * time.Minute), Ended: locker.TermLost, Slot: "2026-11-30"},
		{Epoch: 1, Start: now.Add(-48 * time.Hour)},
	}
	rows := historyRows(terms, 3, now)
	if len(rows) != 3 || rows[0].Epoch != 3 || !rows[0].Leading || rows[1].Epoch != 2 || rows[2].Epoch != 1 || rows[2].Leading {
		t.Fatalf("rows %+v", rows)
	}
}
