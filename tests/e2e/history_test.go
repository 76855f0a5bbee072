//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// historyRow is a row of `leaderrun history --json` as docs/REFERENCE.md
// documents it.
type historyRow struct {
	Epoch         uint64     `json:"epoch"`
	ID            string     `json:"id"`
	Hostname      string     `json:"hostname"`
	Start         *time.Time `json:"start"`
	End           *time.Time `json:"end"`
	Ended         string     `json:"ended"`
	ExitCode      *int       `json:"exit_code"`
	Leading       bool       `json:"leading"`
	Slot          string     `json:"slot"`
	SlotOutcome   string     `json:"slot_outcome"`
	PeriodSeconds int64      `json:"period_seconds"`
	Missed        bool       `json:"missed"`
	CaughtUp      bool       `json:"caught_up"`
}

// readHistory runs `leaderrun history --json` with query's arguments.
func readHistory(t *testing.T, query []string) []historyRow {
	t.Helper()
	p := start(t, "history", nil, append([]string{"history", "--json"}, query...)...)
	if code := p.Wait(20 * time.Second); code != 0 {
		t.Fatalf("history: exit %d\n%s", code, p.Output())
	}
	var doc struct {
		Key   string       `json:"key"`
		Terms []historyRow `json:"terms"`
	}
	if err := json.Unmarshal([]byte(p.Output()), &doc); err != nil {
		t.Fatalf("history --json: %v\n%s", err, p.Output())
	}
	return doc.Terms
}

