package locker

import (
	"context"
	"testing"
	"time"
)

func TestValidateKey(t *testing.T) {
	good := []string{"billing", "a", "team/job-1", "A.b_c-d", "0abc"}
	bad := []string{"", "-lead", ".hidden", "/abs", "a..b", "../etc", "a b", "a:b", "trailing/", "a//b", "é", string(make([]byte, 129))}
	long := ""
	for range 128 {
		long += "k"
	}
	good = append(good, long)
	bad = append(bad, long+"k")
	for _, k := range good {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want ok", k, err)
		}
	}
	for _, k := range bad {
		if err := ValidateKey(k); err == nil {
			t.Errorf("ValidateKey(%q) accepted a bad key", k)
		}
	}
}

func TestHolderRecordRoundTrip(t *testing.T) {
	h := NewHolder(Options{ID: "host-a:42", Version: "v1"})
	h.Epoch = 9
	got := ParseHolder(h.Record())
	if got.ID != h.ID || got.Epoch != 9 || got.PID != h.PID || !got.AcquiredAt.Equal(h.AcquiredAt) || got.Version != "v1" {
		t.Fatalf("round trip: got %+v, want %+v", got, h)
	}
	if foreign := ParseHolder([]byte("someone else")); foreign.ID != "someone else" {
		t.Fatalf("a foreign value should surface as the ID, got %+v", foreign)
	}
}

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
