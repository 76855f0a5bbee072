package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/locker"
)

// Leader reads who leads the key: the election key with the lowest
// CreateRevision, read linearizably. Its CreateRevision is the epoch and its
// lease's TimeToLive the time etcd keeps it without a renewal. It returns an
// error wrapping locker.ErrNoLeader when there is no candidate at all, or
// when the first candidate's lease has run out (TimeToLive <= 0).
func (l *Locker) Leader(ctx context.Context) (locker.Holder, error) {
	cli, err := l.client(ctx)
	if err != nil {
		return locker.Holder{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	resp, err := cli.Get(ctx, l.dir, clientv3.WithFirstCreate()...)
	if err != nil {
		return locker.Holder{}, classify(fmt.Sprintf("etcd: read leader of %q", l.opts.Name()), err)
	}
	if len(resp.Kvs) == 0 {
		// No candidate: was there ever one? Every candidate leaves the
		// mark (campaign.go), and once-per records live beside it.
		// A user who may read the election keys but not the rest of the
		// key's prefix still gets "no leader": only the mark is unknown.
		// The control record alone is no sign of use (records.go): two
		// keys at most tell whether anything else is there.
		used, err := cli.Get(ctx, l.tracePrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(2))
		if err != nil {
			if err := classify(fmt.Sprintf("etcd: read the records of %q", l.opts.Name()), err); !errors.Is(err, locker.ErrRefused) {
				return locker.Holder{}, err
			}
		} else if used.Count == 0 || used.Count == 1 && string(used.Kvs[0].Key) == l.controlKey() {
			return locker.Holder{}, l.neverUsed()
		}
		return locker.Holder{}, fmt.Errorf("etcd: key %q: %w", l.opts.Name(), locker.ErrNoLeader)
	}
	kv := resp.Kvs[0]
	h := locker.ParseHolder(kv.Value)
	h.Epoch = uint64(kv.CreateRevision)
	if kv.Lease != 0 {
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return locker.Holder{}, classify(fmt.Sprintf("etcd: read lease %x of %q", kv.Lease, l.opts.Name()), err)
		}
		if ttl.TTL <= 0 {
			// -1: expired, its key goes with it; 0: under a second left,
			// which a renewing holder never lets happen. Naming it would
			// let `check` pass an epoch whose job is being stopped.
			return locker.Holder{}, fmt.Errorf("etcd: key %q: the holder's lease %x is expiring: %w", l.opts.Name(), kv.Lease, locker.ErrNoLeader)
		}
		h.LeaseRemaining = time.Duration(ttl.TTL) * time.Second
	}
	return h, nil
}

// tracePrefix starts every key that outlives a candidate: the mark
// (usedKey), the once-per records and the control record. '~' never
// occurs in a key, so no other key's records start with it.
func (l *Locker) tracePrefix() string { return strings.TrimSuffix(l.dir, "@") + "~" }

// usedKey is the mark every candidate writes, with no lease, in the
// transaction that enters the election: it stays after the candidate's
// key is gone, so that Leader can tell a key whose holder let go from one
// that was never used here.
func (l *Locker) usedKey() string { return l.tracePrefix() + "used" }

// lastKey is the record of the key's last winner, with no lease: its
// value is the election key the winner led with, whose name carries the
// winner's lease ID. A winner writes it before it leads (candidate.verify)
// and a candidate with nobody ahead leads only once that lease is gone
// (candidate.checkLast): the record outlives a hand delete of the
// election keys, which the lease outlives too (DESIGN §1.7, "Hand edits").
// A release revokes the lease first, so a released holder is no wait.
func (l *Locker) lastKey() string { return l.tracePrefix() + "last" }

// neverUsed is Leader's answer when nothing under the key's prefix shows
// a candidate ever entered: it names the prefix and the endpoints.
func (l *Locker) neverUsed() error {
	eps := make([]string, len(l.endpoints))
	for i, e := range l.endpoints {
		eps[i] = e.raw
	}
	return &locker.NeverUsedError{Key: l.opts.Name(),
		Where:  strings.TrimSuffix(l.dir, "@") + " on etcd " + strings.Join(eps, ","),
		Fields: []string{"Endpoints", "Prefix"}}
}

// ReleaseHandle revokes the lease named by a Lease.Handle of this key,
// which deletes its election key at once. A lease already gone is not an
// error. A handle for another key or backend is refused.
func (l *Locker) ReleaseHandle(ctx context.Context, handle string) error {
	id, err := parseHandle(handle, l.dir)
	if err != nil {
		return err
	}
	cli, err := l.client(ctx)
	if err != nil {
		return err
	}
	if _, err := cli.Revoke(ctx, id); err != nil && !leaseGone(err) {
		return classify(fmt.Sprintf("etcd: revoke lease %x", id), err)
	}
	return nil
}
