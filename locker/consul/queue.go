package consul

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/queue"
)

// The candidates' queue (DESIGN §1.12, "Who wakes at a failover") is
// package queue's, on this store: an entry <path>/~queue/<session>,
// locked by the candidate's session, ranked by its CreateIndex, versioned
// by its ModifyIndex, its value "<id> <beat> <who> ahead=<place>" (who:
// queue.Who's JSON, for status; older releases wrote none, and read only
// what follows the last " ahead="). Only the
// candidates near the head rewrite theirs (keepCandidate, with each
// renewal of the session): Consul ends a dead candidate's session within
// two TTLs, which unlocks (ends) its entry, so silence judges only the
// near. A successor follows the entry ahead with blocking queries on
// that one key.

// queueDir separates the entries from the lock key and its once-per
// records. Its '~' is a character no key or prefix may hold
// (locker.ValidateKey), like that of the records: "<key>/.queue/x" is a
// valid key, whose lock key would read as a live place in <key>'s queue,
// hold up every candidate of <key> behind it, and be deleted as a silent
// one while its holder leads.
const queueDir = "/~queue/"

// entryKey is the queue entry of the candidate with session id.
func (l *Locker) entryKey(id string) string { return l.path + queueDir + id }

// spot is what a queued candidate knows of its place (queue.Place), and
// the beat of its writes. The queue's WaitTurn lowers it; keepCandidate
// reads it. Near the head, a candidate rewrites its entry with each
// renewal.
type spot struct {
	queue.Place
	beat atomic.Uint64
	who  string // queue.Who, encoded: the same in every write
}

const noSpot = queue.Unknown

func newSpot(who queue.Who) *spot {
	s := &spot{who: who.Encode()}
	s.Reset()
	return s
}

// entryValue is what a candidate writes into its entry: its ID, a beat that
// changes with every write, who it is (queue.Who, encoded), and how many
// live entries it knows ahead of it.
func entryValue(id string, beat uint64, who string, ahead int64) []byte {
	return []byte(id + " " + strconv.FormatUint(beat, 10) + " " + who + " ahead=" + queue.Said(ahead))
}

// parseEntryValue undoes entryValue, and reads the value of an older
// release ("<id> <beat> ahead=<place>"), which says no who (ok false).
// The ID may hold spaces: it is what stands before the beat.
func parseEntryValue(v string) (id string, who queue.Who, ok bool) {
	if i := strings.LastIndex(v, " ahead="); i >= 0 {
		v = v[:i]
	}
	if strings.HasSuffix(v, "}") {
		for j := strings.LastIndex(v, " {"); j >= 0; j = strings.LastIndex(v[:j], " {") {
			if who, ok = queue.ParseWho(v[j+1:]); ok {
				v = v[:j]
				break
			}
		}
	}
	if i := strings.LastIndex(v, " "); i >= 0 {
		if _, err := strconv.ParseUint(v[i+1:], 10, 64); err == nil {
			v = v[:i]
		}
	}
	return v, who, ok
}

// toEntry is an entry as the queue reads it: ranked by CreateIndex, its
// version the ModifyIndex, ended once unlocked. A value with no place in
// it is an older leaderrun's, which rewrites.
func toEntry(p *api.KVPair) queue.Entry {
	e := queue.Entry{Key: p.Key, Version: strconv.FormatUint(p.ModifyIndex, 10),
		Rank: p.CreateIndex, Placed: true, Ended: p.Session == "", Ref: p}
	v := string(p.Value)
	if i := strings.LastIndex(v, " ahead="); i >= 0 {
		e.Said = v[i+len(" ahead="):]
	} else {
		e.Unsaid = true
	}
	return e
}

// queueConfig is the key's queue: silence judges only the entries near
// the head (Consul ends a dead candidate's session, and unlocks its
// entry, within two TTLs), and nothing is ancient.
func (l *Locker) queueConfig() queue.Config {
	return queue.Config{TTL: l.opts.TTL, Log: l.log.With("key", l.path), ErrText: func(err error) any { return l.scrub(err) }}
}

// enqueue writes the candidate's entry, locked by its session: creating it
// (at the tail of the queue) when it is absent, and otherwise moving its
// ModifyIndex, which its successor reads as a sign of life. beat makes
// every write change the value; Consul moves no index for a write that
// changes nothing. ahead is the number of live entries it knows ahead.
//
// The write is not cut short when ctx ends: Consul would still apply a
// write whose request was abandoned, possibly after dequeue's delete, and
// leave an entry behind. It ends within callTimeout all the same.
func (l *Locker) enqueue(ctx context.Context, id string, beat uint64, who string, ahead int64) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	var ok bool
	err := l.do(cctx, func(c *api.Client) (err error) {
		ok, _, err = c.KV().Acquire(&api.KVPair{
			Key: l.entryKey(id), Session: id, Value: entryValue(l.opts.ID, beat, who, ahead),
		}, l.writeOpts(cctx))
		return err
	})
	switch {
	case err != nil:
		return l.fail("write queue entry "+l.entryKey(id), err)
	case !ok:
		return fmt.Errorf("write queue entry %s: %w", l.entryKey(id), errEntryRefused)
	}
	return nil
}

