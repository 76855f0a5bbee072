package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/locker"
)

// await waits for our turn while keeping our lease alive, then verifies that
// we still hold our key.
func (c *candidate) await(ctx context.Context) (*lease, error) {
	kctx, stopKeepAlive := context.WithCancel(ctx)
	expired := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.keepAlive(kctx, expired)
	}()
	err := c.waitTurn(ctx, expired)
	// From here on the only renewals are verify's, which stands for the
	// supervisor's confirm, and the supervisor's (DESIGN §1.2).
	stopKeepAlive()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return c.verify(ctx)
}

// Pace of a waiting candidate's renewals after a failure: a short pause,
// so that an outage shorter than the TTL does not cost the candidacy.
const candidateRetry = 250 * time.Millisecond

// keepAlive renews a waiting candidate's lease every TTL/3. A failed
// renewal is retried after candidateRetry, each attempt bounded by a tenth
// of the TTL (at least 500ms) as the supervisor bounds a leader's, so one
// silent member cannot use up the lease while others could answer. It
// reports on expired when the lease is gone, so the wait can end.
func (c *candidate) keepAlive(ctx context.Context, expired chan<- error) {
	ttl := time.Duration(c.ttl) * time.Second
	interval := ttl / 3
	attempt := min(interval, max(ttl/10, 500*time.Millisecond))
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		kctx, cancel := context.WithTimeout(ctx, attempt)
		_, err := c.k.renew(kctx)
		cancel()
		next := interval
		switch {
		case leaseGone(err):
			expired <- fmt.Errorf("etcd: lease %x expired: %w", c.id, errCandidacyLost)
			return
		case err != nil && ctx.Err() == nil:
			c.l.log.Debug("renewing candidate lease failed; retrying", "lease", fmt.Sprintf("%x", c.id), "error", err)
			next = candidateRetry
		}
		t.Reset(next)
	}
}

// waitTurn returns once no key under the election prefix has a lower
// CreateRevision than ours, and the lease of the predecessor last watched
// is gone (awaitLeaseEnd). It watches only the immediate predecessor, so a
// release wakes one waiter, not all of them.
func (c *candidate) waitTurn(ctx context.Context, expired <-chan error) error {
	opts := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(c.rev-1))
	var check *leaseCheck // the lease of the predecessor whose key went
	defer func() { check.stop() }()
	gone := map[clientv3.LeaseID]bool{c.id: true} // leases found gone, and ours
	for {
		// Who is ahead, and the last winner's record, in one read.
		gctx, cancel := context.WithTimeout(ctx, c.l.timeout)
		txn, err := c.cli.Txn(gctx).Then(clientv3.OpGet(c.l.dir, opts...), clientv3.OpGet(c.l.lastKey())).Commit()
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return classify("etcd: find predecessor", err)
		}
		resp, last := (*clientv3.GetResponse)(txn.Responses[0].GetResponseRange()), txn.Responses[1].GetResponseRange().Kvs
		resp.Header = txn.Header
		if len(resp.Kvs) == 0 {
			// Nobody ahead: we lead once the lease of the predecessor
			// whose key went, and the last winner's (lastKey), are gone.
			for {
				if check == nil {
					if check = c.checkLast(ctx, last, gone); check == nil {
						return nil
					}
				}
				polled, err := c.awaitLeaseEnd(ctx, check, expired)
				gone[check.id] = true
				check = nil
				if err != nil {
					return err
				}
				if polled {
					break // it took a while: look again
				}
			}
			continue
		}
		// Another key is ahead: the one that went never led, since a
		// key created before it still exists. Its lease does not matter.
		check.stop()
		check = nil
		if c.l.opts.NoWait {
			return c.held(ctx)
		}
		pred := string(resp.Kvs[0].Key)
		c.l.log.Debug("waiting for predecessor", "key", c.key, "predecessor", pred)
		if err := c.waitDelete(ctx, pred, resp.Header.Revision+1, expired); err != nil {
			return err
		}
		check = c.checkLease(ctx, pred, c.predLease(pred, resp.Kvs[0].Lease))
		if c.l.onWake != nil {
			c.l.onWake()
		}
	}
}

// leaseEndPace is how often a candidate whose predecessor's key vanished
// while its lease lives asks whether that lease has ended.
const leaseEndPace = 200 * time.Millisecond

// predLease is the lease a predecessor's job depends on: the one named in
// its key (every candidate names its key after its own lease), or, for a
// key not named so, the lease it is attached to.
func (c *candidate) predLease(key string, attached int64) clientv3.LeaseID {
	if id, err := strconv.ParseInt(strings.TrimPrefix(key, c.l.dir), 16, 64); err == nil && id != 0 && strings.HasPrefix(key, c.l.dir) {
		return clientv3.LeaseID(id)
	}
	return clientv3.LeaseID(attached)
}

