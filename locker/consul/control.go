package consul

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
)

// The control record (locker.Controls) is one KV entry
// <prefix>/<key>/~control, in no session, shared by the key's slot keys: a
// Locker for <key>~2 reads and writes the record of <key>. Its version is
// the entry's ModifyIndex. It lies beside the once-per records and the
// candidates' queue (<prefix>/<key>/~queue/, which the queue lists alone),
// and '~' never occurs in a key, so it is no other key's lock key or
// record. Leader leaves it out when it asks whether the key was ever used
// (isRecord): a pause written before any candidate ran does not make a key
// "used here", so a mistyped key or prefix is still named as such.

var _ locker.Controls = (*Locker)(nil)

// controlPath is the KV path of the key's control record.
func (l *Locker) controlPath() string {
	return strings.TrimSuffix(l.path, l.opts.Key) + locker.ControlKey(l.opts.Key) + "/~control"
}

// Control reads the control record with a consistent read.
func (l *Locker) Control(ctx context.Context) (locker.Control, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var pair *api.KVPair
	err := l.onEach(ctx, func(ctx context.Context) error {
		return l.do(ctx, func(c *api.Client) (err error) {
			pair, _, err = c.KV().Get(l.controlPath(), l.queryOpts(ctx, true))
			return err
		})
	})
	if err != nil {
		return locker.Control{}, l.fail("read "+l.controlPath(), err)
	}
	return l.parseControl(pair)
}

// parseControl decodes the entry; nil is the empty record.
func (l *Locker) parseControl(pair *api.KVPair) (locker.Control, error) {
	if pair == nil {
		return locker.Control{}, nil
	}
	c, err := locker.ParseControl(pair.Value, strconv.FormatUint(pair.ModifyIndex, 10))
	if err != nil {
		return locker.Control{}, fmt.Errorf("%s: %w", l.controlPath(), err)
	}
	return c, nil
}

// SetControl writes the record with one check-and-set on its ModifyIndex
// (0: only if there is none yet), in a transaction whose answer carries
// the new ModifyIndex. Consul moves no index for a write that changes
// nothing, so the entry's flags hold the index the write replaced: every
// write changes the entry and moves its version, as locker.Controls asks.
func (l *Locker) SetControl(ctx context.Context, c locker.Control) (string, error) {
	var index uint64
	if c.Version != "" {
		n, err := strconv.ParseUint(c.Version, 10, 64)
		if err != nil || n == 0 || strconv.FormatUint(n, 10) != c.Version {
			// Never a version of this record: it cannot be the current one.
			return "", fmt.Errorf("set %s: version %q: %w", l.controlPath(), c.Version, locker.ErrConflict)
		}
		index = n
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ok, resp, err := l.txn(ctx, api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: l.controlPath(), Value: c.Record(), Flags: index, Index: index}},
	})
	switch {
	case err != nil:
		return "", l.fail("set "+l.controlPath(), err)
	case !ok:
		// The one operation is a check-and-set: its index was stale.
		return "", fmt.Errorf("set %s: not at version %q (%s): %w", l.controlPath(), c.Version, txnErrors(resp), locker.ErrConflict)
	case len(resp.Results) != 1 || resp.Results[0].KV == nil || resp.Results[0].KV.ModifyIndex <= index:
		return "", fmt.Errorf("set %s: Consul's answer has no new index", l.controlPath())
	}
	return strconv.FormatUint(resp.Results[0].KV.ModifyIndex, 10), nil
}

// WaitControl follows the record with consistent blocking queries on its
// one entry: one open at a time, each waiting up to blockWait on the
// server, so a record that stays as it is costs one request every
// blockWait. The first query blocks on the entry's index as of version,
// so a record already past it returns at once. A failed query (a server
// without a leader, one out of reach) is retried after a pause, from the
// index last seen: Consul answers it at once if the entry moved in
// between, so no write is missed. Only a refusal ends it with an error; a
// cluster out of reach is waited out until ctx ends.
func (l *Locker) WaitControl(ctx context.Context, version string) (locker.Control, error) {
	index, err := strconv.ParseUint(version, 10, 64)
	if err != nil || strconv.FormatUint(index, 10) != version {
		index = 0 // no record, or not a version of ours: read it first
	}
	backoff := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for {
		pair, meta, err := l.readControlAt(ctx, index)
		switch {
		case ctx.Err() != nil:
			return locker.Control{}, ctx.Err()
		case errors.Is(err, locker.ErrRefused):
			return locker.Control{}, err
		case err != nil:
			l.log.Debug("waiting on the control record failed; asking again", "key", l.controlPath(), "index", index, "error", err)
			if !retry.Sleep(ctx, backoff.Next()) {
				return locker.Control{}, ctx.Err()
			}
			continue
		}
		backoff.Reset()
		c, err := l.parseControl(pair)
		if err != nil || c.Version != version {
			return c, err
		}
		index = nextIndex(index, meta.LastIndex)
	}
}

// readControlAt reads the record with a consistent read; with index > 0
// it is a blocking query that returns once the entry's index passes index
// or after blockWait.
func (l *Locker) readControlAt(ctx context.Context, index uint64) (*api.KVPair, *api.QueryMeta, error) {
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
