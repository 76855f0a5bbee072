package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
)

// withdrawTimeout bounds closing a candidate's session after a failed or
// cancelled campaign; it runs on a fresh context because the caller's may
// be over.
const withdrawTimeout = 2 * time.Second

// candidate is one campaign: a session and the znode it created.
type candidate struct {
	l    *Locker
	s    *zkSession
	sid  int64
	name string // our znode's name under l.dir
	node string // l.dir + "/" + name
	// declared is the longest TTL each predecessor's record declared in
	// any read of it: a hand edit that lowers it later does not count.
	declared map[string]time.Duration
	// seen is, for each predecessor, when we last saw its znode as it
	// was after its latest write: a leader's renewals write it (silent.go).
	seen   map[string]time.Time
	wrote  map[string]bool // we saw the predecessor write: it led
	record []byte          // our znode's data, which our renewals write again
	// lastVersion is the version of the last-winner record after our
	// write of it (touchLeader), which our release empties; -1 before.
	lastVersion int32
}

// Acquire campaigns for the key and returns once this candidate leads; see
// locker.Locker.
func (l *Locker) Acquire(ctx context.Context) (locker.Lease, error) {
	s, err := l.open(ctx)
	if err != nil {
		return nil, err
	}
	c := &candidate{l: l, s: s, sid: s.ID(), declared: map[string]time.Duration{}, seen: map[string]time.Time{}, wrote: map[string]bool{}, lastVersion: -1}
	_, _, timeout, _ := s.state()
	if timeout > l.opts.TTL {
		// Harmless: the supervisor uses min(requested, granted) (§1.6).
		l.log.Warn("ZooKeeper keeps sessions longer than asked (its minSessionTimeout, 2 ticks by default)",
			"requested", l.opts.TTL, "granted", timeout)
	} else if timeout < l.opts.TTL {
		s.close()
		return nil, &locker.ConfigError{Field: "TTL", Rule: fmt.Sprintf(
			"the ensemble grants sessions of at most %s (its maxSessionTimeout, 20 ticks by default), but %s was asked for; ask for at most %s",
			timeout, l.opts.TTL, timeout)}
	}
	l.marginOnce.Do(func() { l.checkMargin(ctx, timeout) })
	lease, err := c.campaign(ctx)
	if err != nil {
		c.withdraw()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return lease, nil
}

func (c *candidate) campaign(ctx context.Context) (*lease, error) {
	if err := c.enter(ctx); err != nil {
		return nil, err
	}
	if err := c.waitTurn(ctx); err != nil {
		return nil, err
	}
	return c.verify(ctx)
}

// bounded runs one call of ours with the per-call timeout (DESIGN §1.8).
func bounded[T any](c *candidate, ctx context.Context, f func() (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, c.l.timeout)
	defer cancel()
	return call(cctx, f)
}

// enter creates the key's path and our ephemeral sequential znode. If the
// answer to the create is lost, the znode may exist all the same: it is
// found again by the session id in its name.
func (c *candidate) enter(ctx context.Context) error {
	if err := c.l.ensurePath(ctx, c.s, c.l.dir); err != nil {
		return err
	}
	// The release record, so that a release that cannot create it (the
	// guard's, which does not know the ACL) can still write it.
	if _, err := bounded(c, ctx, func() (string, error) {
		return c.s.conn.Create(c.l.dir+"/"+releasedName, nil, 0, c.l.acl)
	}); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return classify("zookeeper: create "+c.l.dir+"/"+releasedName, err)
	}
	prefix := fmt.Sprintf("@%016x-", c.sid)
	record := c.l.record()
	c.record = record
	for attempt := 0; ; attempt++ {
		created, err := bounded(c, ctx, func() (string, error) {
			return c.s.conn.Create(c.l.dir+"/"+prefix, record, zk.FlagEphemeral|zk.FlagSequence, c.l.acl)
		})
		if err == nil {
			c.node, c.name = created, path.Base(created)
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if sessionGone(err) || refusal(err) || attempt > 0 || !errors.Is(err, zk.ErrConnectionClosed) {
			return classify("zookeeper: create candidate znode under "+c.l.dir, err)
		}
		// The create may have happened: look for it before trying again.
		names, err := c.children(ctx)
		if err != nil {
			return err
		}
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				c.node, c.name = c.l.dir+"/"+n, n
			}
		}
		if c.node != "" {
			break
		}
	}
	c.l.log.Debug("campaigning", "znode", c.node, "session", fmt.Sprintf("%x", c.sid))
	return nil
}

