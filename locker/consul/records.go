package consul

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
)

// The key's records (package records) are KV entries beside the lock key
// <prefix>/<key>, in no session, so they outlive every term; '~' never
// occurs in a key, so none is another key's lock key or record, and the
// candidates' queue (<prefix>/<key>/~queue/) is listed alone:
//
//   - the control record, <prefix>/<key>/~control, shared by the key's
//     slot keys (a Locker for <key>~2 reads and writes the record of
//     <key>). Its version is the entry's ModifyIndex; a write is a
//     check-and-set on it (0: only if there is none yet) in a
//     transaction whose answer carries the new ModifyIndex. Consul moves
//     no index for a write that changes nothing, so the entry's flags
//     hold the index the write replaced: every write changes the entry
//     and moves its version. Leader leaves it out when it asks whether
//     the key was ever used (isRecord): a pause written before any
//     candidate ran does not make a key "used here";
//   - term records, <prefix>/<key>/~history/<epoch>;
//   - run records, <prefix>/<key>/~run/<slot>, written in one transaction
//     that first checks our session still holds the lock key. Consul KV
//     has no expiry of its own: lookups ignore a record past its
//     Expires, and every RecordRun deletes the key's expired records.
//
// Every read is consistent. WaitControl follows the control record with
// consistent blocking queries on its one entry, each waiting up to
// blockWait on the server: a record that stays as it is costs one
// request every blockWait.

// store is the Locker's records.Store.
type store struct{ l *Locker }

var _ records.Waiter = store{}

// newRecords builds the Locker's records core.
func newRecords(l *Locker) *records.Core {
	return records.New(records.Config{Store: store{l}, Name: "consul", Key: l.opts.Key, Timeout: callTimeout, Log: l.log})
}

// controlPath is the KV path of the key's control record.
func (l *Locker) controlPath() string {
	return strings.TrimSuffix(l.path, l.opts.Name()) + l.opts.Key + "/~control"
}

// dirOf is the KV prefix of the records of kind (Term, Run).
func (s store) dirOf(kind records.Kind) string {
	if kind == records.Term {
		return s.l.path + "/~history/"
	}
	return s.l.path + "/~run/"
}

func (s store) path(kind records.Kind, name string) string {
	if kind == records.Control {
		return s.l.controlPath()
	}
	return s.dirOf(kind) + name
}

func pairOf(pair *api.KVPair) ([]byte, string, bool) {
	if pair == nil {
		return nil, "", false
	}
	return pair.Value, strconv.FormatUint(pair.ModifyIndex, 10), true
}

func (s store) Get(ctx context.Context, kind records.Kind, name string) ([]byte, string, bool, error) {
	p := s.path(kind, name)
	var pair *api.KVPair
	err := s.l.onEach(ctx, func(ctx context.Context) error {
		return s.l.do(ctx, func(c *api.Client) (err error) {
			pair, _, err = c.KV().Get(p, s.l.queryOpts(ctx, true))
			return err
		})
	})
	if err != nil {
		return nil, "", false, s.l.fail("read "+p, err)
	}
	value, v, ok := pairOf(pair)
	return value, v, ok, nil
}

func (s store) Swap(ctx context.Context, kind records.Kind, name, prev string, value []byte) (string, error) {
	p := s.path(kind, name)
	var index uint64
	if prev != "" {
		n, err := strconv.ParseUint(prev, 10, 64)
		if err != nil || n == 0 || strconv.FormatUint(n, 10) != prev {
			// Never a version of this record: it cannot be the current one.
			return "", fmt.Errorf("set %s: version %q: %w", p, prev, locker.ErrConflict)
		}
		index = n
	}
	ok, resp, err := s.l.txn(ctx, api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: p, Value: value, Flags: index, Index: index}},
	})
	switch {
	case err != nil:
		return "", s.l.fail("set "+p, err)
	case !ok:
		// The one operation is a check-and-set: its index was stale.
		return "", fmt.Errorf("set %s: not at version %q (%s): %w", p, prev, txnErrors(resp), locker.ErrConflict)
	case len(resp.Results) != 1 || resp.Results[0].KV == nil || resp.Results[0].KV.ModifyIndex <= index:
		return "", fmt.Errorf("set %s: Consul's answer has no new index", p)
	}
	return strconv.FormatUint(resp.Results[0].KV.ModifyIndex, 10), nil
}