// checkLast starts the first TimeToLive of the lease of the key's last
// winner, named by its record (lastKey), unless there is no record, or its
// lease is ours or in gone: nil then. A candidate that started after the
// holder's election key was deleted by hand never saw that key, and learns
// of the holder only from this record (DESIGN §1.7, "Hand edits").
func (c *candidate) checkLast(ctx context.Context, last []*mvccpb.KeyValue, gone map[clientv3.LeaseID]bool) *leaseCheck {
	if len(last) == 0 {
		return nil // no winner yet, or one of an older leaderrun
	}
	key := string(last[0].Value)
	id := c.predLease(key, 0)
	if id == 0 || gone[id] {
		return nil
	}
	lc := c.checkLease(ctx, key, id)
	lc.last = true
	return lc
}

// leaseCheck is the first TimeToLive of a predecessor's lease, asked as
// soon as its key went, alongside the read of who is ahead now: a clean
// handover costs no extra round trip after the wake.
type leaseCheck struct {
	pred   string
	id     clientv3.LeaseID
	last   bool // pred is the last winner's key, read from lastKey
	cancel context.CancelFunc
	done   chan leaseAnswer
}

type leaseAnswer struct {
	resp *clientv3.LeaseTimeToLiveResponse
	err  error
}

// checkLease starts the first TimeToLive of id, the lease of pred.
func (c *candidate) checkLease(ctx context.Context, pred string, id clientv3.LeaseID) *leaseCheck {
	tctx, cancel := context.WithTimeout(ctx, c.l.timeout)
	lc := &leaseCheck{pred: pred, id: id, cancel: cancel, done: make(chan leaseAnswer, 1)}
	if id == 0 {
		lc.done <- leaseAnswer{resp: &clientv3.LeaseTimeToLiveResponse{TTL: -1}}
		return lc
	}
	go func() {
		resp, err := c.cli.TimeToLive(tctx, id)
		lc.done <- leaseAnswer{resp, err}
	}()
	return lc
}

// stop abandons the check and waits for its call to end; nil is fine.
func (lc *leaseCheck) stop() {
	if lc == nil {
		return
	}
	lc.cancel()
	lc.done <- <-lc.done // keep the answer for a second stop
}

// awaitLeaseEnd returns once the lease of the predecessor whose key went
// is gone, so that the predecessor cannot be running a job any more
// (DESIGN §1.7, "Hand edits"): revoked by its own release after its job
// was gone, by a withdrawing candidate, or expired, which is after the
// holder's kill point. A key that went while its lease lives was deleted by hand (or
// written over without the lease): its holder may still be running its
// job and stops it only now, so the candidate waits, asking every
// leaseEndPace, until the holder's release revokes the lease or the lease
// expires. leaderrun's own release revokes the lease first
// (lease.Release), so a clean handover finds it gone at once. polled says
// it had to ask again.
func (c *candidate) awaitLeaseEnd(ctx context.Context, lc *leaseCheck, expired <-chan error) (polled bool, err error) {
	defer lc.cancel()
	a := <-lc.done
	for first := true; ; first = false {
		if !first {
			tctx, cancel := context.WithTimeout(ctx, c.l.timeout)
			a.resp, a.err = c.cli.TimeToLive(tctx, lc.id)
			cancel()
		}
		switch {
		case a.err != nil && leaseGone(a.err):
			return !first, nil
		case a.err != nil && ctx.Err() != nil:
			return !first, ctx.Err()
		case a.err != nil && refusal(a.err):
			return !first, classify(fmt.Sprintf("etcd: read predecessor's lease %x", lc.id), a.err)
		case a.err != nil:
			c.l.log.Debug("reading predecessor's lease failed; retrying", "lease", fmt.Sprintf("%x", lc.id), "error", a.err)
		case a.resp.TTL < 0:
			return !first, nil // etcd answers -1 for a lease it no longer has
		case first && c.l.opts.NoWait:
			// A single attempt does not wait a lease out.
			return false, fmt.Errorf("etcd: key %q: %w: the lease %x of its last leader lives though its election key is gone (deleted by hand?): its job may still run; a waiting candidate takes the key once that lease ends (BACKENDS.md, \"Hand edits\")",
				c.l.opts.Name(), locker.ErrHeld, lc.id)
		case first && lc.last:
			c.l.log.Warn("the key's last leader's lease lives, though no election key is ahead of ours (deleted by hand?); waiting until its lease is revoked or expires, so that its job is gone",
				"key", lc.pred, "lease", fmt.Sprintf("%x", lc.id), "lease_ttl", time.Duration(a.resp.TTL)*time.Second)
		case first:
			c.l.log.Warn("the holder's election key went while its lease lives (deleted or written over by hand?); waiting until its lease is revoked or expires, so that its job is gone",
				"key", lc.pred, "lease", fmt.Sprintf("%x", lc.id), "lease_ttl", time.Duration(a.resp.TTL)*time.Second)
		}
		t := time.NewTimer(leaseEndPace)
		select {
		case <-ctx.Done():
			t.Stop()
			return true, ctx.Err()
		case err := <-expired:
			t.Stop()
			return true, err
		case <-t.C:
		}
	}
}