// ensurePath creates the persistent znodes of dir that do not exist yet.
func (l *Locker) ensurePath(ctx context.Context, s *zkSession, dir string) error {
	p := ""
	for _, seg := range strings.Split(strings.TrimPrefix(dir, "/"), "/") {
		p += "/" + seg
		cctx, cancel := context.WithTimeout(ctx, l.timeout)
		_, err := call(cctx, func() (string, error) { return s.conn.Create(p, nil, 0, l.acl) })
		cancel()
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return classify("zookeeper: create "+p, err)
		}
	}
	return nil
}

// children lists the candidates' znode names, in sequence order.
func (c *candidate) children(ctx context.Context) ([]string, error) {
	names, err := bounded(c, ctx, func() ([]string, error) {
		names, _, err := c.s.conn.Children(c.l.dir)
		return names, err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, zk.ErrNoNode) {
			return nil, fmt.Errorf("zookeeper: %s was deleted: %w", c.l.dir, errCandidacyLost)
		}
		return nil, classify("zookeeper: list candidates of "+c.l.dir, err)
	}
	return candidates(names), nil
}

// candidates keeps the names of candidate znodes and sorts them by their
// sequence number, the 10 digits ZooKeeper appends.
func candidates(names []string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, "@") && len(n) > 10 {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][len(out[i])-10:] < out[j][len(out[j])-10:] })
	return out
}

// waitTurn returns once no candidate znode has a lower sequence than ours.
// It watches only the immediate predecessor, so a release wakes one
// waiter, not all of them.
func (c *candidate) waitTurn(ctx context.Context) error {
	for {
		names, err := c.children(ctx)
		if err != nil {
			return err
		}
		pred, found, at := "", false, 0
		for i, n := range names {
			if n == c.name {
				found = true
				break
			}
			pred, at = n, i
		}
		if !found {
			return fmt.Errorf("zookeeper: candidate znode %s is gone: %w", c.node, errCandidacyLost)
		}
		if pred == "" {
			// First in line: unless a predecessor seen before went
			// silent and may still run its job (silent.go).
			if _, waiting := c.l.silent.pending(time.Now(), ""); !waiting {
				// Nor the key's last winner (lastHolder), whose
				// znode we may never have seen.
				if err := c.lastHolder(ctx); err != nil {
					return err
				}
				if _, waiting := c.l.silent.pending(time.Now(), ""); !waiting {
					return nil
				}
			}
			if c.l.opts.NoWait {
				// A single attempt does not wait a TTL out.
				return fmt.Errorf("zookeeper: key %q: %w: its last leader went silent without a release (its znode deleted by hand, or its session expired): its job may still run; a waiting candidate takes the key once that leader's TTL has passed (BACKENDS.md, \"Hand edits\")",
					c.l.opts.Name(), locker.ErrHeld)
			}
			if err := c.awaitSilent(ctx); err != nil {
				return err
			}
			continue
		}
		if c.l.opts.NoWait {
			return c.held(ctx, names[0])
		}
		c.l.log.Debug("waiting for predecessor", "znode", c.node, "predecessor", pred)
		deleted, err := c.waitDelete(ctx, pred)
		if err != nil {
			return err
		}
		if deleted {
			if err := c.afterDelete(ctx, pred, names[:at]); err != nil {
				return err
			}
		}
		if c.l.onWake != nil {
			c.l.onWake()
		}
	}
}