func (s store) Put(ctx context.Context, kind records.Kind, name string, value []byte) error {
	pair := &api.KVPair{Key: s.path(kind, name), Value: value}
	err := s.l.do(ctx, func(c *api.Client) error {
		_, err := c.KV().Put(pair, s.l.writeOpts(ctx))
		return err
	})
	if err != nil {
		return s.l.fail("write "+pair.Key, err)
	}
	return nil
}

// PutHeld writes in one transaction that first checks our session still
// holds the lock key, so a lease that lost the key writes nothing.
func (s store) PutHeld(ctx context.Context, ls locker.Lease, kind records.Kind, name string, value []byte, _ time.Time) error {
	ours, ok := ls.(*lease)
	if !ok || ours.l.path != s.l.path {
		return fmt.Errorf("record run: not a lease of %s", s.l.path)
	}
	p := s.path(kind, name)
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: s.l.path, Session: ours.session}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: p, Value: value}},
	}
	var (
		okTxn bool
		resp  *api.TxnResponse
	)
	err := s.l.do(ctx, func(c *api.Client) (err error) {
		okTxn, resp, _, err = c.Txn().Txn(ops, s.l.queryOpts(ctx, false))
		return err
	})
	if err != nil {
		return s.l.fail("write "+p, err)
	}
	if !okTxn {
		msg := "the lock is no longer held by session " + ours.session
		if resp != nil && len(resp.Errors) > 0 {
			msg += ": " + resp.Errors[0].What
		}
		return fmt.Errorf("write %s: %s: %w", p, msg, locker.ErrLost)
	}
	return nil
}

func (s store) List(ctx context.Context, kind records.Kind, _ bool) ([]records.Entry, error) {
	dir := s.dirOf(kind)
	var pairs api.KVPairs
	err := s.l.do(ctx, func(c *api.Client) (err error) {
		pairs, _, err = c.KV().List(dir, s.l.queryOpts(ctx, true))
		return err
	})
	if err != nil {
		return nil, s.l.fail("read "+dir, err)
	}
	out := make([]records.Entry, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, records.Entry{Name: strings.TrimPrefix(p.Key, dir), Value: p.Value})
	}
	return out, nil
}

func (s store) Delete(ctx context.Context, kind records.Kind, name string) error {
	p := s.path(kind, name)
	err := s.l.do(ctx, func(c *api.Client) error {
		_, err := c.KV().Delete(p, s.l.writeOpts(ctx))
		return err
	})
	if err != nil {
		return s.l.fail("delete "+p, err)
	}
	return nil
}

// WaitControl makes one blocking query on the entry's index as of
// version, so a record already past it returns at once; with no record
// (or a version not of ours) it reads first and blocks on the index that
// read saw. A failed query is asked again by the core from the version
// last seen: Consul answers at once if the entry moved in between, so no
// write is missed.
func (s store) WaitControl(ctx context.Context, version string) ([]byte, string, bool, error) {
	index, err := strconv.ParseUint(version, 10, 64)
	if err != nil || strconv.FormatUint(index, 10) != version {
		index = 0 // no record, or not a version of ours: read it first
	}
	if index == 0 {
		pair, meta, err := s.readControlAt(ctx, 0)
		if err != nil {
			return nil, "", false, err
		}
		if value, v, ok := pairOf(pair); v != version {
			return value, v, ok, nil
		}
		index = nextIndex(0, meta.LastIndex)
	}
	pair, _, err := s.readControlAt(ctx, index)
	if err != nil {
		return nil, "", false, err
	}
	value, v, ok := pairOf(pair)
	return value, v, ok, nil
}

// readControlAt reads the record with a consistent read; with index > 0
// it is a blocking query that returns once the entry's index passes index
// or after blockWait.
func (s store) readControlAt(ctx context.Context, index uint64) (*api.KVPair, *api.QueryMeta, error) {
	l := s.l
	timeout := callTimeout
	q := &api.QueryOptions{Token: l.token, RequireConsistent: true}
	if index > 0 {
		q.WaitIndex, q.WaitTime = index, blockWait
		timeout = blockTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	at, c := l.ep.pick()
	if index > 0 {
		defer l.ep.abortOnMove(at, cancel)()
	}
	pair, meta, err := c.KV().Get(l.controlPath(), q.WithContext(cctx))
	if err != nil {
		l.ep.failed(cctx, at, err)
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, l.fail("read "+l.controlPath(), err)
	}
	return pair, meta, nil
}
