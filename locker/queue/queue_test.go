package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
)

var (
	near = ttl + observe.Allowance(ttl)
	deep = 3*ttl + observe.Allowance(3*ttl)
)

func TestSaidAndMode(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0"}, {1, "1"}, {2, "?"}, {Unknown, "?"}} {
		if got := Said(tc.n); got != tc.want {
			t.Errorf("Said(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct {
		e          Entry
		near, head bool
	}{
		{Entry{Unsaid: true}, true, false}, // an older leaderrun's rewrites
		{Entry{Said: "0"}, true, true},
		{Entry{Said: "1"}, true, false},
		{Entry{Said: "?"}, false, false},
		{Entry{Said: ""}, false, false}, // says something, not a place
	} {
		if n, h := Mode(tc.e); n != tc.near || h != tc.head {
			t.Errorf("Mode(%+v) = %v, %v; want %v, %v", tc.e, n, h, tc.near, tc.head)
		}
	}
	c := Config{TTL: ttl}
	if d, judged := c.Silence(Entry{Said: "?"}); judged {
		t.Errorf("without DeepTTL a deep entry is judged by silence (%v)", d)
	}
	kubeLike(&c)
	if d, judged := c.Silence(Entry{Said: "?"}); !judged || d != 3*ttl {
		t.Errorf("deep silence %v %v, want 3 x TTL", d, judged)
	}
	if c.DeepBound() != deep || c.AncientAfter(Entry{Said: "1"}) != 3*near || c.AncientAfter(Entry{Said: "?"}) != 3*deep {
		t.Errorf("bounds: deep %v, ancient near %v, ancient deep %v", c.DeepBound(), c.AncientAfter(Entry{Said: "1"}), c.AncientAfter(Entry{Said: "?"}))
	}
	if RetryFor(ttl) != 30*time.Second || RetryFor(time.Minute) != 3*(time.Minute+observe.Allowance(time.Minute)) {
		t.Errorf("RetryFor: %v, %v", RetryFor(ttl), RetryFor(time.Minute))
	}
}

// TestAloneIsHead: with no other entry the candidate is the head at once,
// and says so.
func TestAloneIsHead(t *testing.T) {
	f := newFixture(t)
	f.join()
	f.mustBeHead()
	if !slices.Equal(f.mem.declared, []int64{0}) || f.sim.elapsed() != 0 {
		t.Fatalf("%v; want one declaration of 0 at once", f)
	}
}

// TestOrder: the queue is ordered by rank, then key, whatever the order of
// the listing; the candidate follows the live entry just ahead of its own
// and moves up as each ahead leaves; entries behind it, or without a
// rank, do not count.
func TestOrder(t *testing.T) {
	f := newFixture(t)
	a := f.mem.put("a", "0")
	b := f.mem.put("b", "1")
	c := f.mem.put("c", "?")
	c2 := f.mem.put("c2", "?")
	c2.Rank = c.Rank // same rank: by key, c first
	f.join()
	f.mem.put("behind", "?")
	orphan := f.mem.put("orphan", "?")
	orphan.Rank, orphan.Placed = ^uint64(0), false
	for _, k := range []string{"a", "b", "c", "behind", "orphan"} {
		f.sim.every(ttl/2, func() bool { return f.mem.write(k) })
	}
	// They leave in turn, from the back of those ahead: each time the
	// candidate follows the next one ahead.
	for i, k := range []string{"c2", "c", "b", "a"} {
		f.sim.after(time.Duration(i+1)*10*ttl, func() { delete(f.mem.entries, k) })
	}
	f.mustBeHead()
	if want := []string{"c2", "c", "b", "a"}; !slices.Equal(f.mem.followed, want) {
		t.Fatalf("followed %v, want %v", f.mem.followed, want)
	}
	if len(f.mem.deleted) != 0 {
		t.Fatalf("deleted %v: every entry was alive", f.mem.deleted)
	}
	// Right behind the head once only a and the head remained: "1", then
	// "0" (its place declared as soon as known).
	if !slices.Equal(f.mem.declared, []int64{1, 0}) {
		t.Fatalf("declared %v, want [1 0]", f.mem.declared)
	}
	_, _ = a, b
}

// TestSilentNearSkipped: an entry that rewrites (near the head, or an
// older leaderrun's that says nothing) and stops is skipped and deleted
// once unchanged for TTL + allowance on the successor's clock, and no
// sooner.
func TestSilentNearSkipped(t *testing.T) {
	for _, said := range []string{"0", "1", ""} {
		for _, name := range []string{"consul", "kubernetes"} {
			t.Run(fmt.Sprintf("%s/said=%q", name, said), func(t *testing.T) {
				f := newFixture(t, map[string]func(*Config){"consul": consulLike, "kubernetes": kubeLike}[name])
				f.mem.put("dead", said)
				f.join()
				f.mustBeHead()
				if f.sim.elapsed() != near || !slices.Equal(f.mem.deleted, []string{"dead"}) {
					t.Fatalf("%v; want the dead entry deleted after %v", f, near)
				}
			})
		}
	}
}

// TestRewritingNotSkipped: an entry near the head rewritten every TTL/2
// (Kubernetes) or TTL/3 (Consul) is never skipped; its candidate's
// leaving lets the successor up.
func TestRewritingNotSkipped(t *testing.T) {
	for _, beat := range []time.Duration{ttl / 3, ttl / 2, near - time.Millisecond} {
		f := newFixture(t, kubeLike)
		f.mem.put("live", "1")
		f.join()
		f.sim.every(beat, func() bool { return f.mem.write("live") })
		f.sim.after(20*ttl, func() { delete(f.mem.entries, "live") })
		f.mustBeHead()
		if len(f.mem.deleted) != 0 || f.sim.elapsed() != 20*ttl {
			t.Fatalf("beat %v: %v; want no deletion and the head at 20 TTLs", beat, f)
		}
	}
}

// TestDeepSilence: without sessions a deep entry ("?") is skipped only
// after 3 x TTL + allowance of silence; one on its slow beat (2 x TTL) is
// never skipped.
func TestDeepSilence(t *testing.T) {
	f := newFixture(t, kubeLike)
	f.mem.put("head", "0")
	f.mem.put("deep", "?")
	f.join()
	f.sim.every(ttl/2, func() bool { return f.mem.write("head") })
	f.sim.after(30*ttl, func() { delete(f.mem.entries, "head") })
	f.mustBeHead()
	if !slices.Equal(f.mem.deleted, []string{"deep"}) {
		t.Fatalf("%v; want the deep entry deleted", f)
	}
	if got := f.mem.followed[0]; got != "deep" || f.sim.elapsed() != 30*ttl {
		t.Fatalf("%v", f)
	}

	// Its skip came after deep, not after near: time it alone.
	g := newFixture(t, kubeLike)
	g.mem.put("deep", "?")
	g.join()
	g.mustBeHead()
	if g.sim.elapsed() != deep {
		t.Fatalf("the silent deep entry was skipped after %v, want %v", g.sim.elapsed(), deep)
	}

	h := newFixture(t, kubeLike)
	h.mem.put("deep", "?")
	h.join()
	h.sim.every(2*ttl, func() bool { return h.mem.write("deep") })
	h.sim.after(40*ttl, func() { delete(h.mem.entries, "deep") })
	h.mustBeHead()
	if len(h.mem.deleted) != 0 || h.sim.elapsed() != 40*ttl {
		t.Fatalf("a deep entry on its beat: %v", h)
	}
}

// TestDeepWaitsForTheSession: where the backend ends a dead candidate's
// entry (Consul's session), a silent deep entry is waited on until it is
// ended; the ended entry is then dead at once, and deleted.
func TestDeepWaitsForTheSession(t *testing.T) {
	f := newFixture(t, consulLike)
	f.mem.put("deep", "?")
	f.join()
	f.sim.after(2*ttl, func() { f.mem.entries["deep"].Ended = true; f.mem.touch(f.mem.entries["deep"]) })
	f.mustBeHead()
	if f.sim.elapsed() != 2*ttl || !slices.Equal(f.mem.deleted, []string{"deep"}) {
		t.Fatalf("%v; want the head at 2 TTLs, the ended entry deleted", f)
	}
	g := newFixture(t, consulLike)
	g.mem.put("deep", "?")
	g.mem.entries["deep"].Ended = true
	g.join()
	g.mustBeHead()
	if g.sim.elapsed() != 0 || len(g.mem.followed) != 0 {
		t.Fatalf("an ended entry was followed: %v", g)
	}
}

// TestAncient: without sessions an entry the server last wrote more than
// three silence bounds (and a second) before the queue's newest write is
// skipped at once; the stamp its writer put in it counts only when the
// server keeps no times, so a writer whose clock is behind is not skipped.
func TestAncient(t *testing.T) {
	type setup func(f *fixture, e *Entry)
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		set     setup
		ancient bool
	}{
		{"old by the server", kubeLike, func(f *fixture, e *Entry) { e.Written = f.sim.now.Add(-3*near - 2*time.Second) }, true},
		{"just within", kubeLike, func(f *fixture, e *Entry) { e.Written = f.sim.now.Add(-3*near - time.Second) }, false},
		{"deep, within its bound", kubeLike, func(f *fixture, e *Entry) { e.Said = "?"; e.Written = f.sim.now.Add(-3*near - 2*time.Second) }, false},
		{"deep, old", kubeLike, func(f *fixture, e *Entry) { e.Said = "?"; e.Written = f.sim.now.Add(-3*deep - 2*time.Second) }, true},
		{"writer's clock behind", kubeLike, func(f *fixture, e *Entry) { e.Stamp = f.sim.now.Add(-time.Hour) }, false},
		{"no server times, old stamp", kubeLike, func(f *fixture, e *Entry) {
			e.Written = time.Time{}
			e.Stamp = f.sim.now.Add(-3*near - time.Millisecond)
		}, true},
		{"no server times, no stamp", kubeLike, func(f *fixture, e *Entry) { e.Written, e.Stamp = time.Time{}, time.Time{} }, true},
		{"no server times, recent stamp", kubeLike, func(f *fixture, e *Entry) { e.Written = time.Time{} }, false},
		{"with sessions", consulLike, func(f *fixture, e *Entry) { e.Written, e.Stamp = time.Time{}, time.Time{} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.mod)
			f.sim.now = f.sim.now.Add(time.Hour)
			f.sim.start = f.sim.now
			e := f.mem.put("old", "1")
			tc.set(f, e)
			f.join()
			f.mustBeHead() // at once when ancient, else once silent
			if atOnce := f.sim.elapsed() == 0; atOnce != tc.ancient || !slices.Equal(f.mem.deleted, []string{"old"}) {
				t.Fatalf("%v; want ancient %v", f, tc.ancient)
			}
		})
	}
}