// waitDelete returns when the znode of pred is gone (deleted true) or its
// watch ended for another reason (the caller then looks again), or with an
// error when our session ended. It notes the TTL pred's record declares,
// the first time it reads it, and when it last saw pred's latest write:
// each renewal of a leader writes its znode, which fires the data watch,
// and the watch is set again with a read (silent.go).
func (c *candidate) waitDelete(ctx context.Context, pred string) (deleted bool, err error) {
	p := c.l.dir + "/" + pred
	type watch struct {
		data []byte
		ch   <-chan zk.Event
	}
	for {
		w, err := bounded(c, ctx, func() (watch, error) {
			data, _, ch, err := c.s.conn.GetW(p)
			return watch{data, ch}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return true, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			if sessionGone(err) {
				return false, fmt.Errorf("zookeeper: session %x ended: %w", c.sid, errCandidacyLost)
			}
			return false, classify("zookeeper: watch predecessor "+p, err)
		}
		c.seen[pred] = time.Now()
		// The longest TTL the record declared while we watched it: a TTL
		// edited lower by hand never shortens the wait, and the
		// holder's own next renewal writes the true one again.
		if ttl, ok := declaredTTL(w.data); ok {
			c.declared[pred] = max(c.declared[pred], ttl)
		}
		ev, err := c.nextEvent(ctx, w.ch)
		if err != nil {
			return false, err
		}
		switch ev.Type {
		case zk.EventNodeDeleted:
			return true, nil
		case zk.EventNodeDataChanged:
			c.seen[pred] = time.Now() // a write, made before now
			c.wrote[pred] = true
		default:
			return false, nil
		}
	}
}

// nextEvent waits for the watch on ch to fire, or for our session to end.
func (c *candidate) nextEvent(ctx context.Context, ch <-chan zk.Event) (zk.Event, error) {
	for {
		expired, _, _, changed := c.s.state()
		if expired {
			return zk.Event{}, fmt.Errorf("zookeeper: session %x expired: %w", c.sid, errCandidacyLost)
		}
		select {
		case <-ctx.Done():
			return zk.Event{}, ctx.Err()
		case ev := <-ch:
			return ev, nil
		case <-changed:
		}
	}
}

// held builds the NoWait error, naming the current holder when it can.
func (c *candidate) held(ctx context.Context, first string) error {
	err := fmt.Errorf("zookeeper: key %q: %w", c.l.opts.Name(), locker.ErrHeld)
	type got struct {
		data []byte
		stat *zk.Stat
	}
	g, gerr := bounded(c, ctx, func() (got, error) {
		data, stat, err := c.s.conn.Get(c.l.dir + "/" + first)
		return got{data, stat}, err
	})
	if gerr != nil {
		return err
	}
	h := locker.ParseHolder(g.data)
	return fmt.Errorf("zookeeper: key %q led by %s (epoch %d): %w", c.l.opts.Name(), h.ID, g.stat.Czxid, locker.ErrHeld)
}

// verify checks, after the wait, that our znode still exists and belongs to
// our session, and that the ensemble's leader still knows the session
// (DESIGN §1.7): a waiter whose znode vanished would otherwise see "no
// predecessor" and lead without one. It reads the epoch from the znode.
func (c *candidate) verify(ctx context.Context) (*lease, error) {
	if c.s.conn.SessionID() != c.sid {
		return nil, fmt.Errorf("zookeeper: session %x was replaced: %w", c.sid, errCandidacyLost)
	}
	if err := c.touchLeader(ctx); err != nil {
		return nil, err
	}
	type got struct {
		ok   bool
		stat *zk.Stat
	}
	sent := time.Now()
	g, err := bounded(c, ctx, func() (got, error) {
		ok, stat, err := c.s.conn.Exists(c.node)
		return got{ok, stat}, err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, classify("zookeeper: verify candidate znode "+c.node, err)
	}
	read := activity{sent, time.Now()}
	if !g.ok {
		return nil, fmt.Errorf("zookeeper: candidate znode %s is gone: %w", c.node, errCandidacyLost)
	}
	if g.stat.EphemeralOwner != c.sid {
		return nil, fmt.Errorf("zookeeper: candidate znode %s belongs to session %x, not ours: %w",
			c.node, g.stat.EphemeralOwner, errCandidacyLost)
	}
	// The first renewal follows at once, and what it claims is counted
	// from the latest request known to have reached the ensemble's leader
	// (relay.go): the connect, which the leader counted as it granted or
	// revalidated the session, or one of the client's pings answered a
	// ping period before (pings.go). Pings go out every third of the
	// timeout, so while they are followed that is at most a third and a
	// ping period ago, and the first renewal claims the rest; a short
	// grant brings the next one forward. When neither is that recent (the
	// pings could not be followed on this connection), the read above
	// must first be relayed: a ping period after its answer.
	bound := c.bound()
	if !c.recentlyRelayed(bound, time.Now()) {
		c.l.log.Debug("no recent relayed request; waiting a ping period", "znode", c.node)
		if !retry.Sleep(ctx, time.Until(read.answered.Add(bound.period))) {
			return nil, ctx.Err()
		}
	}
	c.l.log.Debug("leading", "znode", c.node, "epoch", g.stat.Czxid)
	return newLease(c, g.stat.Czxid, read), nil
}

// recentlyRelayed says whether a request of the session known to have
// been relayed to the ensemble's leader by now (the connect, or a ping
// answered a ping period ago) went out at most a ping interval (a third of
// the timeout) and two ping periods before now.
func (c *candidate) recentlyRelayed(b relayBound, now time.Time) bool {
	_, _, timeout, _ := c.s.state()
	latest, found := b.latest(now, c.s.establishedAt(), true, c.s.pingActivities())
	return found && now.Sub(latest) <= timeout/3+2*b.period
}

// touchLeader makes the renewal request once (see lease.Renew), and in the
// same multi names our znode in the key's last-winner record (lastName),
// creating the record when it is missing: it is written only while our
// znode exists, and before we lead.
func (c *candidate) touchLeader(ctx context.Context) error {
	last, data := lastPath(c.node), c.l.lastRecord(c.name)
	set := &zk.SetDataRequest{Path: last, Data: data, Version: -1}
	create := &zk.CreateRequest{Path: last, Data: data, Acl: c.l.acl}
	var op any = set
	var res []zk.MultiResponse
	var err error
	for range 4 {
		res, err = bounded(c, ctx, func() ([]zk.MultiResponse, error) {
			return c.s.conn.Multi(&zk.CheckVersionRequest{Path: c.node, Version: -1}, op)
		})
		if err == nil || ctx.Err() != nil || len(res) != 2 || res[0].Error != nil {
			break
		}
		switch {
		case op == any(set) && errors.Is(res[1].Error, zk.ErrNoNode):
			op = create // no record yet: a new key, or one of an older leaderrun
			continue
		case op == any(create) && errors.Is(res[1].Error, zk.ErrNodeExists):
			op = set // another winner made it meanwhile
			continue
		}
		break
	}
	switch {
	case err == nil:
		c.lastVersion = 0 // created
		if op == any(set) && len(res) == 2 && res[1].Stat != nil {
			c.lastVersion = res[1].Stat.Version
		}
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case sessionGone(err):
		return fmt.Errorf("zookeeper: session %x ended: %w", c.sid, errCandidacyLost)
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("zookeeper: candidate znode %s is gone: %w", c.node, errCandidacyLost)
	}
	return classify("zookeeper: check candidate znode "+c.node, err)
}

// withdraw releases the candidate's znode as a holder does (a candidate
// that never led has no job), so that a standby behind it does not take
// it for a silent holder, then closes the session, which deletes the
// znode if the release could not.
func (c *candidate) withdraw() {
	defer c.s.close()
	if c.node == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(withdrawTimeout, c.l.timeout))
	defer cancel()
	if err := releaseNode(ctx, c.s.conn, c.node, c.l.acl, c.lastVersion); err != nil {
		c.l.log.Debug("releasing candidate znode failed; closing the session deletes it", "znode", c.node, "error", err)
	}
}
