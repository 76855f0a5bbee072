package consul

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/consul/consulwire"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/locker/queue"
)

// Acquire campaigns for the key with a new session and returns the lease
// once the key is ours (locker.Locker). While it waits it keeps its own
// session alive; once it returns, the only renewals are Lease.Renew calls.
// Whenever it returns an error the session has been destroyed (or will
// expire) and no goroutine is left behind.
func (l *Locker) Acquire(ctx context.Context) (locker.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id, err := l.createSession(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}

	// Queue up (queue.go) unless we only try once; a queue we may not
	// write is only a lost courtesy.
	var place *spot // nil unless queued
	if !l.opts.NoWait {
		queued := newSpot(queue.NewWho(l.opts))
		if qerr := l.join(ctx, id, queued); qerr == nil {
			place = queued
		} else {
			log := l.log.Debug
			if errors.Is(qerr, locker.ErrRefused) {
				log = l.log.Warn // the token may not write <key>/~queue/
			} else {
				l.dequeue(id) // the write may have gone through
			}
			if ctx.Err() == nil {
				log("cannot join the candidates' queue; every release will wake this candidate", "key", l.path, "error", qerr)
			}
		}
	}

	cctx, stop := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.keepCandidate(cctx, id, stop, place)
	}()
	var ls *lease
	err = nil
	if place != nil {
		err = l.waitTurn(cctx, id, place)
	}
	if err == nil {
		ls, err = l.campaign(cctx, id)
	}
	stop(nil)
	wg.Wait()
	if place != nil {
		l.dequeue(id)
	}
	if err == nil {
		return ls, nil
	}

	l.abandon(id)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if cause := context.Cause(cctx); !errors.Is(cause, context.Canceled) {
		return nil, fmt.Errorf("acquire %s: %w", l.path, cause)
	}
	return nil, err
}

