// Package lockertest holds contract tests that every backend runs against
// its own real server, so that all backends keep the same promises, and the
// helpers the backends' own tests share over locker.Locker and
// locker.Lease (acquire, release, acquire in the background).
package lockertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// NewLocker builds a fresh Locker of the backend under test for key, as a
// separate candidate (its own client), closed when the test ends.
type NewLocker func(t *testing.T, key string) locker.Locker

// RunLogContract checks a backend's locker.RunLog: what a recorded slot
// looks like to other candidates, that only a leader can record, that a
// record outlives the leadership that wrote it, and that records expire.
// Each case uses its own key. A backend's test calls it with a NewLocker
// for its real server:
//
//	func TestRunLog(t *testing.T) {
//		srv := testcluster.StartEtcd(t, 1)
//		lockertest.RunLogContract(t, func(t *testing.T, key string) locker.Locker { ... })
//	}
func RunLogContract(t *testing.T, newLocker NewLocker) {
	RunLogContractLifetime(t, 2*time.Second, newLocker)
}

// RunLogContractLifetime is RunLogContract with life as the lifetime of
// the record that must expire (2s there): shorter for a core whose
// records expire on its own clock rather than a server's.
func RunLogContractLifetime(t *testing.T, life time.Duration, newLocker NewLocker) {
	keep := time.Hour
	cases := []struct {
		name string
		run  func(t *testing.T, key string)
	}{
		{"nothing recorded", func(t *testing.T, key string) {
			rl := runLog(t, newLocker(t, key))
			if _, err := rl.LookupRun(ctx(t), "s1"); !errors.Is(err, locker.ErrNoRun) {
				t.Fatalf("LookupRun of a fresh key: %v, want ErrNoRun", err)
			}
			if _, err := rl.LatestRun(ctx(t)); !errors.Is(err, locker.ErrNoRun) {
				t.Fatalf("LatestRun of a fresh key: %v, want ErrNoRun", err)
			}
		}},
		{"a record is seen by another candidate", func(t *testing.T, key string) {
			leader := newLocker(t, key)
			lease := acquire(t, leader)
			defer lease.Release(ctx(t))
			want := locker.NewRun(locker.Options{ID: "writer"}, "2026-11-30T03:00:00Z", locker.RunSucceeded, lease.Epoch(), keep)
			if err := runLog(t, leader).RecordRun(ctx(t), lease, want); err != nil {
				t.Fatalf("RecordRun while leading: %v", err)
			}
			other := runLog(t, newLocker(t, key))
			got, err := other.LookupRun(ctx(t), want.Slot)
			if err != nil {
				t.Fatalf("LookupRun from another candidate: %v", err)
			}
			if got.Slot != want.Slot || got.ID != "writer" || got.Epoch != lease.Epoch() || got.Outcome != locker.RunSucceeded || !got.At.Equal(want.At) {
				t.Fatalf("LookupRun = %+v, want %+v", got, want)
			}
			if _, err := other.LookupRun(ctx(t), "2026-11-30T04:00:00Z"); !errors.Is(err, locker.ErrNoRun) {
				t.Fatalf("LookupRun of another slot: %v, want ErrNoRun", err)
			}
		}},
		{"a catch-up record keeps its mark", func(t *testing.T, key string) {
			leader := newLocker(t, key)
			lease := acquire(t, leader)
			defer lease.Release(ctx(t))
			want := locker.NewRun(locker.Options{ID: "writer"}, "2026-11-30T02:00:00Z", locker.RunSucceeded, lease.Epoch(), keep)
			want.CatchUp = true
			if err := runLog(t, leader).RecordRun(ctx(t), lease, want); err != nil {
				t.Fatalf("RecordRun of a catch-up while leading: %v", err)
			}
			got, err := runLog(t, newLocker(t, key)).LookupRun(ctx(t), want.Slot)
			if err != nil || got.Slot != want.Slot || !got.CatchUp || got.Outcome != locker.RunSucceeded {
				t.Fatalf("LookupRun of a catch-up = %+v, %v; want %+v", got, err, want)
			}
		}},
		{"latest run is the newest record", func(t *testing.T, key string) {
			leader := newLocker(t, key)
			lease := acquire(t, leader)
			defer lease.Release(ctx(t))
			rl := runLog(t, leader)
			for _, slot := range []string{"b-first", "a-second"} {
				r := locker.NewRun(locker.Options{ID: "w"}, slot, locker.RunStarted, lease.Epoch(), keep)
				if err := rl.RecordRun(ctx(t), lease, r); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond) // distinct At (millisecond precision)
			}
			got, err := runLog(t, newLocker(t, key)).LatestRun(ctx(t))
			if err != nil || got.Slot != "a-second" {
				t.Fatalf("LatestRun = %+v, %v; want slot a-second", got, err)
			}
		}},
		{"only a leader records", func(t *testing.T, key string) {
			first := newLocker(t, key)
			lease := acquire(t, first)
			if err := lease.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			r := locker.NewRun(locker.Options{ID: "late"}, "s1", locker.RunSucceeded, lease.Epoch(), keep)
			if err := runLog(t, first).RecordRun(ctx(t), lease, r); err == nil {
				t.Fatal("RecordRun with a released lease succeeded")
			}
			if _, err := runLog(t, newLocker(t, key)).LookupRun(ctx(t), "s1"); !errors.Is(err, locker.ErrNoRun) {
				t.Fatalf("a refused record is visible: %v", err)
			}
		}},
		{"a record outlives its leadership", func(t *testing.T, key string) {
			first := newLocker(t, key)
			lease := acquire(t, first)
			r := locker.NewRun(locker.Options{ID: "first"}, "s1", locker.RunSucceeded, lease.Epoch(), keep)
			if err := runLog(t, first).RecordRun(ctx(t), lease, r); err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			next := newLocker(t, key)
			lease2 := acquire(t, next)
			defer lease2.Release(ctx(t))
			got, err := runLog(t, next).LookupRun(ctx(t), "s1")
			if err != nil || got.ID != "first" {
				t.Fatalf("the next leader's LookupRun = %+v, %v; want the first leader's record", got, err)
			}
		}},
		{"records expire", func(t *testing.T, key string) {
			leader := newLocker(t, key)
			lease := acquire(t, leader)
			defer lease.Release(ctx(t))
			r := locker.NewRun(locker.Options{ID: "w"}, "s1", locker.RunSucceeded, lease.Epoch(), life)
			if err := runLog(t, leader).RecordRun(ctx(t), lease, r); err != nil {
				t.Fatal(err)
			}
			rl := runLog(t, newLocker(t, key))
			if _, err := rl.LookupRun(ctx(t), "s1"); err != nil {
				t.Fatalf("a fresh record: %v", err)
			}
			deadline := time.Now().Add(15 * time.Second)
			for {
				_, err := rl.LookupRun(ctx(t), "s1")
				if errors.Is(err, locker.ErrNoRun) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("record still there 15s after a %v lifetime: %v", life, err)
				}
				time.Sleep(min(100*time.Millisecond, life/10))
			}
			if _, err := rl.LatestRun(ctx(t)); !errors.Is(err, locker.ErrNoRun) {
				t.Fatalf("LatestRun after expiry: %v, want ErrNoRun", err)
			}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, "runlog-"+string(rune('a'+i))+"-"+time.Now().Format("150405.000000"))
		})
	}
}

func ctx(t *testing.T) context.Context { return Ctx(t, 10*time.Second) }

func runLog(t *testing.T, l locker.Locker) locker.RunLog {
	t.Helper()
	rl, ok := locker.RunLogOf(l)
	if !ok {
		t.Fatalf("%T does not implement locker.RunLog", l)
	}
	return rl
}

func acquire(t *testing.T, l locker.Locker) locker.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx(t))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return lease
}
