package lockertest

import (
	"slices"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// HistoryContract checks a backend's locker.History: an empty history, a
// term's start record replaced by its end record, what other candidates and
// new clients see, the order and limit of Terms, pruning to the newest keep
// terms, and that a record needs no lease. Epochs come from real leases.
// Each case uses its own key. A backend's test calls it with a NewLocker
// for its real server, as for RunLogContract.
func HistoryContract(t *testing.T, newLocker NewLocker) {
	cases := []struct {
		name string
		run  func(t *testing.T, key string)
	}{
		{"no history", func(t *testing.T, key string) {
			terms, err := history(t, newLocker(t, key)).Terms(ctx(t), 0)
			if err != nil || len(terms) != 0 {
				t.Fatalf("Terms of a fresh key = %+v, %v; want none", terms, err)
			}
			// A key that is led but has no record yet has no history either.
			lease := acquire(t, newLocker(t, key))
			defer lease.Release(ctx(t))
			terms, err = history(t, newLocker(t, key)).Terms(ctx(t), 5)
			if err != nil || len(terms) != 0 {
				t.Fatalf("Terms of a led key without records = %+v, %v; want none", terms, err)
			}
		}},
		{"the end record replaces the start record", func(t *testing.T, key string) {
			l := newLocker(t, key)
			lease := acquire(t, l)
			h := history(t, l)
			start := term(lease.Epoch(), "writer", time.Now())
			start.Slot, start.SlotOutcome, start.Period = "2026-11-30T03:00:00Z", locker.RunStarted, time.Hour
			if err := h.RecordTerm(ctx(t), start, 5); err != nil {
				t.Fatalf("RecordTerm at the start: %v", err)
			}
			got := oneTerm(t, h)
			if !got.End.IsZero() || got.Ended != "" || got.Slot != start.Slot || got.Period != time.Hour {
				t.Fatalf("the start record reads %+v, want %+v", got, start)
			}
			if err := lease.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			end := start
			end.End, end.Ended, end.ExitCode, end.SlotOutcome = start.Start.Add(time.Second), locker.TermExited, intp(3), "failed"
			end.CatchUp = true // a --catch-up term's mark is kept
			// What the job said over its notify socket is kept.
			end.Ready, end.Status = start.Start.Add(200*time.Millisecond), "copying 3 of 7"

			if err := h.RecordTerm(ctx(t), end, 5); err != nil {
				t.Fatalf("RecordTerm at the end: %v", err)
			}
			got = oneTerm(t, h)
			if !sameTerm(got, end) {
				t.Fatalf("after the end record: %+v, want %+v", got, end)
			}
		}},
		{"another candidate sees the record", func(t *testing.T, key string) {
			l := newLocker(t, key)
			lease := acquire(t, l)
			defer lease.Release(ctx(t))
			want := term(lease.Epoch(), "writer", time.Now())
			if err := history(t, l).RecordTerm(ctx(t), want, 5); err != nil {
				t.Fatal(err)
			}
			if got := oneTerm(t, history(t, newLocker(t, key))); !sameTerm(got, want) {
				t.Fatalf("another candidate reads %+v, want %+v", got, want)
			}
		}},
		{"newest first, cut to the limit", func(t *testing.T, key string) {
			epochs := recordTerms(t, newLocker, key, 4, 10)
			h := history(t, newLocker(t, key))
			all, err := h.Terms(ctx(t), 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := epochsOf(all); !slices.Equal(got, reversed(epochs)) {
				t.Fatalf("Terms(0) epochs = %v, want %v", got, reversed(epochs))
			}
			two, err := h.Terms(ctx(t), 2)
			if err != nil {
				t.Fatal(err)
			}
			if got := epochsOf(two); !slices.Equal(got, reversed(epochs)[:2]) {
				t.Fatalf("Terms(2) epochs = %v, want %v", got, reversed(epochs)[:2])
			}
		}},
		{"pruning keeps exactly the newest keep", func(t *testing.T, key string) {
			epochs := recordTerms(t, newLocker, key, 5, 3)
			terms, err := history(t, newLocker(t, key)).Terms(ctx(t), 0)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := epochsOf(terms), reversed(epochs)[:3]; !slices.Equal(got, want) {
				t.Fatalf("after 5 terms kept 3: epochs %v, want %v", got, want)
			}
			// A smaller keep prunes further on the next write.
			l := newLocker(t, key)
			lease := acquire(t, l)
			defer lease.Release(ctx(t))
			if err := history(t, l).RecordTerm(ctx(t), term(lease.Epoch(), "last", time.Now()), 1); err != nil {
				t.Fatal(err)
			}
			terms, err = history(t, newLocker(t, key)).Terms(ctx(t), 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := epochsOf(terms); !slices.Equal(got, []uint64{lease.Epoch()}) {
				t.Fatalf("after keep 1: epochs %v, want [%d]", got, lease.Epoch())
			}
		}},
		{"a record outlives its writer's client", func(t *testing.T, key string) {
			l := newLocker(t, key)
			lease := acquire(t, l)
			want := term(lease.Epoch(), "closed", time.Now())
			if err := history(t, l).RecordTerm(ctx(t), want, 5); err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if got := oneTerm(t, history(t, newLocker(t, key))); !sameTerm(got, want) {
				t.Fatalf("a new client reads %+v, want %+v", got, want)
			}
		}},
		{"written without a lease", func(t *testing.T, key string) {
			l := newLocker(t, key)
			lease := acquire(t, l)
			if err := lease.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			// Another candidate leads now; the released term's record is
			// still written.
			other := acquire(t, newLocker(t, key))
			defer other.Release(ctx(t))
			want := term(lease.Epoch(), "released", time.Now())
			want.End, want.Ended = want.Start.Add(time.Second), locker.TermLost
			if err := history(t, l).RecordTerm(ctx(t), want, 5); err != nil {
				t.Fatalf("RecordTerm after Release: %v", err)
			}
			if got := oneTerm(t, history(t, newLocker(t, key))); !sameTerm(got, want) {
				t.Fatalf("reads %+v, want %+v", got, want)
			}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, "history-"+string(rune('a'+i))+"-"+time.Now().Format("150405.000000"))
		})
	}
}

func history(t *testing.T, l locker.Locker) locker.History {
	t.Helper()
	h, ok := locker.As[locker.History](l)
	if !ok {
		t.Fatalf("%T does not implement locker.History", l)
	}
	return h
}

// term is a start record of epoch at start (millisecond precision, as a
// JSON round trip keeps it exactly).
func term(epoch uint64, id string, start time.Time) locker.Term {
	return locker.Term{Epoch: epoch, ID: id, Hostname: "host-" + id, PID: 4242, Start: start.UTC().Truncate(time.Millisecond)}
}

// recordTerms runs n terms of key one after the other, each recording its
// start and, after its release, its end with keep; it returns their epochs
// in order.
func recordTerms(t *testing.T, newLocker NewLocker, key string, n, keep int) []uint64 {
	t.Helper()
	var epochs []uint64
	for i := range n {
		l := newLocker(t, key)
		lease := acquire(t, l)
		h := history(t, l)
		tm := term(lease.Epoch(), "w"+string(rune('0'+i)), time.Now())
		if err := h.RecordTerm(ctx(t), tm, keep); err != nil {
			t.Fatalf("term %d: RecordTerm at the start: %v", i, err)
		}
		if err := lease.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		tm.End, tm.Ended, tm.ExitCode = time.Now().UTC().Truncate(time.Millisecond), locker.TermExited, intp(0)
		if err := h.RecordTerm(ctx(t), tm, keep); err != nil {
			t.Fatalf("term %d: RecordTerm at the end: %v", i, err)
		}
		if len(epochs) > 0 && lease.Epoch() <= epochs[len(epochs)-1] {
			t.Fatalf("epoch %d after %d", lease.Epoch(), epochs[len(epochs)-1])
		}
		epochs = append(epochs, lease.Epoch())
	}
	return epochs
}

func oneTerm(t *testing.T, h locker.History) locker.Term {
	t.Helper()
	terms, err := h.Terms(ctx(t), 0)
	if err != nil {
		t.Fatalf("Terms: %v", err)
	}
	if len(terms) != 1 {
		t.Fatalf("Terms = %+v, want exactly one", terms)
	}
	return terms[0]
}

func sameTerm(a, b locker.Term) bool {
	exit := func(p *int) int {
		if p == nil {
			return -1
		}
		return *p
	}
	return a.Epoch == b.Epoch && a.ID == b.ID && a.Hostname == b.Hostname && a.PID == b.PID &&
		a.Start.Equal(b.Start) && a.End.Equal(b.End) && a.Ended == b.Ended && exit(a.ExitCode) == exit(b.ExitCode) &&
		a.Reason == b.Reason && a.Slot == b.Slot && a.SlotOutcome == b.SlotOutcome && a.Period == b.Period &&
		a.CatchUp == b.CatchUp && a.Ready.Equal(b.Ready) && a.Status == b.Status
}

func epochsOf(terms []locker.Term) []uint64 {
	out := make([]uint64, len(terms))
	for i, t := range terms {
		out[i] = t.Epoch
	}
	return out
}

func reversed(e []uint64) []uint64 {
	out := make([]uint64, len(e))
	for i, v := range e {
		out[len(e)-1-i] = v
	}
	return out
}

func intp(v int) *int { return &v }
