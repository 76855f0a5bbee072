package consul

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
)

// Observer-clock takeover on Consul (DESIGN §1.12, package observe).
//
// A leaderrun holder declares the contract in its session's name, which no
// write to the key can change, and the session's TTL is the TTL it counts
// its deadline with. Every Lease.Renew is a session renewal followed by a
// heartbeat: a check-and-set of the lock key on the ModifyIndex of our own
// last write. Renew succeeds only when both did, and the supervisor took
// its send time before either, so the holder's deadline never counts from
// a write that failed, nor from a moment before its last successful write
// was sent.
//
// A standby that has seen the key's ModifyIndex unchanged for TTL +
// observe.Allowance(TTL) on its own clock takes over with one transaction:
// delete the key if its ModifyIndex is still the one it saw, and lock it
// afresh with its own session. A heartbeat it missed makes the delete, and
// so the whole transaction, fail. Holders whose session does not declare
// the contract (an older leaderrun, `consul lock`) are waited out until
// Consul frees the key.
//
// Every acquire creates the key anew (lock on an absent key, or delete and
// lock in one transaction), so the key's CreateIndex is the Raft index of
// the acquire: the epoch (DESIGN §1.1). Heartbeats and writes by hand
// change the ModifyIndex but never the CreateIndex.

// contractTag ends the name of a session whose holder follows the
// observer-clock contract.
const contractTag = " [" + observe.Contract + "]"

// sessionName names a candidate's session.
func (l *Locker) sessionName() string {
	return "leaderrun " + l.path + contractTag
}

// declaresContract reports whether a session with this name belongs to a
// holder that follows the observer-clock contract.
func declaresContract(name string) bool {
	return strings.HasSuffix(name, contractTag)
}

// record is the value of the lock key: the holder record every backend
// stores, plus the contract and a heartbeat count. The count makes every
// heartbeat change the value: Consul does not move the ModifyIndex for a
// write that changes nothing.
type record struct {
	locker.Holder
	Observe string `json:"observe,omitempty"`
	TTL     string `json:"ttl,omitempty"`
	Beat    uint64 `json:"beat,omitempty"`
}

// encode renders the record as the key's value.
func (r record) encode() []byte { return locker.Encode(r, "holder record") }

// newRecord is this candidate's record as written by its acquire.
func (l *Locker) newRecord() record {
	return record{Holder: locker.NewHolder(l.opts), Observe: observe.Contract, TTL: l.ttlString()}
}

// holderTTL reads the session holding the key and returns its TTL if its
// holder follows the observer-clock contract (ok false otherwise, or when
// the session is already gone).
func (l *Locker) holderTTL(ctx context.Context, session string) (ttl time.Duration, ok bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var se *api.SessionEntry
	err = l.do(cctx, func(c *api.Client) (err error) {
		se, _, err = c.Session().Info(session, l.queryOpts(cctx, false))
		return err
	})
	if err != nil {
		return 0, false, l.fail("read holder session "+session, err)
	}
	if se == nil || !declaresContract(se.Name) {
		return 0, false, nil
	}
	ttl, perr := time.ParseDuration(se.TTL)
	if perr != nil || ttl <= 0 {
		return 0, false, nil
	}
	return ttl, true, nil
}

// txn runs one transaction on the key. ok false means Consul rolled it
// back; why is in the returned errors. A denial is a refusal.
func (l *Locker) txn(ctx context.Context, ops api.TxnOps) (ok bool, resp *api.TxnResponse, err error) {
	err = l.do(ctx, func(c *api.Client) (err error) {
		ok, resp, _, err = c.Txn().Txn(ops, l.queryOpts(ctx, false))
		return err
	})
	if err != nil {
		if deniedBody(err.Error()) {
			return false, nil, fmt.Errorf("%w: %v", locker.ErrRefused, err)
		}
		return false, nil, err
	}
	if !ok {
		for _, e := range resp.Errors {
			if deniedBody(e.What) {
				return false, resp, fmt.Errorf("%w: %s", locker.ErrRefused, e.What)
			}
		}
	}
	return ok, resp, nil
}

// txnErrors joins the reasons Consul gave for rolling a transaction back.
func txnErrors(resp *api.TxnResponse) string {
	if resp == nil {
		return ""
	}
	var s []string
	for _, e := range resp.Errors {
		s = append(s, e.What)
	}
	return strings.Join(s, "; ")
}

// heartbeat writes our record on the key with a check-and-set on the
// ModifyIndex of our last write, and learns the new one. A rolled-back
// write is read back: a key no longer held by our session is lost; a key
// still ours that someone wrote by hand (or our own write whose answer got
// lost) is adopted, and this attempt fails so the next one writes again.
func (ls *lease) heartbeat(ctx context.Context) error {
	ls.beat++
	rec := ls.rec
	rec.Beat, rec.Epoch = ls.beat, ls.epoch
	ok, resp, err := ls.l.txn(ctx, api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: ls.l.path, Value: rec.encode(), Index: ls.index}},
	})
	if err != nil {
		return ls.l.fail("heartbeat on "+ls.l.path, err)
	}
	if ok {
		if len(resp.Results) == 1 && resp.Results[0].KV != nil && resp.Results[0].KV.ModifyIndex > ls.index {
			ls.index = resp.Results[0].KV.ModifyIndex
			return nil
		}
		return fmt.Errorf("heartbeat on %s: Consul's answer has no new index", ls.l.path)
	}
	var pair *api.KVPair
	err = ls.l.do(ctx, func(c *api.Client) (err error) {
		pair, _, err = c.KV().Get(ls.l.path, ls.l.queryOpts(ctx, true))
		return err
	})
	if err != nil {
		return fmt.Errorf("heartbeat on %s rolled back (%s); reading it back: %w", ls.l.path, txnErrors(resp), ls.l.fail("read", err))
	}
	if reason, gone := ls.lostIn(pair); gone {
		ls.markLost(reason)
		return fmt.Errorf("heartbeat on %s: %w: %s", ls.l.path, locker.ErrLost, reason)
	}
	ls.index = pair.ModifyIndex
	return fmt.Errorf("heartbeat on %s rolled back (%s): the key was written by someone else; retrying", ls.l.path, txnErrors(resp))
}