// TestFrozenTogether: entries that stopped together hold the candidate
// up for one bound in all, not one each: every live entry is observed
// from the first read.
func TestFrozenTogether(t *testing.T) {
	for _, name := range []string{"consul", "kubernetes"} {
		f := newFixture(t, map[string]func(*Config){"consul": consulLike, "kubernetes": kubeLike}[name])
		for _, k := range []string{"a", "b", "c"} {
			f.mem.put(k, "")
		}
		f.join()
		f.mustBeHead()
		if f.sim.elapsed() != near || len(f.mem.deleted) != 3 {
			t.Fatalf("%s: %v; want all three passed after %v", name, f, near)
		}
	}
}

// TestTidying: the candidate deletes only the dead entries between its
// predecessor and itself (it is the one that moves past them), each only
// as read, and a dead entry without a rank wherever it stands.
func TestTidying(t *testing.T) {
	f := newFixture(t, consulLike)
	f.mem.put("deadFirst", "?").Ended = true
	f.mem.put("live", "1")
	f.mem.put("deadBetween", "?").Ended = true
	f.join()
	f.mem.put("deadBehind", "?").Ended = true
	o := f.mem.put("orphan", "?")
	o.Ended, o.Placed, o.Rank = true, false, ^uint64(0)
	f.sim.every(ttl/3, func() bool { return f.mem.write("live") })
	f.sim.after(ttl, func() { delete(f.mem.entries, "live") })
	if err := f.wait(nil); err != nil {
		t.Fatal(err)
	}
	// First read: deadBetween and the orphan; once live left, deadFirst
	// is between the candidate and nobody.
	if len(f.mem.deleted) == 3 {
		slices.Sort(f.mem.deleted[:2]) // one read: in no order
	}
	if want := []string{"deadBetween", "orphan", "deadFirst"}; !slices.Equal(f.mem.deleted, want) {
		t.Fatalf("deleted %v, want %v", f.mem.deleted, want)
	}
	if !f.present("deadBehind") {
		t.Fatal("a dead entry behind the candidate was deleted")
	}
}

