package etcd

import (
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestRenewalsSendNoPings: a renewal is one message each way. The client
// sends no PING of its own and no connection window update for the
// answers, as gRPC's dynamic flow-control windows did after every message
// received (bandwidth estimation): each such PING's answer woke an idle
// leaderrun once more per renewal. Answering the server's PINGs (an ACK)
// is not counted. Read on the wire through a proxy that counts the
// client's HTTP/2 frames.
func TestRenewalsSendNoPings(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	var pings, updates, frames atomic.Int64
	frame := func(typ, flags byte, stream uint32) {
		frames.Add(1)
		switch {
		case typ == 0x6 && flags&0x1 == 0: // PING, not an ACK
			pings.Add(1)
		case typ == 0x8 && stream == 0: // WINDOW_UPDATE of the connection
			updates.Add(1)
		}
	}
	proxy := testsupport.NewTappedTCPProxy(t, strings.TrimPrefix(eps[0], "http://"), func() io.Writer {
		return &frameTap{frame: frame, preface: len(http2ClientPreface)}
	})
	l := newLocker(t, []string{"http://" + proxy.Addr}, lockertest.Key(t))
	lease := lockertest.MustAcquire(t, l)
	const renewals = 10
	p0, u0, f0 := pings.Load(), updates.Load(), frames.Load()
	for range renewals {
		if _, err := lease.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatalf("renew: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // an earlier PING's answer is in
	}
	p, u, f := pings.Load()-p0, updates.Load()-u0, frames.Load()-f0
	t.Logf("%d renewals: the client sent %d frames, %d PINGs, %d connection window updates", renewals, f, p, u)
	if f < renewals {
		t.Fatalf("the proxy saw %d frames for %d renewals: not counting the client's traffic", f, renewals)
	}
	if p != 0 || u != 0 {
		t.Errorf("the client sent %d PINGs and %d connection window updates over %d renewals, want none", p, u, renewals)
	}
}

// http2ClientPreface is what an HTTP/2 client sends before its frames.
const http2ClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frameTap walks a client's HTTP/2 frames (RFC 9113, section 4.1) as its bytes
// pass, in pieces of any size.
type frameTap struct {
	frame   func(typ, flags byte, stream uint32)
	preface int    // preface bytes still to pass over
	hdr     []byte // the current frame's header so far
	skip    int    // the current frame's payload bytes still to pass over
}

func (f *frameTap) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		switch {
		case f.preface > 0:
			k := min(f.preface, len(p))
			f.preface -= k
			p = p[k:]
		case f.skip > 0:
			k := min(f.skip, len(p))
			f.skip -= k
			p = p[k:]
		default:
			k := min(9-len(f.hdr), len(p))
			f.hdr = append(f.hdr, p[:k]...)
			p = p[k:]
			if len(f.hdr) < 9 {
				return n, nil
			}
			h := f.hdr
			f.skip = int(h[0])<<16 | int(h[1])<<8 | int(h[2])
			f.frame(h[3], h[4], (uint32(h[5])<<24|uint32(h[6])<<16|uint32(h[7])<<8|uint32(h[8]))&0x7fffffff)
			f.hdr = f.hdr[:0]
		}
	}
	return n, nil
}
