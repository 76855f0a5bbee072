package zookeeper

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

// frame builds one length-prefixed frame of the given int32 words and
// extra bytes.
func frame(words []int32, extra ...byte) []byte {
	b := make([]byte, 4, 4+4*len(words)+len(extra))
	for _, w := range words {
		b = binary.BigEndian.AppendUint32(b, uint32(w))
	}
	b = append(b, extra...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// connectRequest and connectAnswer are the first frames each way.
func connectRequest() []byte { return frame([]int32{0, 0, 0, 3000, 0, 0, 16}, make([]byte, 16)...) }

func connectAnswer() []byte {
	return frame([]int32{0, 3000, 0x1234, 0x5678, 16}, make([]byte, 16)...)
}

func pingRequest() []byte { return frame([]int32{pingXid, opPing}) }

func answer(xid int32, code int32, body ...byte) []byte {
	return frame([]int32{xid, 0, 7, code}, body...)
}

// conn drives a pingTracker as sniffConn does, piece by piece.
type trackerRun struct {
	t     *testing.T
	tr    pingTracker
	now   time.Time
	acts  []activity
	conns int
}

func (r *trackerRun) write(b []byte, pieces int) {
	r.now = r.now.Add(time.Millisecond)
	for _, p := range split(b, pieces) {
		r.tr.wrote(p, r.now, true)
	}
}

func (r *trackerRun) read(b []byte, pieces int) {
	r.now = r.now.Add(time.Millisecond)
	for _, p := range split(b, pieces) {
		acts, head := r.tr.read(p, r.now)
		if head != nil {
			if _, _, _, ok := parseConnectResponse(head); ok {
				r.tr.connected = true
				r.conns++
			} else {
				r.tr.doubt = true
			}
		}
		r.acts = append(r.acts, acts...)
	}
}

// split cuts b into n pieces of about equal size (n <= 0: one byte each).
func split(b []byte, n int) [][]byte {
	if n <= 0 || n > len(b) {
		n = len(b)
	}
	var out [][]byte
	size := (len(b) + n - 1) / n
	for len(b) > 0 {
		k := min(size, len(b))
		out = append(out, b[:k])
		b = b[k:]
	}
	return out
}

func TestPingTracker(t *testing.T) {
	base := time.Unix(1000, 0)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	for _, pieces := range []int{1, 3, 0} {
		r := &trackerRun{t: t, now: base}
		r.write(connectRequest(), pieces) // 1ms
		r.read(connectAnswer(), pieces)   // 2ms
		if r.conns != 1 {
			t.Fatalf("pieces %d: connect answer not seen", pieces)
		}
		r.write(frame([]int32{5, 1}, make([]byte, 40)...), pieces) // a create, xid 5: 3ms
		r.write(pingRequest(), pieces)                             // 4ms
		// Requests and answers in one write: a get and a second ping.
		r.write(append(frame([]int32{6, 4}, 1, 2, 3), pingRequest()...), pieces) // 5ms
		r.read(answer(5, 0, make([]byte, 300)...), pieces)                       // 6ms
		r.read(answer(-1, 0, make([]byte, 20)...), pieces)                       // a watch event: 7ms
		r.read(append(answer(pingXid, 0), answer(6, 0, 9)...), pieces)           // 8ms
		r.read(answer(pingXid, 0), pieces)                                       // 9ms
		want := []activity{{ms(4), ms(8)}, {ms(5), ms(9)}}
		if len(r.acts) != len(want) || r.tr.doubt {
			t.Fatalf("pieces %d: activities %v (doubt %v), want %v", pieces, r.acts, r.tr.doubt, want)
		}
		for i := range want {
			if !r.acts[i].sent.Equal(want[i].sent) || !r.acts[i].answered.Equal(want[i].answered) {
				t.Errorf("pieces %d: activity %d = %v, want %v", pieces, i, r.acts[i], want[i])
			}
		}
	}
}

// TestPingTrackerDoubt: whatever does not fit makes the tracker count no
// ping from then on, never one it cannot pair.
func TestPingTrackerDoubt(t *testing.T) {
	cases := map[string]func(r *trackerRun){
		"answer to no ping": func(r *trackerRun) {
			r.read(answer(pingXid, 0), 1)
		},
		"ping answered with an error": func(r *trackerRun) {
			r.write(pingRequest(), 1)
			r.read(answer(pingXid, -112), 1) // SESSIONEXPIRED
		},
		"xid -2 that is not a ping": func(r *trackerRun) {
			r.write(frame([]int32{pingXid, 4}, 0, 0, 0, 1, '/'), 1)
		},
		"answer frame too short": func(r *trackerRun) {
			r.write(pingRequest(), 1)
			r.read(frame([]int32{pingXid, 0}), 1)
		},
		"negative length": func(r *trackerRun) {
			r.write(pingRequest(), 1)
			r.read([]byte{0xff, 0xff, 0xff, 0xf0}, 1)
		},
		"answer longer than any frame": func(r *trackerRun) {
			r.write(pingRequest(), 1)
			r.read([]byte{0x40, 0, 0, 1}, 1) // maxFrame+1
		},
		"request with the top length bit set": func(r *trackerRun) {
			r.write([]byte{0x80, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 11}, 1)
		},
		"write cut short": func(r *trackerRun) {
			p := pingRequest()
			r.tr.wrote(p[:5], r.now, false)
		},
		"too many pings unanswered": func(r *trackerRun) {
			for i := 0; i <= maxPending; i++ {
				r.write(pingRequest(), 1)
			}
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			r := &trackerRun{t: t, now: time.Unix(1000, 0)}
			r.write(connectRequest(), 1)
			r.read(connectAnswer(), 1)
			f(r)
			// Later pings and answers that would fit count nothing.
			r.write(pingRequest(), 1)
			r.read(answer(pingXid, 0), 1)
			if !r.tr.doubt || len(r.acts) != 0 {
				t.Errorf("doubt %v, activities %v; want doubt and none", r.tr.doubt, r.acts)
			}
		})
	}
	t.Run("ping answered before the connect answer", func(t *testing.T) {
		r := &trackerRun{t: t, now: time.Unix(1000, 0)}
		r.write(connectRequest(), 1)
		r.write(pingRequest(), 1)
		r.read(answer(pingXid, 0), 1) // taken as the connect answer: not one
		r.read(answer(pingXid, 0), 1)
		if !r.tr.doubt || len(r.acts) != 0 {
			t.Errorf("doubt %v, activities %v; want doubt and none", r.tr.doubt, r.acts)
		}
	})
	t.Run("connect answer too long", func(t *testing.T) {
		r := &trackerRun{t: t, now: time.Unix(1000, 0)}
		r.write(connectRequest(), 1)
		r.read(frame([]int32{0, 3000, 0, 1, 16}, make([]byte, 600)...), 1)
		r.write(pingRequest(), 1)
		r.read(answer(pingXid, 0), 1)
		if r.conns != 0 || !r.tr.doubt || len(r.acts) != 0 {
			t.Errorf("connects %d, doubt %v, activities %v; want none, doubt, none", r.conns, r.tr.doubt, r.acts)
		}
	})
}

// TestSessionPingsPerConnection: a reconnect starts a new stream with
// nothing counted, a stream in doubt counts nothing more, and a
// connection no longer in use counts nothing at all.
func TestSessionPingsPerConnection(t *testing.T) {
	s := &zkSession{changed: make(chan struct{})}
	dial := func() *sniffConn {
		c := &sniffConn{s: s, dialed: time.Now()}
		s.mu.Lock()
		s.current = c
		s.npings, s.doubt = 0, false
		s.mu.Unlock()
		return c
	}
	at := time.Now()
	a := dial()
	s.pinged(a, []activity{{at, at}, {at, at}}, false)
	if n := len(s.pingActivities()); n != 2 {
		t.Fatalf("%d pings counted, want 2", n)
	}
	b := dial()
	if n := len(s.pingActivities()); n != 0 {
		t.Fatalf("after a reconnect: %d pings counted, want 0", n)
	}
	s.pinged(a, []activity{{at, at}}, false) // the old connection, late
	if n := len(s.pingActivities()); n != 0 {
		t.Fatalf("a ping answered on the old connection was counted")
	}
	s.pinged(b, []activity{{at, at}}, false)
	s.pinged(b, nil, true)
	s.pinged(b, []activity{{at, at}}, false)
	if n := len(s.pingActivities()); n != 0 {
		t.Fatalf("after doubt: %d pings counted, want 0", n)
	}
	for i := 0; i < 2*keptPings; i++ {
		s.pinged(dial(), []activity{{at, at}}, false)
	}
	c := dial()
	for i := 0; i < 2*keptPings; i++ {
		s.pinged(c, []activity{{at.Add(time.Duration(i)), at}}, false)
	}
	got := s.pingActivities()
	if len(got) != keptPings {
		t.Fatalf("%d pings kept, want %d", len(got), keptPings)
	}
}

// TestRelayCountsPings: a renewal counts the client's pings as it counts
// our own requests: one answered a ping period before it, never a later
// one; and the lease's first renewal claims what they prove without
// waiting for a read of its own (late).
func TestRelayCountsPings(t *testing.T) {
	const tick, timeout = 200 * time.Millisecond, 3 * time.Second
	b := newRelayBound(tick, true)
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	p := newRelayPlan(b)
	p.relayedDirect(at(-5000))
	p.pings = func() []activity {
		return []activity{{at(0), at(2)}, {at(1000), at(1002)}, {at(1850), at(1852)}}
	}
	p.answered(at(1900), at(1901)) // the verify read, answered just now
	relayed, found := p.renewing(at(1902))
	if !found || !relayed.Equal(at(1000)) {
		t.Fatalf("relayed = %v, %v; want the ping sent at 1000ms", relayed.Sub(t0), found)
	}
	if !p.first() {
		t.Errorf("the lease's first renewal is not its first")
	}
	want := timeout - (902*time.Millisecond - tick/2)
	if g := p.granted(timeout, at(1902), relayed, found); g != want {
		t.Errorf("granted %v, want %v", g, want)
	}
	p.renewed(at(1902), at(1905), true)
	// The second renewal, brought forward, is late like any other.
	relayed, found = p.renewing(at(1960))
	if p.first() || !p.late(at(1960), relayed, found) {
		t.Errorf("a second renewal %v after its relayed request is not late", at(1960).Sub(relayed))
	}
}

// TestPingTrackerAnySplit: however both streams are cut into writes and
// reads, frames split across calls or coalesced into one, and whatever
// requests, answers and watch events come between the pings, each ping
// answer is paired with the write that completed its ping (the earliest
// the server could take it) and the read that completed its answer, and
// nothing is put in doubt. The server answers in order, as ZooKeeper
// does; a ping's frame is whole only once the write carrying its last
// byte began, and its answer known only once the read carrying the
// answer's last byte returned.
func TestPingTrackerAnySplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 7))
	base := time.Unix(1000, 0)
	for round := 0; round < 500; round++ {
		type frameOf struct {
			b    []byte
			ping bool
			req  int // for an answer: the request frame it answers (-1: a watch event)
		}
		// The requests (after the connect) and, in order, their answers
		// with watch events mixed in.
		var reqs, answers []frameOf
		for i, n := 0, 1+rng.IntN(12); i < n; i++ {
			if rng.IntN(3) == 0 {
				reqs = append(reqs, frameOf{b: pingRequest(), ping: true})
			} else {
				xid := int32(1 + rng.IntN(1<<20))
				reqs = append(reqs, frameOf{b: frame([]int32{xid, int32(1 + rng.IntN(20))}, make([]byte, rng.IntN(60))...)})
			}
		}
		for i, r := range reqs {
			if rng.IntN(4) == 0 {
				answers = append(answers, frameOf{b: answer(-1, 0, make([]byte, 4+rng.IntN(30))...), req: -1})
			}
			xid := int32(binary.BigEndian.Uint32(r.b[4:]))
			body := make([]byte, rng.IntN(80))
			if r.ping {
				body = nil // a ping's answer is its header alone
			}
			answers = append(answers, frameOf{b: answer(xid, 0, body...), ping: r.ping, req: i})
		}
		// Cut each stream at random points: a piece is one Write or Read.
		cut := func(frames []frameOf) (pieces [][]byte, ends []int) {
			var all []byte
			for _, f := range frames {
				all = append(all, f.b...)
				ends = append(ends, len(all)) // offset just past each frame
			}
			for len(all) > 0 {
				k := 1 + rng.IntN(min(len(all), 48))
				pieces, all = append(pieces, all[:k]), all[k:]
			}
			return pieces, ends
		}
		outPieces, outEnds := cut(reqs)
		inPieces, inEnds := cut(answers)

		var tr pingTracker
		now := base
		tick := func() time.Time { now = now.Add(time.Millisecond); return now }
		tr.wrote(connectRequest(), tick(), true)
		if _, head := tr.read(connectAnswer(), tick()); head == nil {
			t.Fatal("connect answer not handed on")
		} else if _, _, _, ok := parseConnectResponse(head); !ok {
			t.Fatal("connect answer not understood")
		}
		tr.connected = true

		// Issue the pieces in an order the causality allows: a read may
		// carry an answer's bytes only once its request is whole.
		var (
			written, read int                   // bytes of each stream so far
			oi, ii        int                   // next piece each way
			wholeAt       = map[int]time.Time{} // request frame -> write that completed it
			doneAt        = map[int]time.Time{} // answer frame -> read that completed it
			got           []activity
		)
		reqWhole := func(n int) int { // request frames whole after n bytes
			k := 0
			for k < len(outEnds) && outEnds[k] <= n {
				k++
			}
			return k
		}
		for oi < len(outPieces) || ii < len(inPieces) {
			canRead := false
			if ii < len(inPieces) {
				end := read + len(inPieces[ii])
				canRead = true
				for j := range inEnds {
					start := 0
					if j > 0 {
						start = inEnds[j-1]
					}
					if start < end && answers[j].req >= reqWhole(written) {
						canRead = false // it would carry an answer to a request not yet whole
					}
				}
			}
			if oi < len(outPieces) && (!canRead || rng.IntN(2) == 0) {
				at := tick()
				p := outPieces[oi]
				before := reqWhole(written)
				tr.wrote(p, at, true)
				written += len(p)
				for k := before; k < reqWhole(written); k++ {
					wholeAt[k] = at
				}
				oi++
				continue
			}
			if !canRead {
				t.Fatalf("round %d: stuck", round)
			}
			at := tick()
			p := inPieces[ii]
			acts, head := tr.read(p, at)
			if head != nil {
				t.Fatalf("round %d: a second connect answer", round)
			}
			read += len(p)
			for j, e := range inEnds {
				if e <= read {
					if _, ok := doneAt[j]; !ok {
						doneAt[j] = at
					}
				}
			}
			got = append(got, acts...)
			ii++
		}
		var want []activity
		for j, a := range answers {
			if a.ping {
				want = append(want, activity{wholeAt[a.req], doneAt[j]})
			}
		}
		if tr.doubt || len(got) != len(want) {
			t.Fatalf("round %d: doubt %v, %d pings answered, want %d", round, tr.doubt, len(got), len(want))
		}
		for i := range want {
			if !got[i].sent.Equal(want[i].sent) || !got[i].answered.Equal(want[i].answered) {
				t.Fatalf("round %d: ping %d counted as (%v, %v), want (%v, %v)", round, i,
					got[i].sent.Sub(base), got[i].answered.Sub(base), want[i].sent.Sub(base), want[i].answered.Sub(base))
			}
		}
	}
}
