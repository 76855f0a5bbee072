package etcd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
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
	// From here on the only renewals are the supervisor's (DESIGN §1.2).
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
// CreateRevision than ours. It watches only the immediate predecessor, so a
// release wakes one waiter, not all of them.
func (c *candidate) waitTurn(ctx context.Context, expired <-chan error) error {
	opts := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(c.rev-1))
	for {
		gctx, cancel := context.WithTimeout(ctx, c.l.timeout)
		resp, err := c.cli.Get(gctx, c.l.dir, opts...)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return classify("etcd: find predecessor", err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		if c.l.opts.NoWait {
			return c.held(ctx)
		}
		pred := string(resp.Kvs[0].Key)
		c.l.log.Debug("waiting for predecessor", "key", c.key, "predecessor", pred)
		if err := c.waitDelete(ctx, pred, resp.Header.Revision+1, expired); err != nil {
			return err
		}
		if c.l.onWake != nil {
			c.l.onWake()
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
// without a key.
func (c *candidate) verify(ctx context.Context) (*lease, error) {
	vctx, cancel := context.WithTimeout(ctx, c.l.timeout)
	defer cancel()
	resp, err := c.cli.Get(vctx, c.key)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, classify("etcd: verify election key "+c.key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("etcd: election key %s is gone: %w", c.key, errCandidacyLost)
	}
	if kv := resp.Kvs[0]; kv.CreateRevision != c.rev || clientv3.LeaseID(kv.Lease) != c.id {
		return nil, fmt.Errorf("etcd: election key %s was re-created (revision %d, lease %x): %w",
			c.key, kv.CreateRevision, kv.Lease, errCandidacyLost)
	}
	ttl, err := c.cli.TimeToLive(vctx, c.id)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, classify(fmt.Sprintf("etcd: verify lease %x", c.id), err)
	}
	if ttl.TTL == 0 {
		// TimeToLive truncates to whole seconds: 0 is "under a second
		// left" or "expired, revocation pending". A renewal tells which,
		// because etcd answers an expired lease only once it is revoked.
		if _, err := c.k.renew(vctx); err != nil && !leaseGone(err) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, classify(fmt.Sprintf("etcd: verify lease %x", c.id), err)
		} else if err == nil {
			ttl.TTL = c.ttl
		}
	}
	if ttl.TTL <= 0 {
		return nil, fmt.Errorf("etcd: lease %x expired: %w", c.id, errCandidacyLost)
	}
	c.l.log.Debug("leading", "key", c.key, "epoch", c.rev, "lease_ttl", ttl.TTL)
	return newLease(c, resp.Header.Revision), nil
}