// campaign waits for the key to be free and takes it with session id.
// Waiting uses blocking queries on the key, never polling; only while
// Consul holds the key back for a lock-delay do we retry on a timer. A
// holder that follows the observer-clock contract and has not written the
// key for its TTL + allowance is taken over (observe.go, DESIGN §1.12).
//
// Once it has seen a holder, the key is free for it only when that
// holder's own release freed it (consulwire.Released names its session).
// A key deleted, freed or emptied any other way — by hand, or by Consul
// when it ended the session — is that holder gone silent: a holder that
// follows the contract is waited out on our clock with its session's TTL
// (which no write can lower), counted from when we first saw the key so;
// any other until its session is gone (DESIGN §1.12, "A record edited by
// hand").
func (l *Locker) campaign(ctx context.Context, id string) (*lease, error) {
	backoff := retry.Backoff{Min: 50 * time.Millisecond, Max: min(max(l.lockDelay/4, 100*time.Millisecond), 2*time.Second)}
	var (
		index   uint64
		wait    = blockWait
		watch   observe.Watch
		holder  string        // session of the last holder seen
		known   bool          // holder's session was read: ttl and follows are its
		ttl     time.Duration // its TTL, if it follows the contract
		follows bool
		silent  bool   // the key went silent under holder (logged once)
		beat    []byte // the value holder last wrote, as we saw it
	)
	tried := false
	failures := 0
	for {
		pair, meta, err := l.readKey(ctx, index, wait)
		if err != nil {
			// The next read goes to the next address; give up only once
			// every address failed in a row.
			if failures++; failures >= len(l.ep.addrs) || !movable(ctx, err) {
				return nil, err
			}
			if !retry.Sleep(ctx, backoff.Next()) {
				return nil, ctx.Err()
			}
			continue
		}
		failures = 0
		wait = blockWait
		switch {
		case pair != nil && pair.Session == id:
			// Our own acquire went through though its answer did not
			// reach us.
			if ls, err := l.confirm(ctx, id); ls != nil || err != nil {
				return ls, err
			}
			if !retry.Sleep(ctx, backoff.Next()) {
				return nil, ctx.Err()
			}
			index = 0
			continue
		case pair != nil && pair.Session != "":
			if pair.Session != holder {
				holder, known, follows, silent = pair.Session, false, false, false
				watch.Reset()
			}
			if !known {
				known, ttl, follows = l.learnHolder(ctx, holder)
			}
			if l.opts.NoWait {
				h := locker.ParseHolder(pair.Value)
				return nil, fmt.Errorf("acquire %s: %w: %s leads (epoch %d)", l.path, locker.ErrHeld, h.ID, epochOf(pair, follows))
			}
			index = nextIndex(index, meta.LastIndex)
			backoff.Reset()
			if !follows {
				l.log.Debug("key held; waiting", "key", l.path, "holder_session", pair.Session)
				continue
			}
			watch.Observe(strconv.FormatUint(pair.ModifyIndex, 10), ttl)
			beat = pair.Value
			_, left, _ := watch.Due()
			if left > 0 {
				// Wake when the holder writes, or when it is due.
				wait = min(max(left, minWait), blockWait)
				continue
			}
			l.log.Info("holder stopped renewing; taking over", "key", l.path, "holder_session", pair.Session,
				"unchanged_for", ttl+observe.Allowance(ttl), "index", pair.ModifyIndex)
		case holder != "" && (pair == nil || consulwire.ReleasedBy(pair.Value) != holder):
			// Deleted or freed, but not by the holder's release.
			if !silent {
				silent = true
				l.log.Info("the key was deleted or freed without the holder's release; waiting the holder out as a silent one",
					"key", l.path, "holder_session", holder, "deleted", pair == nil)
			}
			if l.opts.NoWait {
				return nil, fmt.Errorf("acquire %s: %w: the key was deleted or freed by hand while session %s held it", l.path, locker.ErrHeld, holder)
			}
			index = nextIndex(index, meta.LastIndex)
			backoff.Reset()
			if !known {
				if known, ttl, follows = l.learnHolder(ctx, holder); !known {
					wait = time.Second // ask again soon
					continue
				}
			}
			if !follows {
				// Not timed by our clock: wait until its session is gone
				// (Consul applies the lock-delay if it ended holding).
				gone, err := l.sessionGone(ctx, holder)
				if err != nil && !errors.Is(err, locker.ErrRefused) {
					wait = time.Second
					continue
				}
				if !gone && err == nil {
					wait = time.Second
					continue
				}
				l.log.Debug("the silent holder's session is gone; taking the key", "key", l.path, "holder_session", holder)
				break
			}
			// Freed with the value of the heartbeat we saw (Consul ended
			// the session, or it was destroyed by hand): no later
			// heartbeat of the holder's succeeded, and the count goes on
			// from that one. Anything else starts it over.
			if _, _, seen := watch.Due(); !seen || pair == nil || !bytes.Equal(pair.Value, beat) {
				version := "deleted"
				if pair != nil {
					version = "free " + strconv.FormatUint(pair.ModifyIndex, 10)
				}
				watch.Observe(version, ttl)
			}
			_, left, _ := watch.Due()
			if left > 0 {
				wait = min(max(left, minWait), blockWait)
				continue
			}
			l.log.Info("silent holder is past its TTL; taking the key", "key", l.path, "holder_session", holder,
				"unchanged_for", ttl+observe.Allowance(ttl))
		default:
			if l.opts.NoWait && tried {
				// Free, yet Consul refused it: the previous holder's
				// session ended moments ago and its lock-delay still runs.
				return nil, fmt.Errorf("acquire %s: %w: the previous holder's lock-delay still runs", l.path, locker.ErrHeld)
			}
		}

		tried = true
		won, err := l.tryAcquire(ctx, id, pair, l.newRecord())
		if err != nil {
			return nil, err
		}
		if won {
			if ls, err := l.confirm(ctx, id); ls != nil || err != nil {
				return ls, err
			}
		}
		// Lost a race, or the key is in its lock-delay: Consul wakes no
		// blocking query when that ends, so look again after a pause.
		if !l.opts.NoWait && !retry.Sleep(ctx, backoff.Next()) {
			return nil, ctx.Err()
		}
		index = 0
	}
}

// learnHolder reads the holder's session: known is false when that failed
// in a way that may pass (ask again later). A token that may not read
// sessions knows the holder only as one that does not follow the contract.
func (l *Locker) learnHolder(ctx context.Context, session string) (known bool, ttl time.Duration, follows bool) {
	ttl, follows, err := l.holderTTL(ctx, session)
	switch {
	case err == nil:
		return true, ttl, follows
	case errors.Is(err, locker.ErrRefused):
		// A token without session read: wait for Consul to free the key,
		// as for any other holder.
		l.log.Warn("cannot read the holder's session; waiting for Consul to free the key instead of taking over after one TTL",
			"key", l.path, "error", err)
		return true, 0, false
	}
	return false, 0, false
}

