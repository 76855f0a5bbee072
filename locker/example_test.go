package locker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// memLocker is the smallest backend there is: one key in memory. It shows
// the seam's division of labour: the backend wins the key and hands out an
// epoch that only grows, makes exactly one round trip per Renew and reports
// what it granted, and says when leadership is gone. It keeps no deadline,
// renews nothing on its own and never touches a child; the supervisor does
// all of that (DESIGN §6).
type memLocker struct {
	mu     sync.Mutex
	epoch  uint64 // last epoch granted, never reused
	holder *memLease
	opts   locker.Options
}

func (m *memLocker) Acquire(ctx context.Context) (locker.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holder != nil {
		return nil, fmt.Errorf("key %s: %w", m.opts.Key, locker.ErrHeld)
	}
	m.epoch++
	m.holder = &memLease{m: m, epoch: m.epoch, lost: make(chan struct{})}
	return m.holder, nil
}

func (m *memLocker) Leader(ctx context.Context) (locker.Holder, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holder == nil {
		return locker.Holder{}, locker.ErrNoLeader
	}
	return locker.Holder{ID: m.opts.ID, Epoch: m.holder.epoch}, nil
}

func (m *memLocker) ReleaseHandle(ctx context.Context, handle string) error { return nil }
func (m *memLocker) Close() error                                           { return nil }

type memLease struct {
	m        *memLocker
	epoch    uint64
	lost     chan struct{}
	lostOnce sync.Once
}

func (l *memLease) Epoch() uint64 { return l.epoch }

// Renew is one round trip; the caller noted the send time before calling.
func (l *memLease) Renew(ctx context.Context) (time.Duration, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if l.m.holder != l {
		return 0, locker.ErrLost
	}
	return l.m.opts.TTL, nil
}

func (l *memLease) Lost() <-chan struct{} { return l.lost }
func (l *memLease) LostReason() string    { return "" }
func (l *memLease) Handle() string        { return fmt.Sprint(l.epoch) }

func (l *memLease) Release(ctx context.Context) error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if l.m.holder == l {
		l.m.holder = nil
	}
	l.lostOnce.Do(func() { close(l.lost) })
	return nil
}

// The life of two leaderships on one key, as the supervisor drives a
// backend: acquire, renew (one round trip each, the TTL granted in
// return), release once the job is gone; the next leader's epoch is
// higher.
func Example_seam() {
	var lk locker.Locker = &memLocker{opts: locker.Options{Key: "billing", ID: "host-a", TTL: 15 * time.Second, NoWait: true}}
	ctx := context.Background()

	first, _ := lk.Acquire(ctx)
	granted, _ := first.Renew(ctx)
	fmt.Println("epoch", first.Epoch(), "granted", granted)

	_, err := lk.Acquire(ctx)
	fmt.Println("second candidate, --no-wait:", errors.Is(err, locker.ErrHeld))

	_ = first.Release(ctx) // only after the job is gone (DESIGN §1.4)
	_, err = first.Renew(ctx)
	fmt.Println("renew after release:", errors.Is(err, locker.ErrLost))

	second, _ := lk.Acquire(ctx)
	fmt.Println("next epoch", second.Epoch(), "greater:", second.Epoch() > first.Epoch())
	// Output:
	// epoch 1 granted 15s
	// second candidate, --no-wait: true
	// renew after release: true
	// next epoch 2 greater: true
}
