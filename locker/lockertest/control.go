package lockertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// ControlContract checks a backend's locker.Controls: a fresh key has no
// record, a record written by one client is read back whole by another,
// writes are conditioned on the version read (one of two racing writers
// wins), the record is shared by a key's slot keys, a write needs no lease
// and leaves a held lease alone, and WaitControl returns when the record
// changes (within ControlPoll and a margin) and not before. Each case uses
// its own key.
func ControlContract(t *testing.T, newLocker NewLocker) {
	ControlContractPoll(t, locker.ControlPoll, newLocker)
}

// ControlContractPoll is ControlContract for a Locker whose WaitControl
// reads at least every poll (a core under test given a short pace): the
// wait that must see no change lasts one and a half polls (at least
// 100ms) instead of 1.5s, and a change must arrive within poll plus the
// same margin.
func ControlContractPoll(t *testing.T, poll time.Duration, newLocker NewLocker) {
	quiet := max(poll*3/2, 100*time.Millisecond)
	pause := max(poll*3/10, 20*time.Millisecond)
	cases := []struct {
		name string
		run  func(t *testing.T, key string)
	}{
		{"no record", func(t *testing.T, key string) {
			c, err := controls(t, newLocker(t, key)).Control(ctx(t))
			if err != nil || c.Version != "" || c.Pause != nil || c.StepDown != nil {
				t.Fatalf("Control of a fresh key = %+v, %v; want the zero record", c, err)
			}
		}},
		{"written by one client, read by another", func(t *testing.T, key string) {
			want := sampleControl(key)
			v, err := controls(t, newLocker(t, key)).SetControl(ctx(t), want)
			if err != nil || v == "" {
				t.Fatalf("SetControl on a fresh key = %q, %v", v, err)
			}
			got, err := controls(t, newLocker(t, key)).Control(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			want.Version = v
			if !sameControl(got, want) {
				t.Fatalf("read back %s (version %q), want %s (version %q)", got.Record(), got.Version, want.Record(), v)
			}
		}},
		{"a stale version is refused", func(t *testing.T, key string) {
			c := controls(t, newLocker(t, key))
			v1, err := c.SetControl(ctx(t), sampleControl(key))
			if err != nil {
				t.Fatal(err)
			}
			// Creating again over an existing record conflicts.
			if _, err := c.SetControl(ctx(t), locker.Control{}); !errors.Is(err, locker.ErrConflict) {
				t.Fatalf("SetControl with no version over a record: %v, want ErrConflict", err)
			}
			// An empty record is still a write that moves the version.
			v2, err := c.SetControl(ctx(t), locker.Control{Version: v1})
			if err != nil || v2 == v1 || v2 == "" {
				t.Fatalf("SetControl of an empty record = %q, %v (was %q); want a new version", v2, err, v1)
			}
			if _, err := c.SetControl(ctx(t), locker.Control{Version: v1, Pause: sampleControl(key).Pause}); !errors.Is(err, locker.ErrConflict) {
				t.Fatalf("SetControl with a stale version: %v, want ErrConflict", err)
			}
			got, err := c.Control(ctx(t))
			if err != nil || got.Version != v2 || got.Pause != nil || got.StepDown != nil {
				t.Fatalf("after the refused write: %+v, %v; want the empty record at %q", got, err, v2)
			}
		}},
		{"one of two racing writers wins", func(t *testing.T, key string) {
			v, err := controls(t, newLocker(t, key)).SetControl(ctx(t), locker.Control{})
			if err != nil {
				t.Fatal(err)
			}
			a, b := controls(t, newLocker(t, key)), controls(t, newLocker(t, key))
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, c := range []locker.Controls{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rec := sampleControl(key)
					rec.Version = v
					rec.Pause.Reason = []string{"first", "second"}[i]
					_, errs[i] = c.SetControl(ctx(t), rec)
				}()
			}
			wg.Wait()
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, locker.ErrConflict):
					t.Fatalf("a racing SetControl failed otherwise: %v", err)
				}
			}
			if won != 1 {
				t.Fatalf("%d of 2 racing writers at one version won (errors %v), want 1", won, errs)
			}
		}},
		{"slot keys share the key's record", func(t *testing.T, key string) {
			v, err := controls(t, newLocker(t, locker.SlotKey(key, 2))).SetControl(ctx(t), sampleControl(key))
			if err != nil {
				t.Fatal(err)
			}
			got, err := controls(t, newLocker(t, key)).Control(ctx(t))
			if err != nil || got.Version != v || got.Pause == nil {
				t.Fatalf("the key reads %+v, %v; want the record slot 2 wrote at %q", got, err, v)
			}
		}},
		{"a write needs no lease and leaves a lease alone", func(t *testing.T, key string) {
			holder := newLocker(t, key)
			lease := acquire(t, holder)
			defer lease.Release(ctx(t))
			if _, err := controls(t, newLocker(t, key)).SetControl(ctx(t), sampleControl(key)); err != nil {
				t.Fatalf("SetControl by a candidate that does not lead: %v", err)
			}
			if _, err := lease.Renew(ctx(t)); err != nil {
				t.Fatalf("Renew after a control write: %v", err)
			}
			select {
			case <-lease.Lost():
				t.Fatalf("a control write ended the lease: %s", lease.LostReason())
			default:
			}
			h, err := newLocker(t, key).Leader(ctx(t))
			if err != nil || h.Epoch != lease.Epoch() {
				t.Fatalf("Leader after a control write = %+v, %v; want epoch %d", h, err, lease.Epoch())
			}
		}},
		{"WaitControl returns on a change, and not before", func(t *testing.T, key string) {
			w := controls(t, newLocker(t, key))
			writer := controls(t, newLocker(t, key))
			v, err := writer.SetControl(ctx(t), locker.Control{})
			if err != nil {
				t.Fatal(err)
			}
			// An old version: at once.
			c, err := w.WaitControl(ctx(t), "stale")
			if err != nil || c.Version != v {
				t.Fatalf("WaitControl of an old version = %+v, %v; want version %q", c, err, v)
			}
			// The current version and no change: until ctx ends.
			short, cancel := context.WithTimeout(ctx(t), quiet)
			_, err = w.WaitControl(short, v)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("WaitControl with no change: %v, want the context's deadline", err)
			}
			type result struct {
				c   locker.Control
				err error
				at  time.Time
			}
			done := make(chan result, 1)
			go func() {
				c, err := w.WaitControl(ctx(t), v)
				done <- result{c, err, time.Now()}
			}()
			time.Sleep(pause)
			rec := sampleControl(key)
			rec.Version = v
			wrote := time.Now()
			v2, err := writer.SetControl(ctx(t), rec)
			if err != nil {
				t.Fatal(err)
			}
			bound := poll + 2*time.Second
			select {
			case r := <-done:
				if r.err != nil || r.c.Version != v2 || r.c.Pause == nil {
					t.Fatalf("WaitControl after a write = %+v, %v; want the record at %q", r.c, r.err, v2)
				}
				t.Logf("the change reached the waiter after %v", r.at.Sub(wrote).Round(time.Millisecond))
			case <-time.After(bound):
				t.Fatalf("WaitControl did not return within %v of a write", bound)
			}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, "control-"+string(rune('a'+i))+"-"+time.Now().Format("150405.000000"))
		})
	}
}

func controls(t *testing.T, l locker.Locker) locker.Controls {
	t.Helper()
	c, ok := locker.ControlsOf(l)
	if !ok {
		t.Fatalf("%T does not implement locker.Controls", l)
	}
	return c
}

func sampleControl(key string) locker.Control {
	at := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	return locker.Control{
		Pause: &locker.Pause{By: "ops@admin1", Since: at, Reason: "database migration"},
		StepDown: &locker.StepDown{
			Key: locker.SlotKey(key, 1), Epoch: 7, To: "node-b", By: "ops@admin1",
			At: at, Until: at.Add(30 * time.Second), Taken: 9,
		},
	}
}

func sameControl(a, b locker.Control) bool {
	return string(a.Record()) == string(b.Record()) && a.Version == b.Version
}