// sessionGone reports whether a session has ended (released, destroyed,
// or invalidated by Consul).
func (l *Locker) sessionGone(ctx context.Context, session string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var se *api.SessionEntry
	err := l.do(cctx, func(c *api.Client) (err error) {
		se, _, err = c.Session().Info(session, l.queryOpts(cctx, true))
		return err
	})
	if err != nil {
		return false, l.fail("read holder session "+session, err)
	}
	return se == nil, nil
}

// minWait is the shortest blocking query a standby makes while a holder is
// nearly due; Consul reads a wait below 1ms as its 5 minute default.
const minWait = 10 * time.Millisecond

// readKey reads the lock key; with index > 0 it is a blocking query that
// returns when the key changes past index or after wait.
func (l *Locker) readKey(ctx context.Context, index uint64, wait time.Duration) (*api.KVPair, *api.QueryMeta, error) {
	return l.readKeyAt(ctx, l.path, index, wait)
}

// readKeyAt is readKey of any key.
func (l *Locker) readKeyAt(ctx context.Context, key string, index uint64, wait time.Duration) (*api.KVPair, *api.QueryMeta, error) {
	timeout := callTimeout
	q := &api.QueryOptions{Token: l.token}
	if index > 0 {
		q.WaitIndex, q.WaitTime = index, wait
		timeout = wait + wait/16 + callTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	at, c := l.ep.pick()
	if index > 0 {
		defer l.ep.abortOnMove(at, cancel)()
	}
	pair, meta, err := c.KV().Get(key, q.WithContext(cctx))
	if err != nil {
		l.ep.failed(cctx, at, err)
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, l.fail("read "+key, err)
	}
	return pair, meta, nil
}

// tryAcquire makes one acquire of the key with session id, creating the
// key afresh so that its CreateIndex is the acquire's Raft index (the
// epoch): on an absent key a lock; on a key as last read (free, or held by
// a holder that is due) a delete conditioned on its ModifyIndex and a lock,
// in one transaction. It first renews the session, so that Consul's TTL
// timer for it starts as late as possible before leadership does.
func (l *Locker) tryAcquire(ctx context.Context, id string, seen *api.KVPair, rec record) (bool, error) {
	l.attempts.Add(1)
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := l.renewSession(cctx, id); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		// Not ErrLost for Acquire's caller: no leadership was lost.
		return false, fmt.Errorf("acquire %s: candidate session: %v", l.path, err)
	}
	first := &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: l.path}
	if seen != nil {
		first = &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: l.path, Index: seen.ModifyIndex}
	}
	won, resp, err := l.txn(cctx, api.TxnOps{
		{KV: first},
		{KV: &api.KVTxnOp{Verb: api.KVLock, Key: l.path, Value: rec.encode(), Session: id}},
	})
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, l.fail("acquire "+l.path, err)
	}
	if !won {
		l.log.Debug("acquire rolled back", "key", l.path, "reason", txnErrors(resp))
	}
	return won, nil
}

// confirm reads the key back with a consistent read (DESIGN §1.7). If it is
// held by session id, leadership is ours and its epoch is the entry's
// CreateIndex: our acquire created the key, so it is the acquire's Raft
// index, which only grows, even across deletes of the key (DESIGN §1.1;
// LockIndex would restart). It returns nil, nil when the key is not ours
// after all.
func (l *Locker) confirm(ctx context.Context, id string) (*lease, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var (
		pair *api.KVPair
		meta *api.QueryMeta
	)
	err := l.onEach(cctx, func(actx context.Context) error {
		return l.do(actx, func(c *api.Client) (err error) {
			pair, meta, err = c.KV().Get(l.path, l.queryOpts(actx, true))
			return err
		})
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, l.fail("read back "+l.path, err)
	}
	if pair == nil || pair.Session != id || pair.CreateIndex == 0 {
		l.log.Debug("acquire did not stick; campaigning again", "key", l.path, "session", id)
		return nil, nil
	}
	rec := l.newRecord()
	if err := json.Unmarshal(pair.Value, &rec); err != nil {
		rec = l.newRecord() // written over by hand already; our next heartbeat restores it
	}
	ls := l.newLease(id, pair.CreateIndex, pair.ModifyIndex, meta.LastIndex, rec)
	l.log.Debug("acquired", "key", l.path, "session", id, "epoch", ls.epoch)
	return ls, nil
}

// nextIndex is the WaitIndex for the next blocking query. Consul's index
// can go backwards (snapshot restore, another server); then start over.
func nextIndex(prev, last uint64) uint64 {
	switch {
	case last < prev:
		return 0
	case last == 0:
		return 1
	}
	return last
}
