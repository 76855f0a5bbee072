package records

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// memStore is a Store in memory: versions are a counter, a lease stands
// while memLease.held is set.
type memStore struct {
	mu      sync.Mutex
	recs    map[Kind]map[string]memRec
	next    int
	changed chan struct{} // closed and replaced at every write

	getErr   error // returned by the next gets, while set
	waitErr  error // returned by every native wait, while set
	gets     int
	waits    int
	expiring bool
	kept     map[string]bool // run records listed as Kept
}

type memRec struct {
	value   []byte
	version string
}

type memLease struct {
	locker.Lease
	held bool
}

func newMem() *memStore {
	return &memStore{recs: map[Kind]map[string]memRec{Control: {}, Term: {}, Run: {}}, changed: make(chan struct{})}
}

func (m *memStore) write(kind Kind, name string, value []byte) string {
	m.next++
	v := strconv.Itoa(m.next)
	m.recs[kind][name] = memRec{append([]byte(nil), value...), v}
	close(m.changed)
	m.changed = make(chan struct{})
	return v
}

func (m *memStore) Get(ctx context.Context, kind Kind, name string) ([]byte, string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gets++
	if m.getErr != nil {
		return nil, "", false, m.getErr
	}
	r, ok := m.recs[kind][name]
	return r.value, r.version, ok, nil
}

func (m *memStore) Swap(ctx context.Context, kind Kind, name, prev string, value []byte) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recs[kind][name].version != prev {
		return "", fmt.Errorf("mem: %w", locker.ErrConflict)
	}
	return m.write(kind, name, value), nil
}

func (m *memStore) Put(ctx context.Context, kind Kind, name string, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.write(kind, name, value)
	return nil
}

func (m *memStore) PutHeld(ctx context.Context, lease locker.Lease, kind Kind, name string, value []byte, expires time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := lease.(*memLease); !ok || !l.held {
		return fmt.Errorf("mem: %w", locker.ErrLost)
	}
	m.write(kind, name, value)
	return nil
}

func (m *memStore) List(ctx context.Context, kind Kind, values bool) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Entry
	for n, r := range m.recs[kind] {
		e := Entry{Name: n, Kept: kind == Run && m.kept[n]}
		if values {
			e.Value = r.value
		}
		out = append(out, e)
	}
	return out, nil
}

func (m *memStore) Delete(ctx context.Context, kind Kind, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs[kind], name)
	return nil
}

func (m *memStore) RunsExpire() bool { return m.expiring }

// memWaiter adds a native wait to memStore.
type memWaiter struct{ *memStore }

func (m memWaiter) WaitControl(ctx context.Context, version string) ([]byte, string, bool, error) {
	m.mu.Lock()
	m.waits++
	if err := m.waitErr; err != nil {
		m.mu.Unlock()
		return nil, "", false, err
	}
	r, ok := m.recs[Control][""]
	ch := m.changed
	m.mu.Unlock()
	if r.version != version {
		return r.value, r.version, ok, nil
	}
	select {
	case <-ctx.Done():
		return nil, "", false, ctx.Err()
	case <-ch:
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok = m.recs[Control][""]
	return r.value, r.version, ok, nil
}

// fakeClock advances by every Sleep at once, and records them.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
	onSlp  func(n int) // called after the nth sleep (1-based)
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) bool {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	n, f := len(c.sleeps), c.onSlp
	c.mu.Unlock()
	if f != nil {
		f(n)
	}
	return ctx.Err() == nil
}

func newCore(s Store, clk *fakeClock) *Core {
	return New(Config{Store: s, Name: "mem", Key: "jobs", Clock: clk, Final: func(err error) bool { return errors.Is(err, errFinal) }})
}

