package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/locker"
)

// withdrawTimeout bounds the lease revocation after a failed or cancelled
// campaign; it runs on a fresh context because the caller's may be over.
// Short enough that a cancelled wait ends within 1s even when etcd cannot
// be reached (DESIGN §3): the lease then expires on its own.
const withdrawTimeout = 700 * time.Millisecond

// candidate is one campaign: a lease and the election key attached to it.
type candidate struct {
	l   *Locker
	cli *clientv3.Client
	id  clientv3.LeaseID
	k   *keeper // renews id: the candidate's own keep-alive, then Renew's
	ttl int64   // granted by the server, in seconds
	key string
	rev int64 // CreateRevision of key: the epoch if we win (DESIGN §1.1)
}

// Acquire campaigns for the key and returns once this candidate leads; see
// locker.Locker. While it waits, it keeps its own lease alive; once it
// returns, only Lease.Renew renews.
func (l *Locker) Acquire(ctx context.Context) (locker.Lease, error) {
	cli, err := l.client(ctx)
	if err != nil {
		return nil, err
	}
	c, err := l.enter(ctx, cli)
	if err != nil {
		return nil, err
	}
	lease, err := c.await(ctx)
	if err != nil {
		c.withdraw(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return lease, nil
}

// enter grants a lease and creates our election key under it, in one
// linearizable write that only creates the key if it is absent (DESIGN §1.1)
// and also marks the key as used (usedKey).
func (l *Locker) enter(ctx context.Context, cli *clientv3.Client) (*candidate, error) {
	gctx, cancel := context.WithTimeout(ctx, l.timeout)
	grant, err := cli.Grant(gctx, l.ttl)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, classify("etcd: grant lease", err)
	}
	if grant.TTL > l.ttl {
		// DESIGN §1.6: harmless, the supervisor uses min(requested, granted).
		l.ttlWarning.Do(func() {
			l.log.Warn("etcd keeps the lease longer than asked (its minimum TTL)",
				"requested", time.Duration(l.ttl)*time.Second, "granted", time.Duration(grant.TTL)*time.Second)
		})
	}
	c := &candidate{l: l, cli: cli, id: grant.ID, k: newKeeper(cli, grant.ID), ttl: grant.TTL,
		key: fmt.Sprintf("%s%x", l.dir, grant.ID)}

	record := string(locker.NewHolder(l.opts).Record())
	tctx, cancel := context.WithTimeout(ctx, l.timeout)
	resp, err := cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0)).
		Then(clientv3.OpPut(c.key, record, clientv3.WithLease(c.id)),
			clientv3.OpPut(l.usedKey(), "")).
		Commit()
	cancel()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("election key %s already exists", c.key)
	}
	if err != nil {
		c.withdraw(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, classify("etcd: create election key "+c.key, err)
	}
	// A write transaction has one revision; a key it creates has it as
	// CreateRevision. verify reads it back before we lead.
	c.rev = resp.Header.Revision
	l.log.Debug("campaigning", "key", c.key, "lease", fmt.Sprintf("%x", c.id), "revision", c.rev)
	return c, nil
}

// held builds the NoWait error, naming the current holder when it can.
func (c *candidate) held(ctx context.Context) error {
	err := fmt.Errorf("etcd: key %q: %w", c.l.opts.Name(), locker.ErrHeld)
	gctx, cancel := context.WithTimeout(ctx, c.l.timeout)
	defer cancel()
	resp, gerr := c.cli.Get(gctx, c.l.dir, clientv3.WithFirstCreate()...)
	if gerr != nil || len(resp.Kvs) == 0 {
		return err
	}
	h := locker.ParseHolder(resp.Kvs[0].Value)
	return fmt.Errorf("etcd: key %q led by %s (epoch %d): %w", c.l.opts.Name(), h.ID, resp.Kvs[0].CreateRevision, locker.ErrHeld)
}

// withdraw revokes our lease, which also deletes our election key. It runs
// on a fresh short timeout because ctx may be what ended the campaign.
func (c *candidate) withdraw(ctx context.Context) {
	c.k.close()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(withdrawTimeout, c.l.timeout))
	defer cancel()
	if _, err := c.cli.Revoke(rctx, c.id); err != nil && !leaseGone(err) {
		c.l.log.Debug("revoking candidate lease failed; it will expire", "lease", fmt.Sprintf("%x", c.id), "error", err)
	}
}
