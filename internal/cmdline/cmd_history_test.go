//go:build linux

package cmdline

import (
	"encoding/json"
	"strings"
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

// TestHistoryRowsShowACatchUp: 02:00 was missed and caught up at 03:05,
// before 03:00's own run: it is no longer missed, keeps its place among
// the slots, and says it was caught up, in JSON and in the table.
func TestHistoryRowsShowACatchUp(t *testing.T) {
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	term := func(epoch uint64, slotHour int, start time.Time, catchUp bool) locker.Term {
		return locker.Term{Epoch: epoch, ID: "h", Start: start, End: start.Add(time.Minute), Ended: locker.TermExited,
			Slot: at(slotHour, 0).Format(time.RFC3339), SlotOutcome: locker.RunSucceeded, Period: time.Hour, CatchUp: catchUp}
	}
	terms := []locker.Term{term(3, 3, at(3, 7), false), term(2, 2, at(3, 5), true), term(1, 1, at(1, 1), false)}
	rows := historyRows(terms, 0, at(3, 30))
	if len(rows) != 3 || rows[1].Slot != at(2, 0).Format(time.RFC3339) || !rows[1].CaughtUp || rows[0].CaughtUp || rows[2].CaughtUp {
		t.Fatalf("rows %+v, want 03:00, 02:00 caught up, 01:00 and nothing missed", rows)
	}
	var b strings.Builder
	if err := (historyReport{Key: "k", Backend: "local", Terms: rows}).writeText(&b); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "caught up"); n != 1 || !strings.Contains(b.String(), "2026-11-30T02:00:00Z succeeded, caught up") {
		t.Fatalf("table:\n%s\nwant 02:00 alone marked \"caught up\"", b.String())
	}
	j, err := json.Marshal(rows[1])
	if err != nil || !strings.Contains(string(j), `"caught_up":true`) {
		t.Fatalf("JSON row %s, %v", j, err)
	}
	if j, _ := json.Marshal(rows[0]); strings.Contains(string(j), "caught_up") {
		t.Fatalf("JSON row of an ordinary run %s", j)
	}
}
