package consul

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
)

// Run records are KV entries <prefix>/<key>/~run/<slot> ('~' never occurs in
// a key, so no other key's entries collide with them). Consul KV has no
// expiry of its own: lookups ignore a record past its Expires, and every
// RecordRun deletes the key's expired records, so at most a few periods'
// worth are ever kept.

var _ locker.RunLog = (*Locker)(nil)

// runPrefix is where the key's run records live.
func (l *Locker) runPrefix() string { return l.path + "/~run/" }

// RecordRun writes the record in one transaction that first checks our
// session still holds the lock key, so a lease that lost the key writes
// nothing; then it prunes expired records.
func (l *Locker) RecordRun(ctx context.Context, ls locker.Lease, run locker.Run) error {
	if err := locker.ValidateSlot(run.Slot); err != nil {
		return fmt.Errorf("record run: slot %w", err)
	}
	s, ok := ls.(*lease)
	if !ok || s.l.path != l.path {
		return fmt.Errorf("record run: not a lease of %s", l.path)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: l.path, Session: s.session}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: l.runPrefix() + run.Slot, Value: run.Record()}},
	}
	var (
		okTxn bool
		resp  *api.TxnResponse
	)
	err := l.do(ctx, func(c *api.Client) (err error) {
		okTxn, resp, _, err = c.Txn().Txn(ops, l.queryOpts(ctx, false))
		return err
	})
	if err != nil {
		return l.fail("record run of slot "+run.Slot, err)
	}
	if !okTxn {
		msg := "the lock is no longer held by session " + s.session
		if resp != nil && len(resp.Errors) > 0 {
			msg += ": " + resp.Errors[0].What
		}
		return fmt.Errorf("record run of slot %s: %s: %w", run.Slot, msg, locker.ErrLost)
	}
	l.prune(ctx, time.Now())
	return nil
}

// prune deletes expired records; a failure leaves them to the next write.
func (l *Locker) prune(ctx context.Context, now time.Time) {
	var pairs api.KVPairs
	err := l.do(ctx, func(c *api.Client) (err error) {
		pairs, _, err = c.KV().List(l.runPrefix(), l.queryOpts(ctx, false))
		return err
	})
	if err != nil {
		return
	}
	for _, p := range pairs {
		if r, err := locker.ParseRun(p.Value); err == nil && !r.Live(now) {
			_ = l.do(ctx, func(c *api.Client) error {
				_, err := c.KV().Delete(p.Key, l.writeOpts(ctx))
				return err
			})
		}
	}
}

// LookupRun reads the slot's record with a consistent read.
func (l *Locker) LookupRun(ctx context.Context, slot string) (locker.Run, error) {
	if err := locker.ValidateSlot(slot); err != nil {
		return locker.Run{}, fmt.Errorf("look up run: slot %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var pair *api.KVPair
	err := l.do(ctx, func(c *api.Client) (err error) {
		pair, _, err = c.KV().Get(l.runPrefix()+slot, l.queryOpts(ctx, true))
		return err
	})
	if err != nil {
		return locker.Run{}, l.fail("read run record of slot "+slot, err)
	}
	if pair != nil {
		if r, err := locker.ParseRun(pair.Value); err == nil && r.Live(time.Now()) {
			return r, nil
		}
	}
	return locker.Run{}, fmt.Errorf("slot %s: %w", slot, locker.ErrNoRun)
}

// LatestRun returns the newest live record of the key.
func (l *Locker) LatestRun(ctx context.Context) (locker.Run, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var pairs api.KVPairs
	err := l.do(ctx, func(c *api.Client) (err error) {
		pairs, _, err = c.KV().List(l.runPrefix(), l.queryOpts(ctx, true))
		return err
	})
	if err != nil {
		return locker.Run{}, l.fail("read run records of "+l.path, err)
	}
	var runs []locker.Run
	for _, p := range pairs {
		if r, err := locker.ParseRun(p.Value); err == nil {
			runs = append(runs, r)
		}
	}
	return locker.LatestOf(runs, time.Now())
}
