package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

// Releases, and holders gone silent (DESIGN §1.7,
// "Hand edits on etcd and ZooKeeper").
//
// A candidate's znode goes away when its holder releases it, when its
// session ends (closed by the guard's release or a withdrawing candidate,
// or expired by the ensemble), and when someone deletes it by hand. A hand
// delete leaves the session, and so perhaps the job, alive: the holder
// sees its znode gone and stops its job, which may take its whole kill
// grace, and releases after that. ZooKeeper cannot be asked whether a
// session lives, so a release says so itself: it deletes the znode and
// writes the znode's name into the key's release record (releasedName),
// in one multi; the guard writes the name before it closes the session.
// A standby whose predecessor's znode vanished reads that record: naming
// the predecessor, it was a release after the job was gone. Otherwise the
// predecessor went silent: the standby leads only once the record names it
// after all (its holder's release came later), or once the TTL the
// predecessor declared in its znode, plus observe.Allowance, has passed on
// the standby's clock since it last saw the predecessor's latest write.
// Each renewal writes the holder's znode (Renew), and the standby keeps a
// data watch on it (candidate.waitDelete), so every successful renewal was
// sent before the standby saw it: the holder's kill point is earlier. That
// holds whatever removed the znode, and after a crash or a partition the
// standby leads about when the session's expiry deletes the znode.
//
// A candidate that started after the holder's znode was deleted by hand
// never saw that znode: it learns of the holder from the key's
// last-winner record (lastName), and counts it silent in the same way,
// from when it read the record.
//
// A predecessor of an older leaderrun writes no release record, declares
// no TTL and renews without a write: a standby then waits the longest
// session the ensemble grants (maxSessionTimeout), which no holder's TTL
// can exceed, from when it saw the znode go.

// releasedName is the key's release record, a persistent child of its
// directory whose data is the name of the last znode released.
const releasedName = zkwire.ReleasedName

// releasedPath is the release record of the key whose candidate znode is
// node.
func releasedPath(node string) string { return path.Dir(node) + "/" + releasedName }

// record is what a candidate's znode holds: the holder record and the TTL
// this holder kills its job by.
type record struct {
	locker.Holder
	TTLMillis int64 `json:"ttl_ms,omitempty"`
}

// record encodes this Locker's candidate record.
func (l *Locker) record() []byte {
	return locker.Encode(record{Holder: locker.NewHolder(l.opts), TTLMillis: l.opts.TTL.Milliseconds()}, "holder record")
}

// declaredTTL reads the TTL a candidate's record declares; false for a
// record without one (an older leaderrun, or edited by hand).
func declaredTTL(data []byte) (time.Duration, bool) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil || r.TTLMillis <= 0 {
		return 0, false
	}
	return time.Duration(r.TTLMillis) * time.Millisecond, true
}

// silentHolder is a predecessor whose znode vanished without a release.
type silentHolder struct {
	name  string    // its znode's name
	until time.Time // when its job is dead for sure, on our clock
	ttl   time.Duration
}

// silence is what a Locker remembers of silent predecessors: it outlives
// the candidacy that saw them, which a whole key deleted by hand also ends.
type silence struct {
	mu      sync.Mutex
	holders []silentHolder
	// known are the latest znodes whose end this Locker saw (released,
	// or counted silent): the last winner's record naming one of them
	// is no new wait (lastHolder).
	known []string
}

// knownCap bounds silence.known: a Locker sees one handover at a time.
const knownCap = 64

func (s *silence) add(h silentHolder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holders = append(s.holders, h)
	s.noteLocked(h.name)
}

// note remembers that this Locker saw the znode name end.
func (s *silence) note(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteLocked(name)
}

func (s *silence) noteLocked(name string) {
	if s.isKnownLocked(name) {
		return
	}
	if len(s.known) == knownCap {
		s.known = append(s.known[:0], s.known[1:]...)
	}
	s.known = append(s.known, name)
}

// isKnown says whether this Locker saw the znode name end.
func (s *silence) isKnown(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isKnownLocked(name)
}

func (s *silence) isKnownLocked(name string) bool {
	for _, k := range s.known {
		if k == name {
			return true
		}
	}
	return false
}