// waitDelete returns nil when key is deleted at or after rev, or when the
// watch ends without telling (the caller then looks again).
func (c *candidate) waitDelete(ctx context.Context, key string, rev int64, expired <-chan error) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := c.cli.Watch(wctx, key, clientv3.WithRev(rev), clientv3.WithFilterPut())
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-expired:
			return err
		case wr, ok := <-wch:
			if !ok {
				return ctx.Err()
			}
			if err := wr.Err(); err != nil {
				if refusal(err) {
					return classify("etcd: watch predecessor "+key, err)
				}
				return nil
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		}
	}
}

// verify checks, after the wait, that our key still exists with our
// CreateRevision and lease, and that the lease is alive (DESIGN §1.7): a
// waiter whose key vanished would otherwise see "no predecessor" and lead
// without a key. In the same transaction as the check of our key, it
// names our key in the last winner's record (lastKey), before we lead:
// a candidate that starts after our key is deleted by hand then still
// waits for our lease to end. It also writes our holder record again, so
// that its acquired time is now, when we take over, not when we entered
// the election and began to wait; the put keeps the key's create
// revision (our epoch) and lease, and our watch starts after it.
//
// The transaction also reads the key's control record, at the revision
// that found us leading: the read after the win that a pause written
// before it needs (DESIGN §1.16, locker.ControlAtWin).
//
// The lease's life is asked with a renewal sent beside the transaction:
// answered, it shows the lease alive and is the term's confirm (its send
// time starts the deadline, locker.Confirmed), so a handover waits for
// one round trip here instead of three in a row (transaction, TimeToLive,
// the supervisor's renewal). Which of the two etcd handles first does not
// matter: the key lives while its lease does, and the lease lives until
// at least the renewal's send time plus what it granted.
func (c *candidate) verify(ctx context.Context) (*lease, error) {
	vctx, cancel := context.WithTimeout(ctx, c.l.timeout)
	defer cancel()
	type renewal struct {
		sent time.Time
		ttl  int64
		err  error
	}
	renewed := make(chan renewal, 1)
	go func() {
		sent := time.Now()
		ttl, err := c.k.renew(vctx)
		renewed <- renewal{sent, ttl, err}
	}()
	record := string(locker.NewHolder(c.l.opts).Record())
	txn, err := c.cli.Txn(vctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", c.rev),
			clientv3.Compare(clientv3.LeaseValue(c.key), "=", c.id)).
		Then(clientv3.OpPut(c.l.lastKey(), c.key),
			clientv3.OpPut(c.key, record, clientv3.WithLease(c.id)),
			clientv3.OpGet(c.l.controlKey())).
		Else(clientv3.OpGet(c.key)).
		Commit()
	if err != nil {
		cancel()
		<-renewed
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, classify("etcd: verify election key "+c.key, err)
	}
	r := <-renewed
	if !txn.Succeeded {
		kvs := txn.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return nil, fmt.Errorf("etcd: election key %s is gone: %w", c.key, errCandidacyLost)
		}
		return nil, fmt.Errorf("etcd: election key %s was re-created (revision %d, lease %x): %w",
			c.key, kvs[0].CreateRevision, kvs[0].Lease, errCandidacyLost)
	}
	switch {
	case r.err != nil && leaseGone(r.err):
		return nil, fmt.Errorf("etcd: lease %x expired: %w", c.id, errCandidacyLost)
	case r.err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case r.err != nil:
		return nil, classify(fmt.Sprintf("etcd: verify lease %x", c.id), r.err)
	}
	c.l.log.Debug("leading", "key", c.key, "epoch", c.rev, "lease_ttl", r.ttl)
	l := newLease(c, txn.Header.Revision)
	l.confirmed = &renewalAnswer{sent: r.sent, granted: time.Duration(r.ttl) * time.Second}
	l.control = &controlRead{}
	if kvs := txn.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
		l.control = &controlRead{value: kvs[0].Value, version: strconv.FormatInt(kvs[0].ModRevision, 10), ok: true}
	}
	return l, nil
}