// TestOwnEntryGone: a candidate whose entry was deleted (it was frozen,
// and skipped) writes it again at the tail and counts its place afresh.
func TestOwnEntryGone(t *testing.T) {
	f := newFixture(t, kubeLike)
	f.mem.put("a", "0")
	f.join()
	f.mem.put("b", "?")
	for _, k := range []string{"a", "b"} {
		f.sim.every(ttl/2, func() bool { return f.mem.write(k) })
	}
	f.sim.after(ttl, func() { delete(f.mem.entries, f.mem.mine) })
	f.sim.after(10*ttl, func() { delete(f.mem.entries, "a") })
	f.sim.after(20*ttl, func() { delete(f.mem.entries, "b") })
	f.mustBeHead()
	if f.mem.rejoined != 1 || f.sim.elapsed() != 20*ttl {
		t.Fatalf("rejoined %d times; %v; want once, and the head once b left", f.mem.rejoined, f)
	}
	if want := []string{"a", "b"}; !slices.Equal(f.mem.followed, want) {
		t.Fatalf("followed %v, want %v (behind b after rejoining)", f.mem.followed, want)
	}
	// 1 behind a (the head); once a left and we are back at the tail,
	// behind b alone, 1 again (a write of the new entry); then the head.
	if want := []int64{1, 1, 0}; !slices.Equal(f.mem.declared, want) {
		t.Fatalf("declared %v, want %v", f.mem.declared, want)
	}
}

