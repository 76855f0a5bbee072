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

func TestRunLastsFromItsFirstFailure(t *testing.T) {
	var r Run
	if d := r.Failed(); d != 0 {
		t.Fatalf("first failure: the run lasted %v, want 0", d)
	}
	time.Sleep(20 * time.Millisecond)
	if d := r.Failed(); d < 20*time.Millisecond {
		t.Fatalf("second failure 20ms later: the run lasted %v", d)
	}
	r.Reset()
	if d := r.Failed(); d != 0 {
		t.Fatalf("after Reset: the run lasted %v, want 0", d)
	}
}
