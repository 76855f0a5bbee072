package retry

import (
	"context"
	"testing"
	"time"
)

func TestBackoffDoublesToMax(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 5 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := b.Next(); got != w {
			t.Fatalf("step %d: %v, want %v", i, got, w)
		}
	}
	b.Reset()
	if got := b.Next(); got != time.Second {
		t.Fatalf("after Reset: %v, want 1s", got)
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep reported the full pause on a cancelled context")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep did not report a full pause")
	}
}

func TestSleepUnlessWoken(t *testing.T) {
	woken := make(chan struct{})
	close(woken)
	if !SleepUnless(context.Background(), time.Hour, woken) {
		t.Fatal("SleepUnless reported a cancelled context when it was woken")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if SleepUnless(ctx, time.Hour, make(chan struct{})) {
		t.Fatal("SleepUnless reported the full pause on a cancelled context")
	}
	if !SleepUnless(context.Background(), time.Millisecond, nil) {
		t.Fatal("SleepUnless did not report a full pause with nothing to wake it")
	}
}

func TestRunLastsFromItsFirstFailure(t *testing.T) {
	var r Run
	ctx := context.Background()
	if !r.Again(ctx, 50*time.Millisecond) {
		t.Fatal("first failure: no other try within 50ms")
	}
	time.Sleep(60 * time.Millisecond)
	if r.Again(ctx, 50*time.Millisecond) {
		t.Fatal("a run of 60ms still fits a limit of 50ms")
	}
	r.Reset()
	if !r.Again(ctx, 50*time.Millisecond) {
		t.Fatal("after Reset: no other try")
	}
}

func TestRunLeavesHalfTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var r Run
	r.Again(ctx, time.Hour)
	time.Sleep(120 * time.Millisecond) // past half way to the deadline
	if r.Again(ctx, time.Hour) {
		t.Fatal("a run of 120ms fits where the deadline leaves 80ms")
	}
}
