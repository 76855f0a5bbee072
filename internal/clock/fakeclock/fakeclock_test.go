package fakeclock

import (
	"testing"
	"time"
)

// Step moves on by whole steps, skipping those before the next timer at
// once once the code was idle a whole step, and fires that timer on the
// step that reaches it, as a loop of Settle and Advance(step) would; until
// bounds a skip.
func TestStepSkipsIdleStepsOnTheGrid(t *testing.T) {
	c := New()
	t0 := c.Now()
	tm := c.NewTimer(1050 * time.Millisecond)
	c.Step(t, 100*time.Millisecond, time.Time{})
	if got := c.Now().Sub(t0); got != time.Second {
		t.Fatalf("an idle step moved to t0+%v, want t0+1s (the steps before the timer)", got)
	}
	select {
	case <-tm.C():
		t.Fatal("the timer fired before its step")
	default:
	}
	c.Step(t, 100*time.Millisecond, time.Time{})
	if got := c.Now().Sub(t0); got != 1100*time.Millisecond {
		t.Fatalf("second step moved to t0+%v, want t0+1.1s", got)
	}
	select {
	case at := <-tm.C():
		if at.Sub(t0) != 1050*time.Millisecond {
			t.Fatalf("timer fired with %v, want its due time", at.Sub(t0))
		}
	default:
		t.Fatal("the timer did not fire on the step that reached it")
	}

	// After a timer fired: one step, then a skip bounded by until.
	c.NewTimer(time.Hour)
	c.Step(t, 100*time.Millisecond, time.Time{})
	if got := c.Now().Sub(t0); got != 1200*time.Millisecond {
		t.Fatalf("the step after a timer fired moved to t0+%v, want one step, t0+1.2s", got)
	}
	c.Step(t, 100*time.Millisecond, c.Now().Add(250*time.Millisecond))
	if got := c.Now().Sub(t0); got != 1500*time.Millisecond {
		t.Fatalf("a skip bounded by until moved to t0+%v, want t0+1.5s (the first step at or past it)", got)
	}

	// No timer: one step, as the code may wait for something real.
	d := New()
	d0 := d.Now()
	d.Step(t, 100*time.Millisecond, time.Time{})
	if got := d.Now().Sub(d0); got != 100*time.Millisecond {
		t.Fatalf("a clock without timers moved %v, want one step", got)
	}
}
