package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// countingStore counts the reads the core makes through a store, and
// says when each of its control listens has begun.
type countingStore struct {
	*store
	reads     atomic.Int64 // of the control record
	rowReads  atomic.Int64 // of the lease row
	listening chan struct{}
}

func (c *countingStore) ReadControl(ctx context.Context) ([]byte, uint64, error) {
	c.reads.Add(1)
	return c.store.ReadControl(ctx)
}

func (c *countingStore) Read(ctx context.Context) (leaserow.Row, error) {
	c.rowReads.Add(1)
	return c.store.Read(ctx)
}

func (c *countingStore) ListenControl(ctx context.Context) (leaserow.ControlListen, error) {
	lis, err := c.store.ListenControl(ctx)
	if err == nil {
		select {
		case c.listening <- struct{}{}:
		default:
		}
	}
	return lis, err
}

// countingLocker is newLocker's Locker on a countingStore, with the
// core's default poll; mods change the store before the Locker is built.
func countingLocker(t *testing.T, dsn, key string, mods ...func(*store)) (*leaserow.Locker, *countingStore) {
	t.Helper()
	return countingLockerWith(t, dsn, key, 2*time.Second, 0, mods...)
}

// countingLockerWith is countingLocker with a TTL and a poll of its own.
func countingLockerWith(t *testing.T, dsn, key string, ttl, poll time.Duration, mods ...func(*store)) (*leaserow.Locker, *countingStore) {
	t.Helper()
	cfg := Config{
		Options: locker.Options{Key: key, Prefix: "lrtest", ID: fmt.Sprintf("%s-%d", key, candidates.Add(1)),
			TTL: ttl, Version: "test"},
		DSN: dsn, ConnectTimeout: 2 * time.Second, Logger: lockertest.DebugLogger(key),
	}
	st, err := newStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		m(st)
	}
	cs := &countingStore{store: st, listening: make(chan struct{}, 1)}
	l, err := leaserow.New(leaserow.Config{Options: cfg.Options, Store: cs, Name: "postgres", Poll: poll, Timeout: st.timeout, Logger: cfg.Logger})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, cs
}

// waitControl runs WaitControl in the background; its answer comes on the
// channel.
func waitControl(ctx context.Context, c locker.Controls, version string) <-chan error {
	done := make(chan error, 1)
	go func() {
		got, err := c.WaitControl(ctx, version)
		if err == nil && got.Version == version {
			err = fmt.Errorf("WaitControl returned version %q, the one it waited past", got.Version)
		}
		done <- err
	}()
	return done
}

// TestControlWaitIsIdle: a WaitControl on a record nobody writes reads it
// once and then waits for a notice, not once a second; a write to another
// key of the table does not wake it; a write to its own wakes it at once.
func TestControlWaitIsIdle(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	key := lockertest.Key(t)
	l, cs := countingLocker(t, pg.DSN(), key)
	writer := newLocker(t, pg.DSN(), key)
	other := newLocker(t, pg.DSN(), key+"-other")
	cur, err := l.Control(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	cs.reads.Store(0)
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	done := waitControl(wctx, l, cur.Version)

	const idle = 5 * time.Second
	time.Sleep(idle / 2)
	oc, err := other.Control(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.SetControl(ctx(t), locker.Control{Version: oc.Version}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(idle / 2)
	select {
	case err := <-done:
		t.Fatalf("WaitControl returned with nothing written to its key: %v", err)
	default:
	}
	if n := cs.reads.Load(); n > 2 {
		t.Fatalf("an idle WaitControl read the control record %d times in %s; want at most 2", n, idle)
	}

	wrote := time.Now()
	if _, err := writer.SetControl(ctx(t), locker.Control{Version: cur.Version, Pause: &locker.Pause{By: "test", Reason: "idle"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("a write reached WaitControl in %s, after %d reads", time.Since(wrote), cs.reads.Load())
	case <-time.After(3 * time.Second):
		t.Fatal("WaitControl did not return within 3s of a write to its key")
	}
}
