package jobnotify

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	m := Parse([]byte("READY=1\nSTATUS=copying \x1b[31mred\nWATCHDOG=1\nEXTEND_TIMEOUT_USEC=2500000\nMAINPID=7\nnonsense\nWATCHDOG_USEC=0"))
	if !m.Ready || !m.Ping || m.Trigger || m.Stopping || m.Reloading {
		t.Errorf("flags: %+v", m)
	}
	if m.Status == nil || *m.Status != "copying ?[31mred" {
		t.Errorf("status %v, want the escape replaced", m.Status)
	}
	if m.Extend != 2500*time.Millisecond {
		t.Errorf("extend %v", m.Extend)
	}
	if m.Watchdog != 0 {
		t.Errorf("WATCHDOG_USEC=0 taken as %v, want ignored", m.Watchdog)
	}
	if m := Parse([]byte("WATCHDOG=trigger\nREADY=0")); !m.Trigger || m.Ready {
		t.Errorf("trigger: %+v", m)
	}
	if m := Parse([]byte("STATUS=")); m.Status == nil || *m.Status != "" {
		t.Errorf("an empty STATUS= must clear the text: %+v", m)
	}
	if m := Parse([]byte("BARRIER=1")); !m.Empty() {
		t.Errorf("BARRIER=1 carries nothing: %+v", m)
	}
	long := Parse([]byte("STATUS=" + strings.Repeat("é", 300)))
	if len(*long.Status) > MaxStatus || !strings.HasPrefix(*long.Status, "éé") {
		t.Errorf("a long status is cut on a character boundary to %d bytes: %d", MaxStatus, len(*long.Status))
	}
}

func TestReadyTimeout(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := New(Rules{ReadyTimeout: 10 * time.Second}, t0)
	if got := s.Deadline(); !got.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("deadline %v", got)
	}
	if why := s.Check(t0.Add(9 * time.Second)); why != "" {
		t.Fatalf("failed early: %s", why)
	}
	// An extension moves the deadline to at least 15s from its arrival,
	// once: the next one counts from its own arrival.
	s.Apply(Message{Extend: 15 * time.Second}, t0.Add(9*time.Second))
	if why := s.Check(t0.Add(20 * time.Second)); why != "" {
		t.Fatalf("failed within the extension: %s", why)
	}
	if why := s.Check(t0.Add(24 * time.Second)); !strings.Contains(why, "READY=1") {
		t.Fatalf("want a ready failure at 24s, got %q", why)
	}
	s = New(Rules{ReadyTimeout: 10 * time.Second}, t0)
	s.Apply(Message{Ready: true}, t0.Add(3*time.Second))
	if ok, at := s.Ready(); !ok || !at.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("ready %v at %v", ok, at)
	}
	if !s.Deadline().IsZero() || s.Check(t0.Add(time.Hour)) != "" {
		t.Fatal("a ready job without a watchdog awaits nothing")
	}
}

func TestWatchdog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := New(Rules{Watchdog: 2 * time.Second}, t0)
	// Without a ready timeout the watchdog counts from the start.
	if why := s.Check(t0.Add(2 * time.Second)); !strings.Contains(why, "WATCHDOG=1") {
		t.Fatalf("no ping for 2s: got %q", why)
	}
	s.Apply(Message{Ping: true}, t0.Add(1500*time.Millisecond))
	if why := s.Check(t0.Add(3 * time.Second)); why != "" {
		t.Fatalf("pinged 1.5s ago: %s", why)
	}
	if why := s.Check(t0.Add(3500 * time.Millisecond)); why == "" {
		t.Fatal("2s after the last ping: want a failure")
	}
	// The job may set its own period, counted from then.
	s.Apply(Message{Watchdog: 10 * time.Second}, t0.Add(3*time.Second))
	if why := s.Check(t0.Add(12 * time.Second)); why != "" {
		t.Fatalf("within the job's own period: %s", why)
	}
	// A trigger fails at once.
	s.Apply(Message{Trigger: true}, t0.Add(4*time.Second))
	if why := s.Check(t0.Add(4 * time.Second)); !strings.Contains(why, "trigger") {
		t.Fatalf("trigger: %q", why)
	}
}

func TestWatchdogAfterReadiness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := New(Rules{ReadyTimeout: 30 * time.Second, Watchdog: 2 * time.Second}, t0)
	// Starting up: only the ready timeout applies.
	if why := s.Check(t0.Add(20 * time.Second)); why != "" {
		t.Fatalf("starting: %s", why)
	}
	s.Apply(Message{Ready: true, Status: ptr("serving")}, t0.Add(20*time.Second))
	if why := s.Check(t0.Add(21 * time.Second)); why != "" {
		t.Fatalf("ready 1s ago: %s", why)
	}
	if why := s.Check(t0.Add(22 * time.Second)); !strings.Contains(why, "WATCHDOG=1") {
		t.Fatalf("2s after readiness without a ping: %q", why)
	}
	if text, ok := s.Status(); !ok || text != "serving" {
		t.Fatalf("status %q %v", text, ok)
	}
}

func TestStoppingIsNoZombie(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := New(Rules{Watchdog: 2 * time.Second}, t0)
	s.Apply(Message{Stopping: true}, t0.Add(time.Second))
	// No pings while it stops: no failure within one period.
	if why := s.Check(t0.Add(2900 * time.Millisecond)); why != "" {
		t.Fatalf("stopping: %s", why)
	}
	s.Apply(Message{Extend: 5 * time.Second}, t0.Add(2*time.Second))
	if why := s.Check(t0.Add(6 * time.Second)); why != "" {
		t.Fatalf("stopping, extended: %s", why)
	}
	if why := s.Check(t0.Add(7 * time.Second)); !strings.Contains(why, "STOPPING=1") {
		t.Fatalf("still running past the extension: %q", why)
	}
}

func ptr(s string) *string { return &s }
