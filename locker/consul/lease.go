package consul

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/consul/consulwire"
)

// lease is one leadership: our session holds the key. It implements
// locker.Lease. A watch goroutine closes lost when the key stops being ours.
type lease struct {
	l       *Locker
	session string
	epoch   uint64

	// Renew's state (Renew is never called concurrently): the record we
	// write, how many heartbeats it counted, and the ModifyIndex of our
	// last write of the key, which the next heartbeat is conditioned on.
	rec   record
	beat  uint64
	index uint64

	locker.LostSignal

	stopWatch context.CancelFunc
	watching  chan struct{} // closed when the watch goroutine returned
}

var _ locker.Lease = (*lease)(nil)

// newLease starts watching the key from index, the index of the consistent
// read that confirmed leadership; written is the key's ModifyIndex then.
func (l *Locker) newLease(session string, epoch, written, index uint64, rec record) *lease {
	ctx, cancel := context.WithCancel(context.Background())
	ls := &lease{
		l:         l,
		session:   session,
		epoch:     epoch,
		rec:       rec,
		index:     written,
		stopWatch: cancel,
		watching:  make(chan struct{}),
	}
	go ls.watch(ctx, max(index, 1))
	return ls
}

// Epoch is the Raft index of the acquire that created the key: its
// CreateIndex, read back after the acquire (DESIGN §1.1).
func (ls *lease) Epoch() uint64 { return ls.epoch }

// Renew renews the session and then writes the heartbeat standbys watch
// (observe.go), both bounded by ctx, and returns the TTL the server
// granted (DESIGN §1.2, §1.8, §1.12). It succeeds only if both writes did:
// the caller's send time, taken before the first, is never later than the
// send time of the heartbeat a standby may time its takeover from. A
// session the server no longer knows, or a key no longer ours, yields an
// error wrapping locker.ErrLost.
func (ls *lease) Renew(ctx context.Context) (time.Duration, error) {
	granted, err := ls.l.renewSession(ctx, ls.session)
	if errors.Is(err, locker.ErrLost) {
		ls.markLost("session " + ls.session + " is gone (expired or destroyed)")
	}
	if err != nil {
		return 0, err
	}
	if err := ls.heartbeat(ctx); err != nil {
		return 0, err
	}
	return granted, nil
}

// Handle names the session and the key for ReleaseHandle.
func (ls *lease) Handle() string { return formatHandle(ls.session, ls.l.path) }

// Release frees the key and destroys the session, bounded by ctx. The key
// is released explicitly first, which Consul does without a lock-delay, so
// the next candidate can take over at once; the supervisor calls this only
// after the child is gone (DESIGN §1.4). The watch goroutine is stopped
// even when Consul cannot be reached.
func (ls *lease) Release(ctx context.Context) error {
	ls.stopWatch()
	<-ls.watching
	if err := ls.l.giveBack(ctx, ls.session); err != nil {
		return err
	}
	ls.l.log.Debug("released", "key", ls.l.path, "session", ls.session, "epoch", ls.epoch)
	return nil
}

// giveBack frees the key held by session, which Consul does without a
// lock-delay, leaving the release marker on it (markReleased), then
// destroys the session. Its callers have seen the job gone (DESIGN §1.4).
func (l *Locker) giveBack(ctx context.Context, session string) error {
	// The release may use half the time; the destroy must have some left.
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		rctx, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
	}
	defer cancel()
	if err := l.onEach(rctx, func(ctx context.Context) error {
		return l.markReleased(ctx, session)
	}); err != nil {
		l.log.Debug("KV release failed; destroying the session anyway", "key", l.path, "error", l.scrub(err))
	}
	// Only the destroy must succeed: with Behavior release it frees the
	// key as well (after the lock-delay), though without the marker a
	// standby that saw us waits our TTL out.
	if err := l.onEach(ctx, func(ctx context.Context) error {
		return l.do(ctx, func(c *api.Client) error {
			_, err := c.Session().Destroy(session, l.writeOpts(ctx))
			return err
		})
	}); err != nil {
		return l.fail(fmt.Sprintf("release %s: destroy session %s", l.path, session), err)
	}
	return nil
}

