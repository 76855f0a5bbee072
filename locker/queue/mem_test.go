package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// sim is a simulated clock: time moves only when the core waits (Sleep, or
// a Follower's Next), straight to the next scheduled event, so that rules
// counted in TTLs run in microseconds.
type sim struct {
	t      *testing.T
	start  time.Time
	now    time.Time
	events []event
	seq    int
}

type event struct {
	at  time.Time
	seq int
	do  func()
}

func newSim(t *testing.T) *sim {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &sim{t: t, start: start, now: start}
}

func (s *sim) Now() time.Time { return s.now }

// elapsed is the simulated time since the start.
func (s *sim) elapsed() time.Duration { return s.now.Sub(s.start) }

// after schedules do at d from now.
func (s *sim) after(d time.Duration, do func()) {
	s.seq++
	s.events = append(s.events, event{s.now.Add(d), s.seq, do})
	slices.SortFunc(s.events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.seq - b.seq
	})
}

// every runs do every d from now on, while it returns true.
func (s *sim) every(d time.Duration, do func() bool) {
	var tick func()
	tick = func() {
		if do() {
			s.after(d, tick)
		}
	}
	s.after(d, tick)
}

// advance runs the events due up to to, stopping early after an event
// once stop reports true; then the clock reads to (or the time of the
// event it stopped after). A wait without a bound (to zero) runs events
// until stop; with none left, the core would wait for ever.
func (s *sim) advance(to time.Time, stop func() bool) {
	if s.elapsed() > 24*time.Hour {
		s.t.Fatalf("a simulated day has passed")
	}
	for len(s.events) > 0 && (to.IsZero() || !s.events[0].at.After(to)) {
		ev := s.events[0]
		s.events = s.events[1:]
		s.now = ev.at
		ev.do()
		if stop() {
			return
		}
	}
	if to.IsZero() {
		s.t.Fatalf("at %v the core waits without a bound and nothing is left to happen", s.elapsed())
	}
	s.now = to
}

func (s *sim) Sleep(ctx context.Context, d time.Duration) bool {
	s.advance(s.now.Add(d), func() bool { return ctx.Err() != nil })
	return ctx.Err() == nil
}

// mem is a Store in memory. The server's clock is the sim's.
type mem struct {
	sim     *sim
	mine    string
	entries map[string]*Entry
	rank    uint64
	version int

	lists     int
	listErr   []error // the next List calls fail with these, in turn
	followErr error   // Follow fails with it
	// what the candidate did
	declared []int64
	deleted  []string
	followed []string
	rejoined int
}

func newMem(s *sim) *mem {
	return &mem{sim: s, mine: "me", entries: map[string]*Entry{}}
}

// put adds an entry at the tail that says said ("" for nothing).
func (m *mem) put(key, said string) *Entry {
	m.rank++
	e := &Entry{Key: key, Rank: m.rank, Placed: true, Said: said, Unsaid: said == ""}
	m.entries[key] = e
	m.touch(e)
	return e
}

// touch records a write of e by the server.
func (m *mem) touch(e *Entry) {
	m.version++
	e.Version = strconv.Itoa(m.version)
	e.Written = m.sim.now
	e.Stamp = m.sim.now
}

// write rewrites key's entry, as its live candidate does; false once gone.
func (m *mem) write(key string) bool {
	e := m.entries[key]
	if e == nil {
		return false
	}
	m.touch(e)
	return true
}

func (m *mem) List(ctx context.Context) (*Entry, []Entry, error) {
	if m.lists++; m.lists > 10000 {
		m.sim.t.Fatalf("the queue was read %d times by %v: a loop", m.lists, m.sim.elapsed())
	}
	if len(m.listErr) > 0 {
		err := m.listErr[0]
		m.listErr = m.listErr[1:]
		return nil, nil, err
	}
	var mine *Entry
	var others []Entry
	for k, e := range m.entries { // in no order: the core orders them
		if k == m.mine {
			c := *e
			mine = &c
			continue
		}
		others = append(others, *e)
	}
	return mine, others, nil
}

func (m *mem) Rejoin(ctx context.Context) error {
	m.rejoined++
	m.put(m.mine, "?")
	return nil
}

func (m *mem) Declare(ctx context.Context, ahead int64) (int64, error) {
	e := m.entries[m.mine]
	if e == nil {
		return 0, errors.New("no entry")
	}
	m.declared = append(m.declared, ahead)
	e.Said, e.Unsaid = Said(ahead), false
	m.touch(e)
	return ahead, nil
}

func (m *mem) Delete(ctx context.Context, e Entry) error {
	if cur := m.entries[e.Key]; cur != nil && cur.Version == e.Version {
		delete(m.entries, e.Key)
		m.deleted = append(m.deleted, e.Key)
	}
	return nil
}

func (m *mem) Follow(ctx context.Context, e Entry) (Follower, error) {
	if m.followErr != nil {
		return nil, m.followErr
	}
	m.followed = append(m.followed, e.Key)
	return &memFollower{m: m, key: e.Key, version: e.Version}, nil
}

func (m *mem) Retryable(err error) bool { return !errors.Is(err, locker.ErrRefused) }

type memFollower struct {
	m       *mem
	key     string
	version string
}

func (f *memFollower) Next(ctx context.Context, wait time.Duration) (Entry, bool, error) {
	changed := func() bool {
		e := f.m.entries[f.key]
		return ctx.Err() != nil || e == nil || e.Version != f.version
	}
	var to time.Time
	if wait != Forever {
		to = f.m.sim.now.Add(wait)
	}
	if !changed() {
		f.m.sim.advance(to, changed)
	}
	if ctx.Err() != nil {
		return Entry{}, false, ctx.Err()
	}
	e := f.m.entries[f.key]
	if e == nil || e.Ended {
		return Entry{}, true, nil
	}
	f.version = e.Version
	return *e, false, nil
}

func (*memFollower) Stop() {}

// fixture is a candidate "me" in a queue on mem, with a backend's config.
type fixture struct {
	t     *testing.T
	sim   *sim
	mem   *mem
	place *Place
	cfg   Config
}

const ttl = 3 * time.Second

// consulLike: sessions end dead entries, silence judges only the near.
func consulLike(c *Config) {}

// kubeLike: no sessions; deep entries judged by a slower silence, and the
// ancient rule.
func kubeLike(c *Config) { c.DeepTTL, c.Ancient = 3*ttl, true }

func newFixture(t *testing.T, mods ...func(*Config)) *fixture {
	s := newSim(t)
	f := &fixture{t: t, sim: s, mem: newMem(s), place: NewPlace(),
		cfg: Config{TTL: ttl, Clock: s}}
	for _, m := range mods {
		m(&f.cfg)
	}
	return f
}

// join puts our entry at the tail.
func (f *fixture) join() { f.mem.put(f.mem.mine, "?") }

// wait runs WaitTurn on ctx (a fresh one when nil).
func (f *fixture) wait(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return New(f.cfg, f.mem, f.place).WaitTurn(ctx)
}

func (f *fixture) mustBeHead() {
	f.t.Helper()
	if err := f.wait(nil); err != nil {
		f.t.Fatalf("WaitTurn: %v", err)
	}
	if a := f.place.Ahead(); a != 0 {
		f.t.Fatalf("returned with %d known ahead, want 0", a)
	}
}

func (f *fixture) present(key string) bool { return f.mem.entries[key] != nil }

func (f *fixture) String() string {
	return fmt.Sprintf("at %v: declared %v, deleted %v, followed %v", f.sim.elapsed(), f.mem.declared, f.mem.deleted, f.mem.followed)
}