var errFinal = errors.New("mem: closed")

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestControlReadWrite(t *testing.T) {
	m := newMem()
	r := newCore(m, &fakeClock{})
	ctx := testCtx(t)
	c, err := r.Control(ctx)
	if err != nil || c.Version != "" {
		t.Fatalf("fresh Control = %+v, %v", c, err)
	}
	v, err := r.SetControl(ctx, locker.Control{Pause: &locker.Pause{By: "ops@a", Reason: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetControl(ctx, locker.Control{}); !errors.Is(err, locker.ErrConflict) {
		t.Fatalf("create over a record: %v, want ErrConflict", err)
	}
	c, err = r.Control(ctx)
	if err != nil || c.Version != v || c.Pause == nil || c.Pause.Reason != "x" {
		t.Fatalf("Control = %+v, %v; want the pause at %q", c, err, v)
	}
	m.write(Control, "", []byte("not json"))
	var bad *locker.BadControlError
	if _, err := r.Control(ctx); !errors.As(err, &bad) || bad.Version == "" {
		t.Fatalf("a record that does not parse: %v, want a BadControlError with its version", err)
	}
}

// Without a native wait the record is read every ControlPoll, and a
// change is returned at the first read after it.
func TestWaitControlPolls(t *testing.T) {
	m := newMem()
	v := m.write(Control, "", []byte(`{}`))
	clk := &fakeClock{}
	clk.onSlp = func(n int) {
		if n == 3 {
			m.mu.Lock()
			m.write(Control, "", []byte(`{"pause":{"by":"b","since":"2026-01-01T00:00:00Z","reason":"r"}}`))
			m.mu.Unlock()
		}
	}
	c, err := newCore(m, clk).WaitControl(testCtx(t), v)
	if err != nil || c.Version == v || c.Pause == nil {
		t.Fatalf("WaitControl = %+v, %v", c, err)
	}
	for _, d := range clk.sleeps {
		if d != locker.ControlPoll {
			t.Fatalf("poll paused %v, want every %v (%v)", d, locker.ControlPoll, clk.sleeps)
		}
	}
	if len(clk.sleeps) != 3 || m.gets != 4 {
		t.Fatalf("%d sleeps, %d reads; want 3 and 4", len(clk.sleeps), m.gets)
	}
}

// Failed reads are retried from WaitRetryMin doubling to ControlPoll, and
// a refusal or a Final error ends the wait at once.
func TestWaitControlRetries(t *testing.T) {
	m := newMem()
	m.getErr = errors.New("mem: out of reach")
	clk := &fakeClock{}
	clk.onSlp = func(n int) {
		if n == 6 {
			m.mu.Lock()
			m.getErr = nil
			m.write(Control, "", []byte(`{}`))
			m.mu.Unlock()
		}
	}
	c, err := newCore(m, clk).WaitControl(testCtx(t), "")
	if err != nil || c.Version == "" {
		t.Fatalf("WaitControl = %+v, %v", c, err)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if fmt.Sprint(clk.sleeps) != fmt.Sprint(want) {
		t.Fatalf("pauses %v, want %v", clk.sleeps, want)
	}

	for _, final := range []error{fmt.Errorf("mem: %w", locker.ErrRefused), errFinal} {
		m.getErr = final
		clk := &fakeClock{}
		if _, err := newCore(m, clk).WaitControl(testCtx(t), "7"); !errors.Is(err, final) || len(clk.sleeps) != 0 {
			t.Fatalf("WaitControl on %v: %v after %d pauses; want the error at once", final, err, len(clk.sleeps))
		}
	}
}

// A native wait is used instead of the poll: it returns on the write, and
// a native wait that fails is begun again after the shared backoff.
func TestWaitControlNative(t *testing.T) {
	m := newMem()
	v := m.write(Control, "", []byte(`{}`))
	w := memWaiter{m}
	clk := &fakeClock{}
	done := make(chan error, 1)
	go func() {
		c, err := newCore(w, clk).WaitControl(testCtx(t), v)
		if err == nil && c.Pause == nil {
			err = fmt.Errorf("returned %+v", c)
		}
		done <- err
	}()
	for {
		m.mu.Lock()
		waiting := m.waits > 0
		m.mu.Unlock()
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	m.mu.Lock()
	m.write(Control, "", []byte(`{"pause":{"by":"b","since":"2026-01-01T00:00:00Z","reason":"r"}}`))
	m.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(clk.sleeps) != 0 || m.gets != 0 {
		t.Fatalf("%d pauses, %d plain reads with a native wait; want none", len(clk.sleeps), m.gets)
	}

	m.waitErr = errors.New("mem: watch broke")
	clk = &fakeClock{}
	clk.onSlp = func(n int) {
		if n == 3 {
			m.mu.Lock()
			m.waitErr = nil
			m.mu.Unlock()
			m.mu.Lock()
			m.write(Control, "", []byte(`{}`))
			m.mu.Unlock()
		}
	}
	if _, err := newCore(w, clk).WaitControl(testCtx(t), v); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	if fmt.Sprint(clk.sleeps) != fmt.Sprint(want) {
		t.Fatalf("pauses %v, want %v", clk.sleeps, want)
	}
}

// A native wait that keeps returning the same version at once is paced,
// not a busy loop.
type sameWaiter struct {
	*memStore
	clk *fakeClock
}

func (s sameWaiter) WaitControl(ctx context.Context, version string) ([]byte, string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waits++
	r, ok := s.recs[Control][""]
	return r.value, r.version, ok, nil
}

func TestWaitControlNativePaced(t *testing.T) {
	m := newMem()
	v := m.write(Control, "", []byte(`{}`))
	clk := &fakeClock{}
	ctx, cancel := context.WithCancel(testCtx(t))
	clk.onSlp = func(n int) {
		if n == 5 {
			cancel()
		}
	}
	_, err := newCore(sameWaiter{m, clk}, clk).WaitControl(ctx, v)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitControl = %v, want canceled", err)
	}
	if len(clk.sleeps) != 5 || clk.sleeps[0] != WaitRetryMin || clk.sleeps[4] != locker.ControlPoll {
		t.Fatalf("pauses %v; want the backoff from %v to %v", clk.sleeps, WaitRetryMin, locker.ControlPoll)
	}
}

func TestHistoryPrunes(t *testing.T) {
	m := newMem()
	r := newCore(m, &fakeClock{})
	ctx := testCtx(t)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.write(Term, "junk", []byte("x"))                                           // not a term name: left alone
	m.write(Term, locker.TermName(99), locker.Term{Epoch: 98, ID: "a"}.Record()) // under another epoch's name
	for e := uint64(1); e <= 5; e++ {
		if err := r.RecordTerm(ctx, locker.Term{Epoch: e, ID: "n", Start: start}, 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.RecordTerm(ctx, locker.Term{}, 3); err == nil {
		t.Fatal("a term with no epoch was recorded")
	}
	if _, ok := m.recs[Term]["junk"]; !ok {
		t.Fatal("a record that is no term's was pruned")
	}
	terms, err := r.Terms(ctx, 0)
	if err != nil || len(terms) != 2 || terms[0].Epoch != 5 || terms[1].Epoch != 4 {
		t.Fatalf("Terms = %+v, %v; want 5, 4 (99 is under the wrong name, 3 pruned with it)", terms, err)
	}
	terms, err = r.Terms(ctx, 1)
	if err != nil || len(terms) != 1 || terms[0].Epoch != 5 {
		t.Fatalf("Terms(1) = %+v, %v", terms, err)
	}
}

func TestRunLog(t *testing.T) {
	m := newMem()
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newCore(m, clk)
	ctx := testCtx(t)
	held := &memLease{held: true}
	run := func(slot string, at time.Time, keep time.Duration) locker.Run {
		return locker.Run{Slot: slot, Outcome: locker.RunSucceeded, ID: "w", Epoch: 1, At: at, Expires: at.Add(keep)}
	}
	if err := r.RecordRun(ctx, held, run("old", clk.now, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := r.RecordRun(ctx, &memLease{}, run("lost", clk.now, time.Hour)); !errors.Is(err, locker.ErrLost) {
		t.Fatalf("RecordRun without the lease: %v, want ErrLost", err)
	}
	if err := r.RecordRun(ctx, held, run("bad/slot", clk.now, time.Hour)); err == nil {
		t.Fatal("a bad slot was recorded")
	}
	if got, err := r.LookupRun(ctx, "old"); err != nil || got.Slot != "old" {
		t.Fatalf("LookupRun = %+v, %v", got, err)
	}
	clk.now = clk.now.Add(2 * time.Minute)
	if _, err := r.LookupRun(ctx, "old"); !errors.Is(err, locker.ErrNoRun) {
		t.Fatalf("an expired record: %v, want ErrNoRun", err)
	}
	if _, err := r.LatestRun(ctx); !errors.Is(err, locker.ErrNoRun) {
		t.Fatalf("LatestRun of expired records: %v, want ErrNoRun", err)
	}
	// The next write prunes the expired record, unless the server expires
	// records by itself.
	m.expiring = true
	if err := r.RecordRun(ctx, held, run("a", clk.now, time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.recs[Run]["old"]; !ok {
		t.Fatal("pruned on a Store whose server expires records")
	}
	m.expiring = false
	if err := r.RecordRun(ctx, held, run("b", clk.now.Add(time.Second), time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.recs[Run]["old"]; ok {
		t.Fatal("the expired record was not pruned")
	}
	if got, err := r.LatestRun(ctx); err != nil || got.Slot != "b" {
		t.Fatalf("LatestRun = %+v, %v; want b", got, err)
	}
}

// A Kept record is read but never pruned, and a run record under another
// slot's name counts for none.
func TestRunLogKeptAndMisnamed(t *testing.T) {
	m := newMem()
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newCore(m, clk)
	ctx := testCtx(t)
	at := clk.now
	m.write(Run, "old", locker.Run{Slot: "old", At: at, Expires: at.Add(time.Minute)}.Record())
	m.write(Run, "other", locker.Run{Slot: "elsewhere", At: at.Add(time.Second), Expires: at.Add(time.Hour)}.Record())
	m.kept = map[string]bool{"old": true}
	if got, err := r.LatestRun(ctx); err != nil || got.Slot != "old" {
		t.Fatalf("LatestRun = %+v, %v; want old (the later one is under another slot's name)", got, err)
	}
	clk.now = at.Add(2 * time.Minute)
	if err := r.RecordRun(ctx, &memLease{held: true}, locker.Run{Slot: "new", At: clk.now, Expires: clk.now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.recs[Run]["old"]; !ok {
		t.Fatal("a Kept record was pruned")
	}
}

// batchStore writes and prunes terms in one call.
type batchStore struct {
	*memStore
	keeps []int
}

func (b *batchStore) PutTerm(ctx context.Context, name string, value []byte, keep int) error {
	b.keeps = append(b.keeps, keep)
	return b.Put(ctx, Term, name, value)
}

func (b *batchStore) List(ctx context.Context, kind Kind, values bool) ([]Entry, error) {
	if kind == Term {
		panic("listed the terms of a TermBatcher")
	}
	return b.memStore.List(ctx, kind, values)
}

func TestHistoryBatched(t *testing.T) {
	b := &batchStore{memStore: newMem()}
	r := newCore(b, &fakeClock{})
	for e := uint64(1); e <= 2; e++ {
		if err := r.RecordTerm(testCtx(t), locker.Term{Epoch: e}, int(e)-1); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(b.keeps) != fmt.Sprint([]int{locker.DefaultHistoryKeep, 1}) {
		t.Fatalf("PutTerm keeps %v, want [%d 1]", b.keeps, locker.DefaultHistoryKeep)
	}
}
