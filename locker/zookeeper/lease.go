package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

// lease is one ZooKeeper leadership: our session and the znode it created.
// It implements locker.Lease and keeps no deadline: the supervisor times
// every renewal itself (DESIGN §1.2).
type lease struct {
	s       *zkSession
	sid     int64
	node    string
	czxid   int64
	timeout time.Duration // per-call bound of the watch's own calls
	acl     []zk.ACL      // for the release record, should it be missing
	record  []byte        // our znode's data, written again by each renewal
	// lastVersion is the version of the key's last-winner record after
	// we named our znode in it; our release empties it (releaseNode).
	lastVersion int32
	silent      *silence // its Locker's: notes our znode's end at our release
	log         hclog.Logger

	locker.LostSignal

	stop      context.CancelFunc
	watchDone chan struct{}
	touchDone chan struct{}

	relay *relayPlan // the relay-gap bookkeeping (relay.go)
}

var _ locker.Lease = (*lease)(nil)

func newLease(c *candidate, czxid int64, acts ...activity) *lease {
	ctx, cancel := context.WithCancel(context.Background())
	bound := c.bound()
	s := &lease{
		s: c.s, sid: c.sid, node: c.node, czxid: czxid, timeout: c.l.timeout, acl: c.l.acl, record: c.record, lastVersion: c.lastVersion, silent: &c.l.silent, log: c.l.log, stop: cancel, watchDone: make(chan struct{}), touchDone: make(chan struct{}),
		relay: newRelayPlan(bound),
	}
	s.relay.pings = c.s.pingActivities
	for _, a := range acts {
		s.relay.answered(a.sent, a.answered)
	}
	go s.watch(ctx)
	go s.touch(ctx)
	return s
}

// bound is the relay bound a lease of c's assumes.
func (c *candidate) bound() relayBound {
	if c.l.relay.period == 0 {
		// Not learned: the largest tick the session allows (checkMargin).
		_, _, timeout, _ := c.s.state()
		return newRelayBound(timeout/2, false)
	}
	return c.l.relay
}

// Epoch is the czxid of our znode (DESIGN §1.1, see doc.go).
func (s *lease) Epoch() uint64 { return uint64(s.czxid) }

// Renew makes one round trip that only the ensemble's leader can answer,
// and returns the session timeout the server negotiated.
//
// The request is a multi holding one setData of our own znode, writing
// its record again: a standby watching the znode sees each renewal, and
// counts a holder that vanishes without its release from the last one it
// saw (silent.go). Why a write, read from ZooKeeper 3.8's server code:
//   - A client usually talks to a follower. Pings and reads (exists, get,
//     children) are answered by that follower from its own copy, also when
//     it has been cut off from the quorum and the leader has expired our
//     session: it notices the cut only syncLimit ticks later.
//   - A multi is a write: the follower forwards it to the leader
//     (Learner.request), whose PrepRequestProcessor checks our session in
//     the leader's own session tracker (SessionTrackerImpl.checkSession:
//     unknown or closing means SESSIONEXPIRED) and the setData op checks
//     our znode (NONODE when deleted); the answer comes back only after a
//     quorum committed the transaction. Success therefore proves that the
//     leader held our session open, and our znode in place, at a moment
//     after this request was sent.
//   - sync also travels to the leader, but the leader discards the result
//     of its session check (Leader.sendSync sends no error back), so a sync
//     answered for a closing session looks like success.
//
// What no client request does is restart the leader's own countdown of
// the session: a follower notes our activity locally
// (LearnerSessionTracker.touchSession) and hands it to the leader only in
// its answer to the leader's next ping (Learner.ping, every tickTime/2);
// the leader counts the timeout from there (LearnerHandler, PING: touch).
// A follower cut off right after passing this request on may never relay
// it, and the leader's countdown then runs from an earlier request. So the
// time returned is counted from the latest request known to have been
// relayed before this one went on, plus half a tick (relay.go); touch
// keeps that request recent. The lease's first renewal, made as it is
// acquired, counts from the session's connect, from one of the client's
// pings (pings.go), or, when neither is recent, from candidate.verify's
// read (DESIGN §1.2).
func (s *lease) Renew(ctx context.Context) (time.Duration, error) {
	select {
	case <-s.Lost():
		// Leadership ended; a renewal must not look like a success (§1.3).
		return 0, fmt.Errorf("zookeeper: renew %s: %w: %s", s.node, locker.ErrLost, s.LostReason())
	default:
	}
	if id := s.s.conn.SessionID(); id != s.sid {
		s.markLost(fmt.Sprintf("session %x was replaced by %x", s.sid, id))
		return 0, fmt.Errorf("zookeeper: renew %s: %w: session %x expired", s.node, locker.ErrLost, s.sid)
	}
	s.relay.relayedDirect(s.s.establishedAt())
	sent := time.Now()
	relayed, found := s.relay.renewing(sent)
	if s.relay.late(sent, relayed, found) && !(found && s.relay.first()) {
		relayed, found = s.touchNow(ctx, relayed, found)
	}
	_, err := call(ctx, func() ([]zk.MultiResponse, error) {
		return s.s.conn.Multi(&zk.SetDataRequest{Path: s.node, Data: s.record, Version: -1})
	})
	s.relay.renewed(sent, time.Now(), err == nil)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// The server did not answer within the attempt's time: try the
		// next one, as the etcd client moves off a silent member.
		s.s.dropConn()
		return 0, fmt.Errorf("zookeeper: renew %s: %w", s.node, ctx.Err())
	case sessionGone(err):
		s.markLost(fmt.Sprintf("session %x expired", s.sid))
		return 0, fmt.Errorf("zookeeper: renew %s: %w: %w", s.node, locker.ErrLost, err)
	case errors.Is(err, zk.ErrNoNode):
		s.markLost(fmt.Sprintf("znode %s was deleted", s.node))
		return 0, fmt.Errorf("zookeeper: renew %s: %w: %w", s.node, locker.ErrLost, err)
	default:
		return 0, classify("zookeeper: renew "+s.node, err)
	}
	_, _, timeout, _ := s.s.state()
	return s.relay.granted(timeout, sent, relayed, found), nil
}