// pending drops the holders whose time has passed or whom released names,
// and returns the latest time still to wait for, if any.
func (s *silence) pending(now time.Time, released string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var until time.Time
	kept := s.holders[:0]
	for _, h := range s.holders {
		if !now.Before(h.until) || h.name == released {
			continue
		}
		kept = append(kept, h)
		if h.until.After(until) {
			until = h.until
		}
	}
	s.holders = kept
	return until, len(kept) > 0
}

// released reads the key's release record; "" when there is none.
func (c *candidate) released(ctx context.Context) (string, error) {
	data, err := bounded(c, ctx, func() ([]byte, error) {
		data, _, err := c.s.conn.Get(releasedPath(c.node))
		return data, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	return string(data), err
}

// afterDelete is called once the znode of pred, the predecessor watched,
// is gone: released, or gone silent (see above). ahead are the candidates
// that were ahead of pred when we began to watch it.
func (c *candidate) afterDelete(ctx context.Context, pred string, ahead []string) error {
	seen := time.Now()
	name, err := c.released(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Not known to be a release: count it as silent.
		c.l.log.Debug("reading the release record failed", "error", err)
	}
	if name == pred {
		c.l.silent.pending(seen, name) // it may have been counted silent before
		c.l.silent.note(pred)
		return nil
	}
	// A record that declares its TTL is a leaderrun whose renewals write
	// its znode: its last renewal was made before we last saw the znode
	// as it wrote it. An older leaderrun's renewals write nothing: its
	// last one was made before the znode went, which is before now.
	from, ttl := seen, c.declared[pred]
	if ttl > 0 {
		if at, ok := c.seen[pred]; ok {
			from = at
		}
		// Our first read may have come after a hand edit lowered what it
		// declares: count with our own TTL too.
		ttl = max(ttl, c.l.opts.TTL)
	} else if ttl, err = c.l.longestSession(ctx); err != nil {
		return err
	}
	h := silentHolder{name: pred, ttl: ttl, until: from.Add(ttl + observe.Allowance(ttl))}
	c.l.silent.add(h)
	c.l.log.Warn("the holder's znode vanished without its release (deleted by hand, or its session ended); a standby leads only once it released after its job was gone, or its TTL has passed",
		"znode", c.l.dir+"/"+pred, "ttl", ttl, "wait_until", h.until.Sub(seen).Round(time.Millisecond))
	if c.wrote[pred] || len(ahead) == 0 {
		// It led, so it had waited out everyone ahead of it itself.
		return nil
	}
	// It never led: the candidates ahead of it, whom we never watched,
	// may be going silent too (a whole key deleted by hand, one znode
	// after the other), and our own candidacy may end before we see them
	// go. Each counts as silent from now, for the longest session (we
	// never saw what it declared or wrote), until a release names it.
	longest, err := c.l.longestSession(ctx)
	if err != nil {
		return err
	}
	for _, a := range ahead {
		if a != name {
			c.l.silent.add(silentHolder{name: a, ttl: longest, until: seen.Add(longest + observe.Allowance(longest))})
			c.l.log.Debug("a candidate ahead counts as silent until its release", "znode", c.l.dir+"/"+a, "ttl", longest)
		}
	}
	return nil
}

// lastName is the key's last-winner record, a persistent child of its
// directory beside the release record. A winner names its znode in it,
// with the TTL it kills its job by, in the multi that checks its znode
// before it leads (candidate.touchLeader); its own release empties it in
// the multi that deletes its znode (releaseNode), if no other winner
// wrote it since. A candidate that finds no one ahead of its znode reads
// it (lastHolder): a candidate that started after the holder's znode was
// deleted by hand has never seen that znode, and learns of the holder
// only from this record.
const lastName = "~last"

// lastPath is the last-winner record of the key whose candidate znode is
// node.
func lastPath(node string) string { return path.Dir(node) + "/" + lastName }

// lastRecord is what the last-winner record holds while its winner has
// not released: empty, it names no one.
type lastRecord struct {
	Node      string `json:"node"`
	TTLMillis int64  `json:"ttl_ms,omitempty"`
}

// lastRecord encodes the last-winner record naming our znode name.
func (l *Locker) lastRecord(name string) []byte {
	return locker.Encode(lastRecord{Node: name, TTLMillis: l.opts.TTL.Milliseconds()}, "last-winner record")
}

// lastHolder is called when no candidate is ahead of ours and no silent
// predecessor is pending: it counts the key's last winner as a holder
// gone silent, as afterDelete counts a predecessor whose znode vanished
// without its release, unless the last-winner record names no one (empty,
// missing: a key of an older leaderrun, or unreadable as a record), names
// our own znode, names one this Locker already saw end, or names the znode
// the release record names (a release by the guard, which leaves this
// record as it is). The wait counts from after the read:
// the holder's last renewal came before its znode was deleted, which came
// before we found no one ahead. It waits the TTL the record declares and
// our own, whichever is longer, plus observe.Allowance, on our clock.
func (c *candidate) lastHolder(ctx context.Context) error {
	data, err := bounded(c, ctx, func() ([]byte, error) {
		data, _, err := c.s.conn.Get(lastPath(c.node))
		return data, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return classify("zookeeper: read the last winner's record "+lastPath(c.node), err)
	}
	seen := time.Now()
	var r lastRecord
	if len(data) == 0 || json.Unmarshal(data, &r) != nil || r.Node == "" || r.Node == c.name || c.l.silent.isKnown(r.Node) {
		return nil
	}
	name, err := c.released(ctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil && name == r.Node {
		c.l.silent.note(r.Node)
		return nil
	}
	ttl := time.Duration(r.TTLMillis) * time.Millisecond
	if ttl > 0 {
		ttl = max(ttl, c.l.opts.TTL)
	} else if ttl, err = c.l.longestSession(ctx); err != nil {
		return err
	}
	h := silentHolder{name: r.Node, ttl: ttl, until: seen.Add(ttl + observe.Allowance(ttl))}
	c.l.silent.add(h)
	c.l.log.Warn("no candidate is ahead, but the key's last leader did not release (its znode deleted by hand, or its session ended); leading only once it releases after its job is gone, or its TTL has passed",
		"znode", c.l.dir+"/"+r.Node, "ttl", ttl, "wait_until", h.until.Sub(seen).Round(time.Millisecond))
	return nil
}

// awaitSilent returns once no predecessor this Locker saw go silent can
// still run its job: each is released (the release record names it) or
// its time has passed. It watches the release record meanwhile.
func (c *candidate) awaitSilent(ctx context.Context) error {
	for {
		if _, waiting := c.l.silent.pending(time.Now(), ""); !waiting {
			return nil
		}
		type watch struct {
			data []byte
			ch   <-chan zk.Event
		}
		p := releasedPath(c.node)
		w, err := bounded(c, ctx, func() (watch, error) {
			data, _, ch, err := c.s.conn.GetW(p)
			if errors.Is(err, zk.ErrNoNode) {
				_, _, ch, err = c.s.conn.ExistsW(p)
			}
			return watch{data, ch}, err
		})
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		until, waiting := c.l.silent.pending(time.Now(), string(w.data))
		if !waiting {
			return nil
		}
		t := time.NewTimer(time.Until(until))
		if err != nil {
			// Could not watch: look again shortly.
			t.Reset(min(time.Until(until), 200*time.Millisecond))
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		case <-w.ch:
			t.Stop()
		}
	}
}

// longestSession is the longest session the ensemble grants, learned once
// by asking for a session of 24 days: no holder's TTL can be longer.
func (l *Locker) longestSession(ctx context.Context) (time.Duration, error) {
	l.maxSession.mu.Lock()
	defer l.maxSession.mu.Unlock()
	if l.maxSession.d > 0 {
		return l.maxSession.d, nil
	}
	each := l.timeout / time.Duration(len(l.servers))
	var errs []error
	for _, server := range l.servers {
		sctx, cancel := context.WithTimeout(ctx, each)
		d, err := zkwire.SessionTimeoutFor(sctx, server, time.Duration(1<<31-1)*time.Millisecond)
		cancel()
		if err == nil {
			l.maxSession.d = d
			return d, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	return 0, fmt.Errorf("zookeeper: learn the ensemble's longest session, to wait out a predecessor that declared no TTL: %w", errors.Join(errs...))
}
