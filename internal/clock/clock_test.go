package clock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/internal/clock"
	"github.com/leaderrun/leaderrun/internal/clock/fakeclock"
)

// WithTimeout on a fake clock ends when the clock has moved d on, with the
// error a real timeout gives, and not before; its cancel ends it as
// context.Canceled.
func TestWithTimeoutOnAFakeClock(t *testing.T) {
	c := fakeclock.New()
	ctx, cancel := clock.WithTimeout(context.Background(), c, time.Second)
	defer cancel()
	c.Advance(999 * time.Millisecond)
	if err := ctx.Err(); err != nil {
		t.Fatalf("before the timeout: %v", err)
	}
	c.Advance(time.Millisecond)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not done once the clock reached the timeout")
	}
	if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want context.DeadlineExceeded", err)
	}

	ctx2, cancel2 := clock.WithTimeout(context.Background(), c, time.Second)
	cancel2()
	if err := ctx2.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after cancel = %v, want context.Canceled", err)
	}

	// The real clock gives context.WithTimeout's own context.
	ctx3, cancel3 := clock.WithTimeout(context.Background(), clock.Real{}, time.Hour)
	defer cancel3()
	if _, ok := ctx3.Deadline(); !ok {
		t.Fatal("a real timeout without a deadline")
	}
}

// Sleep ends on the clock, on woken, or on the context.
func TestSleep(t *testing.T) {
	c := fakeclock.New()
	done := make(chan bool, 1)
	go func() { done <- clock.Sleep(context.Background(), c, time.Second, nil) }()
	c.Settle(t)
	c.Advance(time.Second)
	if !<-done {
		t.Fatal("a full sleep reported false")
	}
	woken := make(chan struct{})
	close(woken)
	if !clock.Sleep(context.Background(), c, time.Hour, woken) {
		t.Fatal("a woken sleep reported false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if clock.Sleep(ctx, c, time.Hour, nil) {
		t.Fatal("a sleep whose context ended reported true")
	}
}