// historyScenarios runs three terms of one key, one after the other: a
// child that exits 3, a leaderrun killed with SIGKILL (its end never
// recorded), and a term lost to lose(key); then a once-per key run in two
// periods with the one between skipped. args builds a run's arguments,
// query the history command's, for key.
func historyScenarios(t *testing.T, args, query func(key string) []string, lose func(key string)) {
	t.Run("exited, killed, lost", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		key := newKey("history")
		epochFile := func(i int) string { return filepath.Join(dir, "epoch"+strconv.Itoa(i)) }
		record := func(i int) string { return "echo $LEADER_EPOCH > " + epochFile(i) + "; " }

		p1 := start(t, "term 1", nil, withCommand(args(key), record(1)+"exit 3")...)
		if code := p1.Wait(30 * time.Second); code != 3 {
			t.Fatalf("term 1: exit %d, want the child's 3", code)
		}
		e1 := readEpoch(t, epochFile(1))

		p2 := start(t, "term 2", nil, withCommand(args(key), record(2)+"exec sleep 1000")...)
		e2 := readEpoch(t, epochFile(2))
		// The start record is written once the child runs; the term shows
		// as the holder's while it leads.
		waitFor(t, 20*time.Second, "term 2's start record", func() bool {
			rows := readHistory(t, query(key))
			return len(rows) == 2 && rows[0].Epoch == e2 && rows[0].Leading && rows[0].End == nil
		})
		p2.Signal(syscall.SIGKILL)
		p2.Wait(10 * time.Second)

		p3 := start(t, "term 3", nil, withCommand(args(key), record(3)+"exec sleep 1000")...)
		e3 := readEpoch(t, epochFile(3))
		lose(key)
		if code := p3.Wait(30 * time.Second); code != 123 {
			t.Fatalf("term 3: exit %d after the loss, want 123", code)
		}
		if !(e1 < e2 && e2 < e3) {
			t.Fatalf("epochs %d, %d, %d do not grow", e1, e2, e3)
		}

		rows := readHistory(t, query(key))
		if len(rows) != 3 {
			t.Fatalf("history has %d rows, want 3: %+v", len(rows), rows)
		}
		lost, killed, exited := rows[0], rows[1], rows[2]
		if lost.Epoch != e3 || lost.Ended != "lost" || lost.End == nil || lost.Leading {
			t.Errorf("newest row %+v, want epoch %d ended lost", lost, e3)
		}
		if killed.Epoch != e2 || killed.End != nil || killed.Ended != "" || killed.Leading {
			t.Errorf("second row %+v, want epoch %d with no end", killed, e2)
		}
		if exited.Epoch != e1 || exited.Ended != "exited" || exited.ExitCode == nil || *exited.ExitCode != 3 || exited.End == nil {
			t.Errorf("oldest row %+v, want epoch %d exited 3", exited, e1)
		}
		if exited.Start == nil || exited.End.Before(*exited.Start) || killed.Start.Before(*exited.End) {
			t.Errorf("start and end times out of order: %+v", rows)
		}
		p := start(t, "history table", nil, append([]string{"history"}, query(key)...)...)
		if code := p.Wait(20 * time.Second); code != 0 || !strings.Contains(p.Output(), "unknown") || !strings.Contains(p.Output(), "exited") {
			t.Errorf("history table: exit %d\n%s", code, p.Output())
		}
	})
	t.Run("a skipped period is missed", func(t *testing.T) {
		t.Parallel()
		key := newKey("history-once")
		const period = 3 * time.Second
		run := func(name string) {
			t.Helper()
			p := start(t, name, nil, withCommand(append(args(key), "--once-per", "3s"), "true")...)
			if code := p.Wait(30 * time.Second); code != 0 {
				t.Fatalf("%s: exit %d", name, code)
			}
		}
		run("slot 1")
		first := readHistory(t, query(key))
		if len(first) != 1 || first[0].Slot == "" || first[0].PeriodSeconds != 3 || first[0].SlotOutcome != "succeeded" {
			t.Fatalf("after the first run: %+v, want one succeeded slot of a 3s period", first)
		}
		s0, err := time.Parse(time.RFC3339, first[0].Slot)
		if err != nil {
			t.Fatal(err)
		}
		// Skip the next period; run in the one after.
		time.Sleep(time.Until(s0.Add(2*period + 200*time.Millisecond)))
		run("slot 3")
		rows := readHistory(t, query(key))
		var ran, missed []time.Time
		for _, r := range rows {
			s, err := time.Parse(time.RFC3339, r.Slot)
			if err != nil {
				t.Fatalf("row %+v: slot: %v", r, err)
			}
			if r.Missed {
				if r.Epoch != 0 || r.SlotOutcome != "missed" {
					t.Errorf("missed row %+v", r)
				}
				missed = append(missed, s)
			} else {
				ran = append(ran, s)
			}
		}
		if len(ran) != 2 || !ran[1].Equal(s0) || ran[0].Before(s0.Add(2*period)) {
			t.Fatalf("ran slots %v, want %v and one at least two periods later", ran, s0)
		}
		// Every period between the two runs is missed, and only those
		// (later ones may be missed too, once over).
		var between []time.Time
		for _, m := range missed {
			if m.After(s0) && m.Before(ran[0]) {
				between = append(between, m)
			}
		}
		if want := int(ran[0].Sub(s0)/period) - 1; len(between) != want || want < 1 || !between[len(between)-1].Equal(s0.Add(period)) {
			t.Fatalf("missed slots %v between %v and %v, want the %d periods between", missed, s0, ran[0], want)
		}
	})
}

func TestHistoryLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	historyScenarios(t,
		func(key string) []string { return localArgs(dir, key) },
		func(key string) []string { return []string{"--backend", "local", "--lock-dir", dir, key} },
		func(key string) {
			// Removing the lock file takes the key from under the leader.
			if err := os.Remove(filepath.Join(dir, "leaderrun", key+".lock")); err != nil {
				t.Error(err)
			}
		})
}

func TestHistoryEtcd(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	cli := etcdClient(t, eps)
	historyScenarios(t,
		func(key string) []string { return etcdArgs(eps, key) },
		func(key string) []string {
			return []string{"--backend", "etcd", "--etcd-endpoints", strings.Join(eps, ","), key}
		},
		func(key string) {
			// The election keys only: the history beside them stays.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := cli.Delete(ctx, "/leaderrun/"+key+"/@", clientv3.WithPrefix()); err != nil {
				t.Error(err)
			}
		})
}
