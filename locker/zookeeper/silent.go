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
	b, err := json.Marshal(record{Holder: locker.NewHolder(l.opts), TTLMillis: l.opts.TTL.Milliseconds()})
	if err != nil {
		panic(fmt.Sprintf("encode holder record: %v", err))
	}
	return b
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
}

func (s *silence) add(h silentHolder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holders = append(s.holders, h)
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
