package observe

import (
	"testing"
	"time"
)

// fakeNow is a settable monotonic clock.
type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time      { return f.t }
func (f *fakeNow) add(d time.Duration) { f.t = f.t.Add(d) }
func newWatch() (*Watch, *fakeNow) {
	f := &fakeNow{t: time.Unix(1000, 0)}
	return &Watch{Now: f.now}, f
}
func wait(w *Watch) time.Duration { _, d, _ := w.Due(); return d }
func version(w *Watch) string     { v, _, _ := w.Due(); return v }
func observed(w *Watch) bool      { _, _, ok := w.Due(); return ok }

func TestAllowance(t *testing.T) {
	for _, tc := range []struct{ ttl, want time.Duration }{
		{time.Second, 250 * time.Millisecond},
		{5 * time.Second, 250 * time.Millisecond},
		{10 * time.Second, 500 * time.Millisecond},
		{15 * time.Second, 750 * time.Millisecond},
		{time.Minute, 3 * time.Second},
	} {
		t.Run(tc.ttl.String(), func(t *testing.T) {
			if got := Allowance(tc.ttl); got != tc.want {
				t.Fatalf("Allowance(%v) = %v, want %v", tc.ttl, got, tc.want)
			}
		})
	}
}

func TestWatch(t *testing.T) {
	const ttl = 10 * time.Second
	full := ttl + Allowance(ttl)

	t.Run("nothing observed", func(t *testing.T) {
		w, _ := newWatch()
		if observed(w) {
			t.Fatal("Due reports a holder before any observation")
		}
	})
	t.Run("unchanged version becomes due after TTL plus allowance", func(t *testing.T) {
		w, clk := newWatch()
		w.Observe("7", ttl)
		clk.add(full - time.Millisecond)
		w.Observe("7", ttl) // the same version read again must not restart the wait
		if d := wait(w); d != time.Millisecond {
			t.Fatalf("wait = %v, want 1ms", d)
		}
		clk.add(time.Millisecond)
		if d := wait(w); d > 0 {
			t.Fatalf("wait = %v after TTL+allowance, want <= 0", d)
		}
		if v := version(w); v != "7" {
			t.Fatalf("version = %q, want 7", v)
		}
	})
	t.Run("a new version starts the wait over", func(t *testing.T) {
		w, clk := newWatch()
		w.Observe("7", ttl)
		clk.add(full - time.Second)
		w.Observe("8", ttl)
		if d := wait(w); d != full {
			t.Fatalf("wait = %v after a new version, want %v", d, full)
		}
	})
	t.Run("a changed TTL starts the wait over", func(t *testing.T) {
		w, clk := newWatch()
		w.Observe("7", ttl)
		clk.add(ttl)
		w.Observe("7", 2*ttl)
		if d := wait(w); d != 2*ttl+Allowance(2*ttl) {
			t.Fatalf("wait = %v, want %v", d, 2*ttl+Allowance(2*ttl))
		}
	})
	t.Run("reset forgets the holder", func(t *testing.T) {
		w, clk := newWatch()
		w.Observe("7", ttl)
		clk.add(2 * full)
		w.Reset()
		if observed(w) {
			t.Fatal("Due reports a holder after Reset")
		}
		w.Observe("7", ttl)
		if d := wait(w); d != full {
			t.Fatalf("wait = %v after Reset and a new sighting, want %v", d, full)
		}
	})
}

// TestDriftBound checks the inequality the package comment relies on: with
// both clocks within ±2.4% of true time, the standby's wait outlasts the
// holder's TTL.
func TestDriftBound(t *testing.T) {
	const rho = 0.024
	for _, ttl := range []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, time.Hour} {
		t.Run(ttl.String(), func(t *testing.T) {
			holder := float64(ttl) * (1 + rho)
			standby := float64(ttl+Allowance(ttl)) * (1 - rho)
			if standby < holder {
				t.Fatalf("standby waits %v, holder may run %v", time.Duration(standby), time.Duration(holder))
			}
		})
	}
}