// join writes the candidate's first queue entry (queue.Join). A failure
// that may pass is retried while less than half a TTL has gone since the
// session was created: nothing renews it before the campaign starts, and
// the last try (at most callTimeout, half of MinTTL) ends before the
// session's TTL.
func (l *Locker) join(ctx context.Context, id string, place *spot) error {
	return queue.Join(ctx, l.queueConfig(), queueRetryable, l.opts.TTL/2, func(ctx context.Context) error {
		return l.enqueue(ctx, id, 0, place.who, noSpot)
	})
}

// queueRetryable: not a refusal (ACL, TLS), not a lock Consul would not
// grant (the session is gone).
func queueRetryable(err error) bool {
	return !errors.Is(err, locker.ErrRefused) && !errors.Is(err, errEntryRefused)
}

// queueRetryFor bounds a run of failing queue calls (queue.RetryFor).
func (l *Locker) queueRetryFor() time.Duration { return queue.RetryFor(l.opts.TTL) }

// errEntryRefused: Consul did not lock the entry for our session (it has
// ended).
var errEntryRefused = errors.New("Consul refused the lock")

// dequeue deletes the candidate's entry on a fresh short timeout, so the
// next candidate moves up at once. Failure only means the successor skips
// the entry once it is silent (or unlocked) for long enough.
func (l *Locker) dequeue(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := l.do(ctx, func(c *api.Client) error {
		_, err := c.KV().Delete(l.entryKey(id), l.writeOpts(ctx))
		return err
	}); err != nil {
		l.log.Debug("delete queue entry failed; the next candidate skips it once it is silent", "key", l.entryKey(id), "error", l.scrub(err))
	}
}

// waitTurn returns once no live entry is ahead of ours (queue.WaitTurn).
func (l *Locker) waitTurn(ctx context.Context, id string, place *spot) error {
	return queue.New(l.queueConfig(), entries{l, id, place}, &place.Place).WaitTurn(ctx)
}

// entries is the queue.Store of the candidate with session id.
type entries struct {
	l     *Locker
	id    string
	place *spot
}

func (s entries) List(ctx context.Context) (mine *queue.Entry, others []queue.Entry, err error) {
	var pairs api.KVPairs
	err = s.l.do(ctx, func(c *api.Client) (err error) {
		pairs, _, err = c.KV().List(s.l.path+queueDir, s.l.queryOpts(ctx, false))
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	key := s.l.entryKey(s.id)
	for _, p := range pairs {
		switch e := toEntry(p); {
		case p.Key != key:
			others = append(others, e)
		case p.Session == s.id:
			mine = &e
		}
	}
	return mine, others, nil
}

func (s entries) Rejoin(ctx context.Context) error {
	return s.l.enqueue(ctx, s.id, s.place.beat.Add(1), s.place.who, noSpot)
}

func (s entries) Declare(ctx context.Context, ahead int64) (int64, error) {
	return ahead, s.l.enqueue(ctx, s.id, s.place.beat.Add(1), s.place.who, ahead)
}

func (s entries) Retryable(err error) bool { return queueRetryable(err) }

// Delete deletes a dead entry if it is still as we read it.
func (s entries) Delete(ctx context.Context, e queue.Entry) error {
	p := e.Ref.(*api.KVPair)
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err := s.l.do(cctx, func(c *api.Client) error {
		_, _, err := c.KV().DeleteCAS(&api.KVPair{Key: p.Key, ModifyIndex: p.ModifyIndex}, s.l.writeOpts(cctx))
		return err
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Follow follows the entry ahead with blocking queries on its one key.
func (s entries) Follow(_ context.Context, e queue.Entry) (queue.Follower, error) {
	p := e.Ref.(*api.KVPair)
	return &follower{l: s.l, first: p, index: p.ModifyIndex}, nil
}

type follower struct {
	l     *Locker
	first *api.KVPair
	index uint64
}

// Next is one blocking query on the entry, for up to wait (minWait at
// least, blockWait at most). An entry deleted, unlocked, or locked or
// created afresh is gone; so is one whose index went backwards, to read
// the queue afresh.
func (f *follower) Next(ctx context.Context, wait time.Duration) (queue.Entry, bool, error) {
	if wait == queue.Forever {
		wait = blockWait
	}
	pair, _, err := f.l.readKeyAt(ctx, f.first.Key, max(f.index, 1), min(max(wait, minWait), blockWait))
	switch {
	case err != nil:
		return queue.Entry{}, false, err
	case pair == nil || pair.Session != f.first.Session || pair.CreateIndex != f.first.CreateIndex || pair.ModifyIndex < f.index:
		return queue.Entry{}, true, nil
	}
	f.index = pair.ModifyIndex
	return toEntry(pair), false, nil
}

func (*follower) Stop() {}