// touchNow makes the read that should have come before this renewal and
// waits a ping period after its answer, so that the renewal still claims
// (nearly) the whole timeout, when the attempt's time allows; otherwise it
// leaves the renewal to claim what it can.
func (s *lease) touchNow(ctx context.Context, relayed time.Time, found bool) (time.Time, bool) {
	period := s.relay.bound.period
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 2*period {
		return relayed, found
	}
	sent := time.Now()
	_, err := call(ctx, func() (bool, error) {
		ok, _, err := s.s.conn.Exists(s.node)
		return ok, err
	})
	if err != nil {
		return relayed, found
	}
	at := time.Now()
	s.relay.touchAnswered(sent, at)
	if !retry.Sleep(ctx, time.Until(at.Add(period))) {
		return relayed, found
	}
	return sent, true
}

func (s *lease) markLost(reason string) {
	if s.Mark(reason) {
		s.log.Debug("leadership lost", "znode", s.node, "reason", reason)
	}
}

// watch closes Lost when our znode is deleted, our session expires, or the
// connection has been down for a whole session timeout, after which the
// session cannot be alive (DESIGN §1.3). A reconnect within the session is
// not a loss: the watch is set again and the znode looked at.
func (s *lease) watch(ctx context.Context) {
	defer close(s.watchDone)
	var wch <-chan zk.Event // the armed watch on our znode, if any
	for {
		if ctx.Err() != nil {
			return
		}
		expired, disconnected, timeout, changed := s.s.state()
		if expired {
			s.markLost(fmt.Sprintf("session %x expired", s.sid))
			return
		}
		if why := s.s.shrunkReason(); why != "" {
			s.markLost(why)
			return
		}
		var deadline <-chan time.Time
		var timer *time.Timer
		if !disconnected.IsZero() {
			left := time.Until(disconnected.Add(timeout))
			if left <= 0 {
				s.markLost(fmt.Sprintf("disconnected from ZooKeeper for the whole session timeout (%s)", timeout))
				return
			}
			timer = time.NewTimer(left)
			deadline = timer.C
		} else if wch == nil {
			ch, gone, err := s.arm(ctx)
			switch {
			case gone != "":
				s.markLost(gone)
				return
			case err != nil:
				// Disconnected or slow: look at the state again shortly.
				if !retry.Sleep(ctx, 100*time.Millisecond) {
					return
				}
				continue
			}
			wch = ch
		}
		var ev zk.Event
		fired := false
		select {
		case <-ctx.Done():
		case <-changed:
		case <-deadline:
		case ev = <-wch:
			fired = true
		}
		if timer != nil {
			timer.Stop()
		}
		if fired {
			wch = nil
			if ev.Type == zk.EventNodeDeleted {
				s.markLost(fmt.Sprintf("znode %s was deleted", s.node))
				return
			}
		}
	}
}

// arm sets a watch on our znode. gone is a loss reason when the znode or
// the session is already gone.
func (s *lease) arm(ctx context.Context) (ch <-chan zk.Event, gone string, err error) {
	wctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	type watch struct {
		ok bool
		ch <-chan zk.Event
	}
	w, err := call(wctx, func() (watch, error) {
		ok, _, ch, err := s.s.conn.ExistsW(s.node)
		return watch{ok, ch}, err
	})
	switch {
	case err == nil && !w.ok:
		return nil, fmt.Sprintf("znode %s was deleted", s.node), nil
	case err != nil && sessionGone(err):
		return nil, fmt.Sprintf("session %x expired", s.sid), nil
	case err != nil:
		return nil, "", err
	}
	return w.ch, "", nil
}

