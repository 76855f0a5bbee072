//go:build linux

package cmdline

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker"
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
	read := func(_ context.Context, s int) (locker.Holder, error) {
		if h, ok := holders[s]; ok {
			return h, nil
		}
		return locker.Holder{}, locker.ErrNoLeader
	}
	if err := checkHolders(context.Background(), "k", 3, -1, read); err != nil {
		t.Errorf("agreeing holders refused: %v", err)
	}
	err := checkHolders(context.Background(), "k", 2, -1, read)
	if !errors.Is(err, errHoldersDiffer) || !strings.Contains(err.Error(), "--holders 2") || !strings.Contains(err.Error(), "--holders 3") {
		t.Errorf("--holders 2 against 3: %v", err)
	}
	// A holder of slot N: a candidate with more slots.
	holders = map[int]locker.Holder{3: {ID: "d", Holders: 5}}
	if err := checkHolders(context.Background(), "k", 3, -1, read); !errors.Is(err, errHoldersDiffer) {
		t.Errorf("holder of slot 3 with --holders 5 not seen by --holders 3: %v", err)
	}
	// A holder of today's key (no holders field) counts as 1.
	holders = map[int]locker.Holder{0: {ID: "old"}}
	if err := checkHolders(context.Background(), "k", 3, -1, read); err == nil || !strings.Contains(err.Error(), "--holders 1") {
		t.Errorf("a --holders 1 holder of slot 0 not refused: %v", err)
	}
	if err := checkHolders(context.Background(), "k", 3, 0, read); err != nil {
		t.Errorf("own slot checked: %v", err)
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
