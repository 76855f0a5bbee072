package lockertest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// Layout is where and how a backend keeps a key's records on its server,
// with raw access to that server: what releases before package
// locker/records wrote and read. LayoutContract checks that a backend
// still reads what they wrote and writes what they read, so that a fleet
// mixing releases interoperates.
type Layout struct {
	NewLocker NewLocker
	// Control, Term and Run name the places of the key's control record,
	// of its term record of epoch and of its run record of slot, in the
	// server's own terms (a key path, a znode path).
	Control func(key string) string
	Term    func(key string, epoch uint64) string
	Run     func(key, slot string) string
	// Put writes value at place with the server's own client, as the
	// older releases did (no lease, no session; creating parents as
	// needed). Get reads the value at place; ok false when there is none.
	Put func(t *testing.T, place string, value []byte)
	Get func(t *testing.T, place string) (value []byte, ok bool)
}

// The records as older releases encoded them, byte for byte.
const (
	oldControl = `{"pause":{"by":"ops@admin1","since":"2026-12-01T09:30:00Z","reason":"old release"},"holders":3}`
	oldTerm41  = `{"epoch":41,"id":"old-node","hostname":"h1","pid":7,"start":"2026-12-01T09:00:00Z","end":"2026-12-01T09:10:00Z","ended":"exited","exit_code":0}`
	oldTerm42  = `{"epoch":42,"id":"old-node","hostname":"h1","pid":8,"start":"2026-12-01T09:10:01Z"}`
	oldRun     = `{"slot":"s-old","outcome":"succeeded","id":"old-node","hostname":"h1","pid":7,"epoch":42,"at":%q,"expires":%q}`
)

// LayoutContract checks that records written at the Layout's places in
// the older releases' encoding are read, and that the backend writes its
// records there in that encoding.
func LayoutContract(t *testing.T, l Layout) {
	t.Run("records written by an older release are read", func(t *testing.T) {
		key := "layout-a-" + time.Now().Format("150405.000000")
		l.Put(t, l.Control(key), []byte(oldControl))
		l.Put(t, l.Term(key, 41), []byte(oldTerm41))
		l.Put(t, l.Term(key, 42), []byte(oldTerm42))
		at := time.Now().UTC().Truncate(time.Millisecond)
		l.Put(t, l.Run(key, "s-old"), fmt.Appendf(nil, oldRun, at.Format(time.RFC3339Nano), at.Add(time.Hour).Format(time.RFC3339Nano)))

		// The control record is shared by the slot keys.
		lk := l.NewLocker(t, locker.SlotKey(key, 2))
		c, err := controls(t, lk).Control(ctx(t))
		if err != nil || c.Version == "" || c.Pause == nil || c.Pause.Reason != "old release" || c.Holders != 3 {
			t.Fatalf("Control of a record an older release wrote = %+v, %v", c, err)
		}
		// Its version is one a write is conditioned on.
		if _, err := controls(t, lk).SetControl(ctx(t), locker.Control{Version: c.Version}); err != nil {
			t.Fatalf("SetControl at the version of a record an older release wrote: %v", err)
		}
		lk = l.NewLocker(t, key)
		terms, err := history(t, lk).Terms(ctx(t), 0)
		if err != nil || len(terms) != 2 || terms[0].Epoch != 42 || terms[1].Epoch != 41 ||
			terms[1].Ended != locker.TermExited || terms[1].ExitCode == nil || terms[0].PID != 8 {
			t.Fatalf("Terms of records an older release wrote = %+v, %v", terms, err)
		}
		r, err := runLog(t, lk).LookupRun(ctx(t), "s-old")
		if err != nil || r.ID != "old-node" || r.Epoch != 42 || !r.At.Equal(at) {
			t.Fatalf("LookupRun of a record an older release wrote = %+v, %v", r, err)
		}
		if r, err := runLog(t, lk).LatestRun(ctx(t)); err != nil || r.Slot != "s-old" {
			t.Fatalf("LatestRun of a record an older release wrote = %+v, %v", r, err)
		}
	})

	t.Run("records are written where an older release reads them", func(t *testing.T) {
		key := "layout-b-" + time.Now().Format("150405.000000")
		lk := l.NewLocker(t, locker.SlotKey(key, 2))
		var want locker.Control
		if err := json.Unmarshal([]byte(oldControl), &want); err != nil {
			t.Fatal(err)
		}
		if _, err := controls(t, lk).SetControl(ctx(t), want); err != nil {
			t.Fatal(err)
		}
		if got, ok := l.Get(t, l.Control(key)); !ok || string(got) != oldControl {
			t.Fatalf("control record at %s = %q (%v), want %q", l.Control(key), got, ok, oldControl)
		}

		lk = l.NewLocker(t, key)
		lease := acquire(t, lk)
		defer lease.Release(ctx(t))
		term := locker.Term{Epoch: lease.Epoch(), ID: "new-node", Hostname: "h2", PID: 9, Start: time.Date(2026, 12, 1, 9, 20, 0, 0, time.UTC)}
		if err := history(t, lk).RecordTerm(ctx(t), term, 5); err != nil {
			t.Fatal(err)
		}
		if got, ok := l.Get(t, l.Term(key, term.Epoch)); !ok || string(got) != string(term.Record()) {
			t.Fatalf("term record at %s = %q (%v), want %q", l.Term(key, term.Epoch), got, ok, term.Record())
		}
		run := locker.NewRun(locker.Options{ID: "new-node"}, "s-new", locker.RunStarted, lease.Epoch(), time.Hour)
		if err := runLog(t, lk).RecordRun(ctx(t), lease, run); err != nil {
			t.Fatal(err)
		}
		if got, ok := l.Get(t, l.Run(key, "s-new")); !ok || string(got) != string(run.Record()) {
			t.Fatalf("run record at %s = %q (%v), want %q", l.Run(key, "s-new"), got, ok, run.Record())
		}
	})
}