// touch sends the server a cheap read of our znode when the relay plan
// asks for one (relayPlan.next): once before each renewal the cadence
// announces, every denseTouch while there is none. The server answers it
// itself; what matters is that it touches the session (relay.go). Loss is
// the watch's business and the renewal's.
func (s *lease) touch(ctx context.Context) {
	defer close(s.touchDone)
	last := time.Now() // the acquisition's own requests just touched the session
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		now := time.Now()
		at := s.relay.next(now, last)
		if d := at.Sub(now); d > 0 {
			t.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-s.relay.wake:
				t.Stop() // Go 1.23 timers: no stale value after Stop
				continue
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		sent := time.Now()
		last = sent
		s.relay.sentTouch(sent)
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := call(tctx, func() (bool, error) {
			ok, _, err := s.s.conn.Exists(s.node)
			return ok, err
		})
		cancel()
		if err == nil {
			s.relay.touchAnswered(sent, time.Now())
		}
	}
}

// Handle is "<session-id-hex>:<password-hex>:<znode>"; see
// Locker.ReleaseHandle. It holds the session's password, so it travels
// only over the guard's private pipe.
func (s *lease) Handle() string {
	s.s.mu.Lock()
	defer s.s.mu.Unlock()
	return zkwire.Handle(s.sid, s.s.passwd, s.node)
}

// parseHandle undoes Handle, accepting only handles for znodes under dir.
func parseHandle(handle, dir string) (id int64, passwd []byte, node string, err error) {
	id, passwd, node, err = zkwire.ParseHandle(handle)
	if err != nil || !strings.HasPrefix(node, dir+"/"+fmt.Sprintf("@%016x-", uint64(id))) {
		return 0, nil, "", fmt.Errorf("zookeeper: %w: not a session handle for %s", locker.ErrRefused, dir)
	}
	return id, passwd, node, nil
}

// Release deletes our znode and names it in the key's release record, in
// one multi, so the successor wakes at once and knows it for a release
// (silent.go), then closes the session. It stops the watch first, so our
// own delete is not reported as a loss. The caller releases only after
// the job is gone.
func (s *lease) Release(ctx context.Context) error {
	s.stop()
	for _, done := range []chan struct{}{s.watchDone, s.touchDone} {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	defer s.s.close()
	// Our job is gone: a later candidacy of this Locker need not wait
	// for us, should the last-winner record still name us.
	s.silent.note(path.Base(s.node))
	err := releaseNode(ctx, s.s.conn, s.node, s.acl, s.lastVersion)
	if err != nil && !sessionGone(err) {
		// Closing the session deletes the znode too; the successor then
		// waits out our TTL.
		return classify("zookeeper: release "+s.node, err)
	}
	return nil
}

// releaseNode deletes node and writes its name into the key's release
// record in one multi, creating the record when it is missing. A node
// already gone (deleted by hand) is still named in the record: a standby
// that saw it vanish then knows its job is gone. A key directory that is
// gone too leaves nothing to write: the standby waits out the TTL. A
// lastVersion of 0 or more is the version of the key's last-winner record
// (lastName) after the holder named node in it: the same multi empties
// it, unless another winner wrote it since, so that a candidate that
// starts later finds no one to wait for, whoever released after us.
func releaseNode(ctx context.Context, conn *zk.Conn, node string, acl []zk.ACL, lastVersion int32) error {
	name, rec := []byte(path.Base(node)), releasedPath(node)
	del := &zk.DeleteRequest{Path: node, Version: -1}
	set := &zk.SetDataRequest{Path: rec, Data: name, Version: -1}
	create := &zk.CreateRequest{Path: rec, Data: name, Acl: acl}
	last := &zk.SetDataRequest{Path: lastPath(node), Data: []byte{}, Version: lastVersion}
	deleting, marking, emptying := true, any(set), lastVersion >= 0
	var err error
	for range 6 {
		var ops []any
		if deleting {
			ops = append(ops, del)
		}
		ops = append(ops, marking)
		if emptying {
			ops = append(ops, last)
		}
		var res []zk.MultiResponse
		res, err = call(ctx, func() ([]zk.MultiResponse, error) { return conn.Multi(ops...) })
		if err == nil || ctx.Err() != nil || len(res) != len(ops) {
			return err
		}
		i := 0
		if deleting {
			if errors.Is(res[0].Error, zk.ErrNoNode) {
				deleting = false // our znode is gone: name it all the same
				continue
			}
			i++
		}
		switch e := res[i].Error; {
		case errors.Is(e, zk.ErrNoNode) && marking == any(set):
			marking = create // no record yet
			continue
		case errors.Is(e, zk.ErrNoNode):
			return nil // the key's directory is gone
		case errors.Is(e, zk.ErrNodeExists):
			marking = set // another release made it meanwhile
			continue
		}
		if emptying && (errors.Is(res[i+1].Error, zk.ErrBadVersion) || errors.Is(res[i+1].Error, zk.ErrNoNode)) {
			emptying = false // another winner wrote it since, or it is gone
			continue
		}
		return err
	}
	return err
}
