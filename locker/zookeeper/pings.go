package zookeeper

import (
	"encoding/binary"
	"time"
)

// go-zookeeper's pings as relay activities (relay.go).
//
// The client pings the server every third of the session timeout. The
// server takes a ping as it takes any request: it touches the session
// before handling it (ZooKeeperServer.submitRequestNow), and a follower
// answers it from its own state, as it answers a read. A ping answered a
// ping period before a renewal proves as much as one of our own reads
// answered then. leaderrun does not send the pings, so sniffConn picks
// them out of the connection's bytes: every frame after the connect is a
// 4-byte big-endian length, then, for a request, the xid and the opcode
// (a ping: xid -2, opcode 11), for an answer, the xid, the zxid and the
// error. A ping answered is paired with the oldest ping still unanswered
// on the connection: the server reads a connection's requests in order
// and touches the session for each as it takes it, so that ping's touch
// came before this answer whichever ping it answers. Anything that does
// not fit (a frame too short or too long, an answer to no ping, a ping
// answered with an error, a write cut short) ends the counting on that
// connection; a new connection starts over with nothing counted, its
// connect being counted already (zkSession.established).

const (
	pingXid    = -2
	opPing     = 11
	maxFrame   = 1 << 30 // far above any buffer go-zookeeper reads with
	maxPending = 8       // unanswered pings before the count is given up
	keptPings  = 4       // answered pings a session keeps
)

// frameScanner splits one direction of a connection into frames as its
// bytes pass, in pieces of any size. For each frame it hands on the head:
// the length prefix and the frame's first bytes, as many as asked for
// (want), calling on once they are all in. The rest of the frame is
// passed over.
type frameScanner struct {
	head []byte // the current frame's bytes so far, at most its want
	need int    // head bytes the current frame is to hand on (0: length not read yet)
	skip int    // bytes of the current frame still to pass over after the head
	bad  bool   // the stream stopped making sense: nothing more is handed on
}

// feed passes b on. want says, from a frame's length and its index
// (0 for the first frame), how many of its bytes after the length prefix
// make its head; a frame shorter than that is a broken stream. on gets
// each frame's head (prefix included) and whether it was the first frame.
func (f *frameScanner) feed(b []byte, frames *int, want func(index, length int) (int, bool), on func(head []byte, index int)) {
	for len(b) > 0 && !f.bad {
		if f.skip > 0 {
			n := min(f.skip, len(b))
			f.skip -= n
			b = b[n:]
			continue
		}
		if f.need == 0 {
			n := min(4-len(f.head), len(b))
			f.head = append(f.head, b[:n]...)
			b = b[n:]
			if len(f.head) < 4 {
				return
			}
			length := int(int32(binary.BigEndian.Uint32(f.head)))
			w, ok := want(*frames, length)
			if !ok || length < 0 || length < w || length > maxFrame {
				f.bad = true
				return
			}
			f.need, f.skip = 4+w, length-w
		}
		n := min(f.need-len(f.head), len(b))
		f.head = append(f.head, b[:n]...)
		b = b[n:]
		if len(f.head) < f.need {
			return
		}
		on(f.head, *frames)
		*frames++
		f.head, f.need = f.head[:0], 0
	}
}

// pingTracker pairs one connection's pings with their answers.
type pingTracker struct {
	out, in   frameScanner
	nout, nin int         // frames seen each way
	connected bool        // the connect answer was read and understood
	pending   []time.Time // send times of the unanswered pings, oldest first
	doubt     bool        // counting was given up on this connection
}

// Request heads: the connect request is passed over whole; every other
// request shows its xid and opcode.
func requestHead(index, length int) (int, bool) {
	if index == 0 {
		return 0, true
	}
	return 8, true
}

// Answer heads: the whole connect answer (at most 512 bytes, as
// parseConnectResponse expects), then the xid, zxid and error of each.
func answerHead(index, length int) (int, bool) {
	if index == 0 {
		return length, length <= 512
	}
	return 16, true
}

// wrote follows bytes written at sent (taken before the write began).
// complete is false when the write stopped short.
func (t *pingTracker) wrote(b []byte, sent time.Time, complete bool) {
	t.out.feed(b, &t.nout, requestHead, func(h []byte, index int) {
		if index == 0 {
			return
		}
		xid := int32(binary.BigEndian.Uint32(h[4:]))
		op := int32(binary.BigEndian.Uint32(h[8:]))
		switch {
		case xid != pingXid:
		case op != opPing || len(t.pending) >= maxPending:
			t.doubt = true
		default:
			t.pending = append(t.pending, sent)
		}
	})
	if t.out.bad || !complete {
		t.doubt = true
	}
}

// read follows bytes read by at (taken after the read returned). It
// returns the pings those bytes answered, as activities, and the connect
// answer when these bytes completed it.
func (t *pingTracker) read(b []byte, at time.Time) (answered []activity, connect []byte) {
	t.in.feed(b, &t.nin, answerHead, func(h []byte, index int) {
		if index == 0 {
			connect = append([]byte(nil), h...)
			return
		}
		xid := int32(binary.BigEndian.Uint32(h[4:]))
		if xid != pingXid {
			return
		}
		code := int32(binary.BigEndian.Uint32(h[16:]))
		if !t.connected || code != 0 || len(t.pending) == 0 {
			t.doubt = true
			return
		}
		answered = append(answered, activity{t.pending[0], at})
		t.pending = t.pending[1:]
	})
	if t.in.bad {
		t.doubt = true
	}
	if t.doubt {
		return nil, connect
	}
	return answered, connect
}
