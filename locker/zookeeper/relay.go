package zookeeper

import (
	"sync"
	"time"
)

// The relay gap, and how a leader bounds it without reading all the time
// (DESIGN §1.2, "What a ZooKeeper renewal proves").
//
// The ensemble's leader restarts a session's countdown only when a server
// relays the session's activity to it. Read from ZooKeeper 3.8's server:
//
//   - A server touches a session in its own tracker for every request it
//     takes from the client, before handling it (ZooKeeperServer.
//     submitRequestNow: touch). On a follower that only notes the session
//     in a table (LearnerSessionTracker.touchSession).
//   - The leader pings every follower every tickTime/2 (Leader.lead: wait
//     tickTime/2, then LearnerHandler.ping for each). The follower answers
//     each ping with the table and empties it (Learner.ping,
//     getTouchSnapshot); the leader touches each session in it, counting
//     the whole timeout from that moment (LearnerHandler PING:
//     learnerMaster.touch).
//   - The ping answer and a forwarded write travel the same ordered stream
//     (Learner.writePacket), and the leader reads that stream in order: a
//     ping answered before our renewal was forwarded is counted before the
//     renewal is handled.
//
// So when a request of ours was answered at least one ping period before
// a renewal is sent, a ping reached the server after the request touched
// the session and before the renewal went on: the leader counts the
// session from a moment after the request's send, whatever becomes of the
// server afterwards. (A server the session moved to in between asked the
// leader to revalidate the session on connect, which touches it there
// and then: no older either.) The renewal then proves the ensemble keeps
// the session until at least that request's send + the timeout; Renew
// shortens the granted time to what this proves, less the half tick the
// safety margin covers.
//
// The client's own pings (every third of the timeout) are such requests
// too: the server touches the session for a ping as for a read, and a
// follower answers both itself. sniffConn picks them out of the stream
// (pings.go), and a renewal counts them with ours; that is what a standby
// that waited its turn leads on, with no read of its own to wait for.
//
// A leader therefore needs one answered request a ping period before each
// renewal, not a read every 100ms: touch sends one, timed from the
// renewals' own cadence, and reads every denseTouch only while that
// cadence is unknown (the first renewals, a retry, a renewal overdue).

// denseTouch is the touch interval while the next renewal cannot be
// foreseen.
const denseTouch = 100 * time.Millisecond

// relayBound is what a lease assumes of the ensemble's pings.
type relayBound struct {
	// period bounds the time between two leader pings reaching a
	// server: tickTime/2, plus what the leader's loop and the network
	// add.
	period time.Duration
	// allowance is the part of the gap the safety margin covers
	// (tickTime/2, checkMargin), or 0 when the tick is only guessed.
	allowance time.Duration
}

// newRelayBound derives the bound from the ensemble's tickTime; learned
// says whether tick was learned (checkMargin) or is an upper guess.
func newRelayBound(tick time.Duration, learned bool) relayBound {
	b := relayBound{period: tick/2 + max(10*time.Millisecond, tick/20)}
	if learned {
		b.allowance = tick / 2
	}
	return b
}

// activity is one request of ours that the server answered.
type activity struct{ sent, answered time.Time }

// relayPlan keeps the lease's recent requests and the renewals' cadence.
// All times come from the caller (the monotonic clock in the lease, a
// made-up one in tests).
type relayPlan struct {
	bound relayBound

	mu    sync.Mutex
	acts  [16]activity // ring of the latest answered requests
	nacts int
	// calls are the send times of the latest renewals, oldest first,
	// with whether each succeeded; ncalls counts every renewal.
	calls  [3]time.Time
	ok     [3]bool
	ncalls int
	// touched is when the touch for the expected renewal was sent.
	touched  time.Time
	inflight bool          // a renewal was sent and has no outcome yet
	rtt      time.Duration // the latest touch's round trip
	// direct is the send time of the latest request the ensemble's leader
	// itself counted the session from before answering: the connect that
	// registered or revalidated it (zkSession.established).
	direct time.Time
	wake   chan struct{} // signalled on every renewal and every touch
	// pings, when set, returns the client's own pings answered on the
	// current connection (pings.go): activities like ours.
	pings func() []activity
}

func newRelayPlan(b relayBound) *relayPlan {
	return &relayPlan{bound: b, wake: make(chan struct{}, 1)}
}

func (p *relayPlan) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// answered records a request sent at sent and answered at at.
func (p *relayPlan) answered(sent, at time.Time) {
	p.mu.Lock()
	p.acts[p.nacts%len(p.acts)] = activity{sent, at}
	p.nacts++
	p.mu.Unlock()
}

// relayedDirect records a request sent at sent that the ensemble's leader
// counted the session from before it was answered.
func (p *relayPlan) relayedDirect(sent time.Time) {
	p.mu.Lock()
	if sent.After(p.direct) {
		p.direct = sent
	}
	p.mu.Unlock()
}

// touchAnswered records one of touch's reads.
func (p *relayPlan) touchAnswered(sent, at time.Time) {
	p.answered(sent, at)
	p.mu.Lock()
	p.rtt = at.Sub(sent)
	p.mu.Unlock()
}

