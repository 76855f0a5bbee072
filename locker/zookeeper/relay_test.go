package zookeeper

import (
	"math/rand"
	"testing"
	"time"
)

// TestRelayGranted: Renew never claims more than the session's timeout
// counted from the latest request answered a whole ping period before the
// renewal, plus the half tick the safety margin covers; requests answered
// later count for nothing.
func TestRelayGranted(t *testing.T) {
	const tick, timeout = 200 * time.Millisecond, 3 * time.Second
	b := newRelayBound(tick, true)
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	p := newRelayPlan(b)
	// Nothing relayed: a renewal proves nothing, the first one included.
	if g := p.granted(timeout, at(0), time.Time{}, false); g != time.Nanosecond {
		t.Errorf("a renewal with nothing relayed was granted %v, want 1ns", g)
	}

	p.answered(at(0), at(5))     // relayed before a renewal at 1000
	p.answered(at(900), at(950)) // answered less than a ping period before it
	relayed, found := p.renewing(at(1000))
	if !found || !relayed.Equal(at(0)) {
		t.Fatalf("relayed = %v, %v; want the request sent at 0ms", relayed.Sub(t0), found)
	}
	want := timeout - (time.Second - tick/2)
	if g := p.granted(timeout, at(1000), relayed, found); g != want {
		t.Errorf("granted %v, want %v", g, want)
	}

	// A connect the leader counted before answering (relayedDirect)
	// needs no ping period; one sent after the renewal does not count.
	d := newRelayPlan(b)
	d.relayedDirect(at(990))
	if relayed, found := d.renewing(at(1000)); !found || !relayed.Equal(at(990)) {
		t.Errorf("direct: relayed = %v, %v; want the connect at 990ms", relayed.Sub(t0), found)
	}
	d.relayedDirect(at(1100))
	if relayed, _ := d.renewing(at(1050)); relayed.After(at(1050)) {
		t.Errorf("a connect after the renewal's send was counted: %v", relayed.Sub(t0))
	}

	// Without a learned tick there is no allowance.
	q := newRelayPlan(newRelayBound(tick, false))
	if g := q.granted(timeout, at(1000), at(0), true); g != timeout-time.Second {
		t.Errorf("unlearned tick: granted %v, want %v", g, timeout-time.Second)
	}
	// A gap beyond the timeout proves nothing.
	if g := p.granted(timeout, at(5000), at(0), true); g != time.Nanosecond {
		t.Errorf("granted %v for a gap over the timeout, want 1ns", g)
	}

	// A renewal whose read came in time is not late; one a renewal
	// interval after the last relayed request, or with none, is.
	if p.late(at(1000), at(1000).Add(-p.lead()), true) {
		t.Error("a renewal with its read a lead before it is late")
	}
	if !p.late(at(1000), at(0), true) || !p.late(at(1000), time.Time{}, false) {
		t.Error("a renewal with no read since the last one is not late")
	}

	// Random histories: the claim never exceeds what the relayed request
	// proves.
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		p := newRelayPlan(b)
		now := t0
		for j := 0; j < 20; j++ {
			now = now.Add(time.Duration(rng.Intn(400)) * time.Millisecond)
			p.answered(now, now.Add(time.Duration(rng.Intn(50))*time.Millisecond))
		}
		sent := now.Add(time.Duration(rng.Intn(300)) * time.Millisecond)
		relayed, found := p.renewing(sent)
		g := p.granted(timeout, sent, relayed, found)
		if !found {
			continue
		}
		qualifies := func(a activity) bool { return !a.answered.After(sent.Add(-b.period)) }
		ok := false
		for _, a := range p.acts {
			if qualifies(a) && a.sent.Equal(relayed) {
				ok = true
			}
			if qualifies(a) && a.sent.After(relayed) {
				t.Fatalf("history %d: a later relayed request was passed over", i)
			}
		}
		if !ok {
			t.Fatalf("history %d: counted a request not answered a ping period before the renewal", i)
		}
		if claim := sent.Add(g); claim.After(relayed.Add(timeout + b.allowance)) {
			t.Fatalf("history %d: claims %v past the relayed request, more than timeout+allowance", i, claim.Sub(relayed))
		}
	}
}

// TestRelayNext: with no cadence yet the lease reads every denseTouch;
// once two renewals after the acquisition's succeeded a renewal interval
// apart, it reads once, a ping period and a little before the next one,
// then waits; a failed renewal or an overdue one brings the dense reads
// back.
func TestRelayNext(t *testing.T) {
	b := newRelayBound(200*time.Millisecond, true)
	p := newRelayPlan(b)
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	renew := func(ms int, ok bool) {
		p.renewing(at(ms))
		p.renewed(at(ms), at(ms+2), ok)
	}

	renew(0, true) // the acquisition's
	if got := p.next(at(10), at(5)); !got.Equal(at(105)) {
		t.Errorf("no cadence: next at %v, want 105ms", got.Sub(t0))
	}
	renew(1030, true)
	renew(2030, true)
	if got := p.next(at(2040), at(1990)); !got.Equal(at(3030).Add(-p.lead())) {
		t.Errorf("cadence known: next at %v, want %v", got.Sub(t0), at(3030).Add(-p.lead()).Sub(t0))
	}
	p.sentTouch(at(2750))
	if got := p.next(at(2760), at(2750)); !got.Equal(at(3130)) {
		t.Errorf("after the read: next at %v, want the renewal's expected time + a tenth (3130ms)", got.Sub(t0))
	}
	if got := p.next(at(3200), at(2750)); !got.Equal(at(2850)) {
		t.Errorf("renewal overdue: next at %v, want dense (2850ms)", got.Sub(t0))
	}
	p.renewing(at(3210))
	if got := p.next(at(3220), at(2750)); got.Sub(at(3220)) < time.Minute {
		t.Errorf("renewal in flight: next at %v, want none until its outcome", got.Sub(t0))
	}
	p.renewed(at(3210), at(3400), false)
	if got := p.next(at(3400), at(2750)); !got.Equal(at(2850)) {
		t.Errorf("after a failed renewal: next at %v, want dense", got.Sub(t0))
	}
	renew(3660, true)
	if got := p.next(at(3670), at(3500)); !got.Equal(at(3600)) {
		t.Errorf("one success after a failure: next at %v, want dense", got.Sub(t0))
	}
	renew(4660, true)
	if got := p.next(at(4670), at(4600)); !got.Equal(at(5660).Add(-p.lead())) {
		t.Errorf("cadence back: next at %v, want %v", got.Sub(t0), at(5660).Add(-p.lead()).Sub(t0))
	}
}