// TestHeadAheadDeclares: a candidate behind an entry that says it is the
// head learns it is right behind it, and declares so at once, with no
// read of the whole queue.
func TestHeadAheadDeclares(t *testing.T) {
	f := newFixture(t, kubeLike)
	f.mem.put("x", "?")
	f.mem.put("y", "?")
	f.join()
	for _, k := range []string{"x", "y"} {
		f.sim.every(ttl/2, func() bool { return f.mem.write(k) })
	}
	var at []int64
	f.sim.after(ttl, func() {
		f.mem.entries["y"].Said = "0" // y became the head (x went, y read it)
		delete(f.mem.entries, "x")
		at = slices.Clone(f.mem.declared)
	})
	f.sim.after(ttl+time.Millisecond, func() { at = append(at, -1); at = append(at, f.mem.declared...) })
	f.sim.after(10*ttl, func() { delete(f.mem.entries, "y") })
	f.mustBeHead()
	if want := []int64{-1, 1}; !slices.Equal(at, want) {
		t.Fatalf("declarations before/after y said it was the head: %v, want %v", at, want)
	}
	if want := []int64{1, 0}; !slices.Equal(f.mem.declared, want) || f.mem.followed[0] != "y" {
		t.Fatalf("%v", f)
	}
}

// TestCancel: WaitTurn returns the context's error as soon as it ends,
// whether it follows an entry or waits to retry.
func TestCancel(t *testing.T) {
	f := newFixture(t, consulLike)
	f.mem.put("a", "?")
	f.join()
	ctx, cancel := context.WithCancel(context.Background())
	f.sim.after(5*ttl, cancel)
	if err := f.wait(ctx); !errors.Is(err, context.Canceled) || f.sim.elapsed() != 5*ttl {
		t.Fatalf("following: %v, %v", err, f)
	}

	g := newFixture(t)
	g.join()
	for range 100 {
		g.mem.listErr = append(g.mem.listErr, errors.New("unavailable"))
	}
	ctx, cancel = context.WithCancel(context.Background())
	g.sim.after(time.Second, cancel)
	if err := g.wait(ctx); !errors.Is(err, context.Canceled) || g.sim.elapsed() != time.Second {
		t.Fatalf("retrying: %v, %v", err, g)
	}
}