// renewing records a renewal sent at sent (its outcome comes with
// renewed). It returns the send time of the latest request known to have
// been relayed before this renewal goes on, and whether there is one.
func (p *relayPlan) renewing(sent time.Time) (time.Time, bool) {
	var pings []activity
	if p.pings != nil {
		pings = p.pings()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	copy(p.calls[:], p.calls[1:])
	copy(p.ok[:], p.ok[1:])
	p.calls[len(p.calls)-1], p.ok[len(p.ok)-1] = sent, false
	p.ncalls++
	p.touched = time.Time{}
	p.inflight = true
	var latest time.Time
	found := false
	if !p.direct.IsZero() && !p.direct.After(sent) {
		latest, found = p.direct, true
	}
	latest, found = p.bound.latest(sent, latest, found, p.acts[:min(p.nacts, len(p.acts))])
	latest, found = p.bound.latest(sent, latest, found, pings)
	defer p.signal()
	return latest, found
}

// latest returns the send time of the latest of acts known to have been
// relayed before a renewal sent at sent (answered a ping period before),
// when it is later than (latest, found).
func (b relayBound) latest(sent, latest time.Time, found bool, acts []activity) (time.Time, bool) {
	for _, a := range acts {
		if !a.answered.After(sent.Add(-b.period)) && (!found || a.sent.After(latest)) {
			latest, found = a.sent, true
		}
	}
	return latest, found
}

// renewed records the outcome of the renewal sent at sent.
func (p *relayPlan) renewed(sent, at time.Time, ok bool) {
	p.mu.Lock()
	p.inflight = false
	if ok {
		p.ok[len(p.ok)-1] = true
		p.acts[p.nacts%len(p.acts)] = activity{sent, at}
		p.nacts++
	}
	p.mu.Unlock()
	p.signal()
}

// granted is the time Renew may claim for a renewal sent at sent through
// a session of the given timeout: the timeout counted from the latest
// relayed request (relayed, found), plus the allowance, at most the
// timeout. The lease's first renewal is no exception: what the
// acquisition proves is the connect (relayedDirect), the client's pings
// answered a ping period before (pings.go), or, failing those, the read
// candidate.verify made a ping period before.
func (p *relayPlan) granted(timeout time.Duration, sent, relayed time.Time, found bool) time.Duration {
	if !found {
		return time.Nanosecond // proves nothing: the supervisor stops the job
	}
	lag := sent.Sub(relayed) - p.bound.allowance
	if lag <= 0 {
		return timeout
	}
	if lag >= timeout {
		return time.Nanosecond
	}
	return timeout - lag
}

// late says whether a renewal sent at sent, with the latest relayed
// request (relayed, found), would claim less than the dense reads give at
// worst: the read before it is missing or came late. Renew then makes one
// before the renewal goes on (lease.touchNow), unless it is the lease's
// first (first).
func (p *relayPlan) late(sent, relayed time.Time, found bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !found || sent.Sub(relayed) > p.bound.period+denseTouch+p.lead()
}

// first says whether the latest renewal is the lease's first. That one
// never waits for a read of its own: it claims what the acquisition proves
// (candidate.verify), and a short grant brings the next renewal forward
// (supervise), by when the dense reads have been relayed.
func (p *relayPlan) first() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ncalls == 1
}

// lead is how long before the expected renewal the touch goes out (p.mu
// held): its
// answer must be in a ping period before the renewal. What it adds to the
// period comes off every renewal's granted time, so it is kept small: a
// read that comes too late (a busy machine woke the toucher late or
// answered slowly) makes the renewal read again itself (late).
func (p *relayPlan) lead() time.Duration {
	return p.bound.period + 20*time.Millisecond + 2*p.rtt
}

// next says when touch should read next, seen at now: zero means at
// once. It reads once a ping period (and a little) before the renewal the
// cadence announces; densely when there is no cadence yet or the last
// renewal failed (the supervisor retries on a schedule of its own), and
// when the expected renewal is overdue.
func (p *relayPlan) next(now, lastTouch time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inflight {
		return now.Add(time.Hour) // renewed signals its outcome
	}
	dense := lastTouch.Add(denseTouch)
	k := len(p.calls) - 1
	// Spacings between renewals that followed a success; the first
	// renewal (the acquisition's) is left out: the next one waits for
	// the supervisor's loop to start.
	if p.ncalls < 3 || !p.ok[k] || !p.ok[k-1] {
		return dense
	}
	every := p.calls[k].Sub(p.calls[k-1])
	if p.ncalls >= 4 && p.ok[k-2] {
		every = min(every, p.calls[k-1].Sub(p.calls[k-2]))
	}
	expected := p.calls[k].Add(every)
	if !p.touched.IsZero() {
		if now.Before(expected.Add(every / 10)) {
			return expected.Add(every / 10) // wait for the renewal
		}
		return dense // overdue: keep the session's activity fresh
	}
	at := expected.Add(-p.lead())
	if !at.After(p.calls[k]) {
		return dense // renewals closer than a ping period
	}
	return at
}

// sentTouch notes that the read for the expected renewal went out.
func (p *relayPlan) sentTouch(at time.Time) {
	p.mu.Lock()
	p.touched = at
	p.mu.Unlock()
}
