package leaserow

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/internal/clock/fakeclock"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

// noListenStore is a ControlNotifier that cannot listen: refused (as a
// server that refuses LISTEN) or failing (as one that is down).
type noListenStore struct {
	memStore
	refused bool
	listens *atomic.Int64
}

func (s noListenStore) ListenControl(context.Context) (ControlListen, error) {
	s.listens.Add(1)
	if s.refused {
		return nil, fmt.Errorf("mem: %w: LISTEN is not supported", locker.ErrRefused)
	}
	return nil, errors.New("mem: connection refused")
}

// TestControlWithoutListen: a store whose listen is refused, or fails,
// still passes the contract, by the poll.
func TestControlWithoutListen(t *testing.T) {
	t.Parallel()
	for _, refused := range []bool{true, false} {
		t.Run(fmt.Sprintf("refused=%v", refused), func(t *testing.T) {
			t.Parallel()
			db := newMemDB()
			var listens atomic.Int64
			lockertest.ControlContractPoll(t, testControlPoll, func(t *testing.T, key string) locker.Locker {
				st := noListenStore{memStore: memStore{db, key}, refused: refused, listens: &listens}
				return newTestLocker(t, db, key, "c", func(c *Config) { c.Store = st })
			})
			if listens.Load() == 0 {
				t.Fatal("WaitControl never tried to listen")
			}
		})
	}
}

// probeStore counts the probes and the full reads of the control record.
type probeStore struct {
	memStore
	probes, reads *atomic.Int64
}

func (s probeStore) ProbeControl(ctx context.Context) (uint64, error) {
	s.probes.Add(1)
	_, v, err := s.memStore.ReadControl(ctx)
	return v, err
}

func (s probeStore) ReadControl(ctx context.Context) ([]byte, uint64, error) {
	s.reads.Add(1)
	return s.memStore.ReadControl(ctx)
}

// TestControlProbe: with a ControlProber, WaitControl passes the contract
// and makes its full reads only when the probe saw a change.
func TestControlProbe(t *testing.T) {
	t.Parallel()
	db := newMemDB()
	var probes, reads atomic.Int64
	lockertest.ControlContractPoll(t, testControlPoll, func(t *testing.T, key string) locker.Locker {
		return newTestLocker(t, db, key, "c", func(c *Config) { c.Store = probeStore{memStore{db, key}, &probes, &reads} })
	})
	// Idle, on a fake clock at the real pace: one probe per renew
	// interval (TTL/3, at least locker.ControlPoll), and no full read.
	poll := max(locker.ControlPoll, testTTL/3)
	clk := fakeclock.New()
	l := newTestLocker(t, db, "probe-idle", "c", func(c *Config) {
		c.Store = probeStore{memStore{db, "probe-idle"}, &probes, &reads}
		c.Clock, c.ControlPoll = clk, 0
	})
	if _, err := l.SetControl(ctx(t), locker.Control{}); err != nil {
		t.Fatal(err)
	}
	probes.Store(0)
	reads.Store(0)
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := l.WaitControl(wctx, "1")
		done <- err
	}()
	clk.Settle(t)
	if p := probes.Load(); p != 1 {
		t.Fatalf("WaitControl began with %d probes, want 1", p)
	}
	clk.Advance(poll - time.Millisecond)
	clk.Settle(t)
	if p := probes.Load(); p != 1 {
		t.Fatalf("%d probes before a poll passed, want 1", p)
	}
	for range 3 {
		clk.Step(t, poll, time.Time{})
	}
	clk.Settle(t)
	select {
	case err := <-done:
		t.Fatalf("WaitControl on an unchanged record returned: %v", err)
	default:
	}
	if p, r := probes.Load(), reads.Load(); p != 4 || r != 0 {
		t.Fatalf("an idle WaitControl made %d probes and %d full reads over 3 polls; want 4 probes and no full read", p, r)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitControl after its context ended: %v", err)
	}
}