// TestFailures: a failure that may pass is retried, for RetryFor at most;
// a refusal, of the read or of the watch, makes the candidate campaign as
// the head at once; any other failure of the watch reads the queue again.
func TestFailures(t *testing.T) {
	refused := fmt.Errorf("list: %w", locker.ErrRefused)
	f := newFixture(t)
	f.join()
	f.mem.listErr = []error{errors.New("500"), errors.New("timeout")}
	f.mustBeHead()
	if f.sim.elapsed() != 300*time.Millisecond || len(f.mem.listErr) != 0 {
		t.Fatalf("two failures then a read: %v", f)
	}

	g := newFixture(t)
	g.join()
	g.mem.put("a", "?") // behind us: not in the way
	for range 1000 {
		g.mem.listErr = append(g.mem.listErr, errors.New("500"))
	}
	g.mustBeHead()
	if e := g.sim.elapsed(); e < RetryFor(ttl) || e > RetryFor(ttl)+2*time.Second {
		t.Fatalf("gave up on a failing queue after %v, want RetryFor %v", e, RetryFor(ttl))
	}

	h := newFixture(t)
	h.mem.put("a", "?")
	h.join()
	h.mem.listErr = []error{refused}
	h.mustBeHead()
	if h.sim.elapsed() != 0 {
		t.Fatalf("refused: %v", h)
	}

	i := newFixture(t)
	i.mem.put("a", "?")
	i.join()
	i.mem.followErr = refused
	i.mustBeHead()
	if i.sim.elapsed() != 0 || i.present("a") == false {
		t.Fatalf("watch refused: %v", i)
	}

	j := newFixture(t)
	j.mem.put("a", "?")
	j.join()
	j.mem.followErr = errors.New("watch ended")
	j.sim.after(time.Second, func() { j.mem.followErr = nil })
	j.sim.after(5*ttl, func() { delete(j.mem.entries, "a") })
	j.mustBeHead()
	if j.sim.elapsed() != 5*ttl || len(j.mem.followed) != 1 {
		t.Fatalf("watch failing for a second: %v", j)
	}
}

// TestJoin: the first write is retried while it may pass, within the run
// limit and within (for Consul, half the session's TTL); a refusal ends it
// at once.
func TestJoin(t *testing.T) {
	s := newSim(t)
	cfg := Config{TTL: ttl, Clock: s}
	retryable := func(err error) bool { return !errors.Is(err, locker.ErrRefused) }
	tries := 0
	err := Join(context.Background(), cfg, retryable, 0, func(context.Context) error {
		if tries++; tries < 4 {
			return errors.New("500")
		}
		return nil
	})
	if err != nil || tries != 4 || s.elapsed() != 700*time.Millisecond {
		t.Fatalf("%v after %d tries at %v", err, tries, s.elapsed())
	}

	s = newSim(t)
	cfg.Clock = s
	tries = 0
	err = Join(context.Background(), cfg, retryable, ttl/2, func(context.Context) error { tries++; return errors.New("500") })
	if err == nil || s.elapsed() < ttl/2 || s.elapsed() > ttl {
		t.Fatalf("within TTL/2: %v after %d tries at %v", err, tries, s.elapsed())
	}

	s = newSim(t)
	cfg.Clock = s
	tries = 0
	err = Join(context.Background(), cfg, retryable, 0, func(context.Context) error { tries++; return locker.ErrRefused })
	if !errors.Is(err, locker.ErrRefused) || tries != 1 {
		t.Fatalf("refused: %v after %d tries", err, tries)
	}
}
