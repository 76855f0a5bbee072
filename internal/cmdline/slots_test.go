//go:build linux

package cmdline

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// slotFake is one slot's backend: Acquire waits for free (or returns err),
// and counts the leases alive so a test sees every slot one process holds.
type slotFake struct {
	locker.Locker
	free  chan struct{} // closed: the slot can be won
	err   error         // returned at once when set
	held  *holdCount
	epoch uint64
}

type holdCount struct {
	mu        sync.Mutex
	now, most int
	released  int
}

func (h *holdCount) add(d int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now += d
	h.most = max(h.most, h.now)
	if d < 0 {
		h.released++
	}
}

func (f *slotFake) Acquire(ctx context.Context) (locker.Lease, error) {
	if f.err != nil {
		return nil, f.err
	}
	select {
	case <-f.free:
		f.held.add(1)
		return &slotLease{f: f}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type slotLease struct {
	locker.Lease
	f    *slotFake
	once sync.Once
}

func (l *slotLease) Epoch() uint64 { return l.f.epoch }
func (l *slotLease) Release(context.Context) error {
	l.once.Do(func() { l.f.held.add(-1) })
	return nil
}

func fakes(n int, h *holdCount) ([]*slotFake, []locker.Locker) {
	fs := make([]*slotFake, n)
	lks := make([]locker.Locker, n)
	for i := range fs {
		fs[i] = &slotFake{free: make(chan struct{}), held: h, epoch: uint64(10 + i)}
		lks[i] = fs[i]
	}
	return fs, lks
}

func TestRaceSlotsKeepsTheFirstWin(t *testing.T) {
	h := &holdCount{}
	fs, lks := fakes(3, h)
	go func() { time.Sleep(20 * time.Millisecond); close(fs[1].free) }()
	won, err := raceSlots(context.Background(), lks, hclog.NewNullLogger())
	if err != nil || won.Slot != 1 || won.Lease.Epoch() != 11 {
		t.Fatalf("raceSlots = slot %d, %v; want slot 1", won.Slot, err)
	}
	if h.now != 1 {
		t.Errorf("%d leases held after the race, want 1", h.now)
	}
}

// Every slot free at once: each attempt may win, and all but one are
// given back before raceSlots returns.
func TestRaceSlotsReleasesSecondWins(t *testing.T) {
	for range 50 {
		h := &holdCount{}
		fs, lks := fakes(4, h)
		for _, f := range fs {
			close(f.free)
		}
		won, err := raceSlots(context.Background(), lks, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		if h.now != 1 {
			t.Fatalf("%d leases held after the race (slot %d won), want 1", h.now, won.Slot)
		}
	}
}

func TestRaceSlotsNoWaitAllHeld(t *testing.T) {
	h := &holdCount{}
	fs, lks := fakes(3, h)
	for _, f := range fs {
		f.err = locker.ErrHeld
	}
	_, err := raceSlots(context.Background(), lks, hclog.NewNullLogger())
	if !errors.Is(err, locker.ErrHeld) {
		t.Fatalf("err = %v, want ErrHeld", err)
	}
}

// A refusal on one slot ends the campaign; a slot won meanwhile is given
// back.
func TestRaceSlotsRefusalHoldsNothing(t *testing.T) {
	h := &holdCount{}
	fs, lks := fakes(3, h)
	close(fs[0].free)
	fs[2].err = locker.ErrRefused
	_, err := raceSlots(context.Background(), lks, hclog.NewNullLogger())
	if err == nil {
		// slot 0 may have won before the refusal arrived: that is a win.
		if h.now != 1 {
			t.Fatalf("%d held", h.now)
		}
		return
	}
	if !errors.Is(err, locker.ErrRefused) || h.now != 0 {
		t.Fatalf("err = %v with %d held; want ErrRefused and none", err, h.now)
	}
}

func TestRaceSlotsCancelledHoldsNothing(t *testing.T) {
	h := &holdCount{}
	_, lks := fakes(3, h)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := raceSlots(ctx, lks, hclog.NewNullLogger()); !errors.Is(err, context.DeadlineExceeded) || h.now != 0 {
		t.Fatalf("err = %v with %d held", err, h.now)
	}
}

func TestCheckHolders(t *testing.T) {
	holders := map[int]locker.Holder{0: {ID: "a", Holders: 3}, 2: {ID: "c", Holders: 3}}
	read := func(_ context.Context, s int) (slotRecord, error) {
		if h, ok := holders[s]; ok {
			return slotRecord{Holder: h}, nil
		}
		return slotRecord{}, locker.ErrNoLeader
	}
	check := func(n, own, bound int) error {
		a := newAgreement("k", n, nil, read, hclog.NewNullLogger())
		a.pause = time.Millisecond
		_, err := a.checkHolders(context.Background(), own, bound)
		return err
	}
	if err := check(3, -1, 4); err != nil {
		t.Errorf("agreeing holders refused: %v", err)
	}
	err := check(2, -1, 3)
	if !errors.Is(err, errHoldersDiffer) || !strings.Contains(err.Error(), "--holders 2") || !strings.Contains(err.Error(), "--holders 3") {
		t.Errorf("--holders 2 against 3: %v", err)
	}
	// A holder of slot N: a candidate with more slots.
	holders = map[int]locker.Holder{3: {ID: "d", Holders: 5}}
	if err := check(3, -1, 4); !errors.Is(err, errHoldersDiffer) {
		t.Errorf("holder of slot 3 with --holders 5 not seen by --holders 3: %v", err)
	}
	// A holder of today's key (no holders field) counts as 1.
	holders = map[int]locker.Holder{0: {ID: "old"}}
	if err := check(3, -1, 4); err == nil || !strings.Contains(err.Error(), "--holders 1") {
		t.Errorf("a --holders 1 holder of slot 0 not refused: %v", err)
	}
	if err := check(3, 0, 4); err != nil {
		t.Errorf("own slot checked: %v", err)
	}
}

// A record of another N that a new holder of our N replaces while it is
// confirmed is no disagreement: the local backend's lock file shows the
// last holder's record until the next holder, which holds the flock
// already, writes its own.
func TestCheckHoldersStaleRecord(t *testing.T) {
	reads := 0
	read := func(_ context.Context, s int) (slotRecord, error) {
		if s != 1 {
			return slotRecord{}, locker.ErrNoLeader
		}
		reads++
		if reads < 3 {
			return slotRecord{Holder: locker.Holder{ID: "gone", Holders: 4, Epoch: 7}}, nil
		}
		return slotRecord{Holder: locker.Holder{ID: "new", Holders: 2, Epoch: 8}}, nil
	}
	check := func() error {
		a := newAgreement("k", 2, nil, read, hclog.NewNullLogger())
		a.pause = time.Millisecond
		_, err := a.checkHolders(context.Background(), 0, 3)
		return err
	}
	if err := check(); err != nil {
		t.Fatalf("a record replaced while confirmed refused: %v", err)
	}
	// One that stays is a live holder.
	read = func(_ context.Context, s int) (slotRecord, error) {
		if s != 1 {
			return slotRecord{}, locker.ErrNoLeader
		}
		return slotRecord{Holder: locker.Holder{ID: "n4", Holders: 4, Epoch: 7}}, nil
	}
	if err := check(); !errors.Is(err, errHoldersDiffer) || !strings.Contains(err.Error(), "n4") {
		t.Fatalf("a live holder of --holders 4: %v", err)
	}
}

// memControls is a control record in memory, its version a counter; hook
// runs before each read.
type memControls struct {
	mu      sync.Mutex
	c       locker.Control
	version int
	reads   int
	writes  int
}

func (m *memControls) Control(context.Context) (locker.Control, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	c := m.c
	c.Version = strconv.Itoa(m.version)
	return c, nil
}

func (m *memControls) SetControl(_ context.Context, c locker.Control) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.Version != strconv.Itoa(m.version) {
		return "", locker.ErrConflict
	}
	m.writes++
	m.version++
	c.Version = ""
	m.c = c
	return strconv.Itoa(m.version), nil
}

func (m *memControls) WaitControl(context.Context, string) (locker.Control, error) {
	panic("not used")
}

func (m *memControls) holders() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c.Holders
}

// slotTable is the holders of a key's slots, read like Leader.
type slotTable struct {
	mu    sync.Mutex
	held  map[int]locker.Holder
	reads []int
	hook  func(slot int)
}

func (st *slotTable) read(_ context.Context, s int) (slotRecord, error) {
	if st.hook != nil {
		st.hook(s)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.reads = append(st.reads, s)
	if h, ok := st.held[s]; ok {
		return slotRecord{Holder: h}, nil
	}
	return slotRecord{}, locker.ErrNoLeader
}

func testAgreement(key string, n int, ctl locker.Controls, st *slotTable) *agreement {
	a := newAgreement(key, n, ctl, st.read, hclog.NewNullLogger())
	a.pause, a.poll = time.Millisecond, time.Millisecond
	return a
}

// The holder of a slot above a candidate's N is found, whichever came
// first: the first to win raises the key's bound, so a candidate of fewer
// slots reads the slots up to it.
func TestAgreementSlotAboveN(t *testing.T) {
	ctl := &memControls{}
	st := &slotTable{held: map[int]locker.Holder{}}
	// Four candidates of 4 won slots 0..3; all but slot 3's stopped.
	for s := range 4 {
		st.held[s] = locker.Holder{ID: "n4_" + strconv.Itoa(s), Holders: 4, Epoch: uint64(s + 1)}
		if err := testAgreement("k", 4, ctl, st).won(context.Background(), s); err != nil {
			t.Fatalf("n4_%d: %v", s, err)
		}
	}
	if ctl.holders() != 4 {
		t.Fatalf("bound %d after candidates of 4 won, want 4", ctl.holders())
	}
	delete(st.held, 0)
	delete(st.held, 1)
	delete(st.held, 2)
	// A candidate of 2 is refused before campaigning ...
	err := testAgreement("k", 2, ctl, st).before(context.Background())
	if !errors.Is(err, errHoldersDiffer) || !strings.Contains(err.Error(), "slot 3") || !strings.Contains(err.Error(), "n4_3") {
		t.Fatalf("--holders 2 beside the holder of slot 3 of 4, before campaigning: %v", err)
	}
	// ... and after winning slot 0.
	st.held[0] = locker.Holder{ID: "n2_0", Holders: 2, Epoch: 9}
	if err := testAgreement("k", 2, ctl, st).won(context.Background(), 0); !errors.Is(err, errHoldersDiffer) {
		t.Fatalf("--holders 2 beside the holder of slot 3 of 4, after winning: %v", err)
	}
	if ctl.holders() != 4 {
		t.Errorf("bound lowered to %d while slot 3 is held", ctl.holders())
	}
	// Once slot 3 is free, --holders 2 runs and lowers the bound.
	delete(st.held, 3)
	if err := testAgreement("k", 2, ctl, st).won(context.Background(), 0); err != nil {
		t.Fatalf("--holders 2 with no slot above held: %v", err)
	}
	if ctl.holders() != 2 {
		t.Errorf("bound %d once no slot above 2 is held, want 2", ctl.holders())
	}
	// A candidate of 4 now raises it again and is refused by n2_0.
	if err := testAgreement("k", 4, ctl, st).won(context.Background(), 3); !errors.Is(err, errHoldersDiffer) {
		t.Fatalf("--holders 4 beside a holder of 2: %v", err)
	}
	if ctl.holders() != 4 {
		t.Errorf("bound %d after a candidate of 4 won, want 4", ctl.holders())
	}
}

// A bound lowered while a candidate of more slots reads the slots (by a
// candidate of fewer that then let go) is raised again and read again, so
// a later candidate of fewer slots still finds it.
func TestAgreementBoundLoweredMeanwhile(t *testing.T) {
	ctl := &memControls{c: locker.Control{Holders: 4}}
	st := &slotTable{held: map[int]locker.Holder{3: {ID: "y", Holders: 4, Epoch: 5}}}
	lowered := false
	st.hook = func(s int) {
		if s == 0 && !lowered {
			lowered = true
			c, _ := ctl.Control(context.Background())
			c.Holders = 2
			if _, err := ctl.SetControl(context.Background(), c); err != nil {
				t.Errorf("lowering: %v", err)
			}
		}
	}
	if err := testAgreement("k", 4, ctl, st).won(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	if ctl.holders() != 4 {
		t.Fatalf("bound %d after the candidate of 4 checked, want 4", ctl.holders())
	}
	st.hook = nil
	st.held[0] = locker.Holder{ID: "x", Holders: 2, Epoch: 6}
	if err := testAgreement("k", 2, ctl, st).won(context.Background(), 0); !errors.Is(err, errHoldersDiffer) {
		t.Fatalf("later candidate of 2 beside y: %v", err)
	}
}

// A candidate of one slot reads the control record once and no slot
// while no candidate of more slots has been there; else it reads their
// slots and is refused beside one of them.
func TestAgreementOneHolder(t *testing.T) {
	ctl := &memControls{}
	st := &slotTable{held: map[int]locker.Holder{0: {ID: "one", Epoch: 1}}}
	if err := testAgreement("k", 1, ctl, st).won(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if ctl.reads != 1 || ctl.writes != 0 || len(st.reads) != 0 {
		t.Errorf("--holders 1: %d reads and %d writes of the record, slots read %v; want one read", ctl.reads, ctl.writes, st.reads)
	}
	ctl.c.Holders = 3
	st.held[2] = locker.Holder{ID: "three", Holders: 3, Epoch: 2}
	err := testAgreement("k", 1, ctl, st).won(context.Background(), 0)
	if !errors.Is(err, errHoldersDiffer) || !strings.Contains(err.Error(), "--holders 1") || !strings.Contains(err.Error(), "--holders 3") {
		t.Fatalf("--holders 1 beside a holder of 3: %v", err)
	}
	delete(st.held, 2)
	if err := testAgreement("k", 1, ctl, st).won(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if ctl.holders() != 0 {
		t.Errorf("bound %d once no holder of 3 is left, want unset", ctl.holders())
	}
}

// --holders out of range, a '~' in a key and a --slot out of range are
// one-line 125s, and nothing runs.
func TestHoldersBadInput(t *testing.T) {
	dir := t.TempDir()
	local := []string{"--backend", "local", "--lock-dir", dir}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(append([]string{}, local...), "--key", "k", "--holders", "0", "--", "true"), "--holders must be from 1 to 64, got 0"},
		{append(append([]string{}, local...), "--key", "k", "--holders", "65", "--", "true"), "--holders must be from 1 to 64, got 65"},
		{append(append([]string{}, local...), "--key", "k~1", "--", "true"), "--key \"k~1\" must match"},
		{append([]string{"check", "--slot", "64", "--epoch", "1"}, append(local, "k")...), "--slot must be from 0 to 63, got 64"},
		{append([]string{"status", "--holders", "0"}, append(local, "k")...), "--holders must be from 1 to 64, got 0"},
	} {
		code, _, errOut := leaderrun(t, nil, c.args...)
		if code != 125 || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%q: exit %d, %q; want 125 and one line with %q", c.args, code, errOut, c.want)
		}
	}
}

// On a backend that expires nothing, a holder of another N whose record
// stays the same for its TTL and allowance is gone, and is not asked
// about again at that version; one whose record changes is live.
func TestCheckHoldersObserved(t *testing.T) {
	version := 1
	renew := false
	read := func(_ context.Context, s int) (slotRecord, error) {
		if s != 3 {
			return slotRecord{}, locker.ErrNoLeader
		}
		if renew {
			version++
		}
		return slotRecord{Holder: locker.Holder{ID: "n4_3", Holders: 4, Epoch: 4}, version: strconv.Itoa(version), ttl: 20 * time.Millisecond}, nil
	}
	a := newAgreement("k", 2, nil, read, hclog.NewNullLogger())
	a.pause, a.poll = time.Millisecond, 2*time.Millisecond
	unread, err := a.checkHolders(context.Background(), 0, 4)
	if err != nil || unread != 1 || a.dead[3] != "1" {
		t.Fatalf("a record unchanged for its TTL: unread %d, %v, dead %v; want gone, not free", unread, err, a.dead)
	}
	a.poll = time.Hour // not watched again
	if _, err := a.checkHolders(context.Background(), 0, 4); err != nil {
		t.Fatalf("a record seen gone, read again: %v", err)
	}
	renew, a.poll = true, 2*time.Millisecond
	if _, err := a.checkHolders(context.Background(), 0, 4); !errors.Is(err, errHoldersDiffer) {
		t.Fatalf("a renewed holder of --holders 4: %v", err)
	}
}

// A record that cannot be read again is not one seen unchanged: a holder
// is gone only by a read that still finds its record after its TTL.
func TestCheckHoldersObservedUnreadable(t *testing.T) {
	first := true
	read := func(_ context.Context, s int) (slotRecord, error) {
		if s != 3 {
			return slotRecord{}, locker.ErrNoLeader
		}
		if !first {
			return slotRecord{}, errors.New("backend down")
		}
		first = false
		return slotRecord{Holder: locker.Holder{ID: "n4_3", Holders: 4, Epoch: 4}, version: "1", ttl: 20 * time.Millisecond}, nil
	}
	a := newAgreement("k", 2, nil, read, hclog.NewNullLogger())
	a.pause, a.poll = time.Millisecond, 2*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := a.checkHolders(ctx, 0, 4); !errors.Is(err, errHoldersDiffer) {
		t.Fatalf("a holder of --holders 4 whose record could not be read again: %v, want refused", err)
	}
}

// countingSlot counts the attempts on a slot that fails every one alike.
type countingSlot struct {
	*slotFake
	calls atomic.Int32
}

func (c *countingSlot) Acquire(ctx context.Context) (locker.Lease, error) {
	c.calls.Add(1)
	return c.slotFake.Acquire(ctx)
}

// TestSlotCampaignRepeatedFailureWarnsOnce: a slot whose backend fails
// every attempt with the same error warns once, then logs the repeats at
// INFO, as the campaign for a key without slots does: -q under cron
// mails the first failure, not a line every retry.
func TestSlotCampaignRepeatedFailureWarnsOnce(t *testing.T) {
	var buf testsupport.SyncBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn})
	lk := &countingSlot{slotFake: &slotFake{err: errors.New("dial tcp 10.0.0.1:2379: connect: connection refused")}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan slotResult, 1)
	go func() { done <- campaignSlot(ctx, 1, lk, log) }()
	// Three attempts (the backoff starts at 0.5s), then the end.
	for deadline := time.Now().Add(60 * time.Second); lk.calls.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	if n := lk.calls.Load(); n < 3 {
		t.Fatalf("%d attempts within 60s, want 3 or more", n)
	}
	if n := strings.Count(buf.String(), "campaign failed, retrying"); n != 1 {
		t.Errorf("%d WARN lines for %d attempts failing alike, want 1:\n%s", n, lk.calls.Load(), buf.String())
	}
}