// markReleased frees the key held by session and writes on it the marker
// that tells standbys the holder released it itself (consulwire.Released):
// a standby that saw this session hold the key takes a key freed any other
// way for a silent holder (DESIGN §1.12, "A record edited by hand"). When
// the key is no longer held by session because it was changed by hand,
// the marker still goes on it, so that a standby waiting our TTL out takes
// the key now that our job is gone: on an absent key (deleted) only if it
// is still absent, on a free key (our session destroyed, or the key
// released, by hand) only if no release marked it and nobody wrote it
// since it was read (consulwire.Marks).
func (l *Locker) markReleased(ctx context.Context, session string) error {
	marker := consulwire.Released(session)
	var ok bool
	if err := l.do(ctx, func(c *api.Client) (err error) {
		ok, _, err = c.KV().Release(&api.KVPair{Key: l.path, Session: session, Value: marker}, l.writeOpts(ctx))
		return err
	}); err != nil || ok {
		return err
	}
	var pair *api.KVPair
	if err := l.do(ctx, func(c *api.Client) (err error) {
		pair, _, err = c.KV().Get(l.path, l.queryOpts(ctx, true))
		return err
	}); err != nil {
		return err
	}
	var cas *api.KVPair
	switch {
	case pair == nil:
		cas = &api.KVPair{Key: l.path, Value: marker} // ModifyIndex 0: only if absent
	case consulwire.Marks(pair.Session, pair.Value):
		cas = &api.KVPair{Key: l.path, Value: marker, ModifyIndex: pair.ModifyIndex}
	default:
		return nil // held by another session, or freed by someone else's release
	}
	return l.do(ctx, func(c *api.Client) error {
		ok, _, err := c.KV().CAS(cas, l.writeOpts(ctx))
		if err == nil && ok {
			l.log.Debug("the key was changed by hand; left the release marker on it", "key", l.path, "session", session)
		}
		return err
	})
}

// markLost closes Lost once, keeping the first reason.
func (ls *lease) markLost(reason string) {
	if ls.Mark(reason) {
		ls.l.log.Debug("leadership lost", "key", ls.l.path, "epoch", ls.epoch, "reason", reason)
	}
}

// watch follows the key with blocking queries and closes Lost when it is no
// longer ours. Errors are retried with backoff: an unreachable agent is not
// a loss (the supervisor's deadline covers that case, DESIGN §1.3).
func (ls *lease) watch(ctx context.Context, index uint64) {
	defer close(ls.watching)
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		pair, meta, err := ls.l.readKey(ctx, index, blockWait)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			ls.l.log.Debug("watch of lock key failed; retrying", "key", ls.l.path, "error", err)
		case pair != nil && pair.Session == ls.session && meta.LastIndex >= index:
			index = meta.LastIndex
			backoff.Reset()
			continue
		default:
			// Not ours, or an answer older than our own acquire: only a
			// consistent read may stop a healthy leader.
			reason, gone, err := ls.confirmLost(ctx)
			if gone {
				ls.markLost(reason)
				return
			}
			if err == nil {
				index = nextIndex(index, meta.LastIndex)
				backoff.Reset()
				continue
			}
			ls.l.log.Debug("watch of lock key failed; retrying", "key", ls.l.path, "error", err)
		}
		if !retry.Sleep(ctx, backoff.Next()) {
			return
		}
	}
}

// confirmLost checks with a consistent read that the key is really no
// longer ours, so no stale answer stops a healthy leader.
func (ls *lease) confirmLost(ctx context.Context) (reason string, gone bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var pair *api.KVPair
	err = ls.l.do(cctx, func(c *api.Client) (err error) {
		pair, _, err = c.KV().Get(ls.l.path, ls.l.queryOpts(cctx, true))
		return err
	})
	if err != nil {
		return "", false, ls.l.fail("confirm loss of "+ls.l.path, err)
	}
	reason, gone = ls.lostIn(pair)
	return reason, gone, nil
}

// lostIn says whether the key as read no longer belongs to this lease.
func (ls *lease) lostIn(pair *api.KVPair) (reason string, gone bool) {
	switch {
	case pair == nil:
		return "key " + ls.l.path + " was deleted", true
	case pair.Session == ls.session:
		return "", false
	case pair.Session == "":
		return "key " + ls.l.path + " was released (session " + ls.session + " destroyed, expired or let go)", true
	default:
		h := locker.ParseHolder(pair.Value)
		return fmt.Sprintf("key %s is now held by session %s (%s)", ls.l.path, pair.Session, h.ID), true
	}
}
