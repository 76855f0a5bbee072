package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
)

// The key's records (package records) are plain etcd keys beside the
// election keys, which all start with /<prefix>/<key>/@; '~' never occurs
// in a key, so none is another key's:
//
//   - the control record, /<prefix>/<key>/~control, with no lease, shared
//     by the key's slot keys (a Locker for <key>~2 reads and writes the
//     record of <key>); its version is the key's ModRevision. Leader
//     leaves it out when it asks whether the key was ever used
//     (leader.go): a pause written before any candidate ran does not make
//     a key "used here", so a mistyped key or prefix is still named as
//     such;
//   - term records, /<prefix>/<key>/~history/<epoch>, with no lease: they
//     outlive every term;
//   - run records, /<prefix>/<key>/~run/<slot>, each attached to a lease
//     of its own that etcd expires after the record's lifetime, written
//     in one transaction conditioned on our election key still existing
//     with the revision we won it at (DESIGN §1.1).
//
// WaitControl watches the control record from the revision after a read,
// on the client's shared watch stream: nothing is sent while the record
// stays as it is.

// store is the Locker's records.Store.
type store struct{ l *Locker }

var (
	_ records.Waiter   = store{}
	_ records.Expiring = store{}
)

// newRecords builds the Locker's records core.
func newRecords(l *Locker) *records.Core {
	return records.New(records.Config{
		Store: store{l}, Name: "etcd", Key: l.opts.Key, Timeout: l.timeout, Log: l.log,
		Final: func(err error) bool { return errors.Is(err, errClosed) },
	})
}

// controlKey is the key's control record.
func (l *Locker) controlKey() string {
	return "/" + l.opts.Prefix + "/" + l.opts.Key + "/~control"
}

// dirOf is where the records of kind live (Term, Run).
func (s store) dirOf(kind records.Kind) string {
	sub := "~run/"
	if kind == records.Term {
		sub = "~history/"
	}
	return strings.TrimSuffix(s.l.dir, "@") + sub
}

func (s store) path(kind records.Kind, name string) string {
	if kind == records.Control {
		return s.l.controlKey()
	}
	return s.dirOf(kind) + name
}

func (s store) Get(ctx context.Context, kind records.Kind, name string) ([]byte, string, bool, error) {
	value, version, ok, _, err := s.get(ctx, kind, name)
	return value, version, ok, err
}

// get is Get with the revision of the read.
func (s store) get(ctx context.Context, kind records.Kind, name string) ([]byte, string, bool, int64, error) {
	cli, err := s.l.client(ctx)
	if err != nil {
		return nil, "", false, 0, err
	}
	p := s.path(kind, name)
	resp, err := cli.Get(ctx, p)
	if err != nil {
		return nil, "", false, 0, classify("etcd: read "+p, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, "", false, resp.Header.Revision, nil
	}
	kv := resp.Kvs[0]
	return kv.Value, strconv.FormatInt(kv.ModRevision, 10), true, resp.Header.Revision, nil
}

// Swap writes in one transaction conditioned on the key's ModRevision
// still being prev (on its absence for an empty prev). The version
// written is the transaction's revision.
func (s store) Swap(ctx context.Context, kind records.Kind, name, prev string, value []byte) (string, error) {
	p := s.path(kind, name)
	cmp := clientv3.Compare(clientv3.CreateRevision(p), "=", 0)
	if prev != "" {
		rev, err := strconv.ParseInt(prev, 10, 64)
		if err != nil || rev <= 0 || strconv.FormatInt(rev, 10) != prev {
			// Never a version of this record: it cannot be the current one.
			return "", fmt.Errorf("etcd: set %s: version %q: %w", p, prev, locker.ErrConflict)
		}
		cmp = clientv3.Compare(clientv3.ModRevision(p), "=", rev)
	}
	cli, err := s.l.client(ctx)
	if err != nil {
		return "", err
	}
	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(p, string(value))).Commit()
	if err != nil {
		return "", classify("etcd: set "+p, err)
	}
	if !resp.Succeeded {
		return "", fmt.Errorf("etcd: set %s: not at version %q: %w", p, prev, locker.ErrConflict)
	}
	// A write transaction has one revision: the key's new ModRevision.
	return strconv.FormatInt(resp.Header.Revision, 10), nil
}

func (s store) Put(ctx context.Context, kind records.Kind, name string, value []byte) error {
	cli, err := s.l.client(ctx)
	if err != nil {
		return err
	}
	p := s.path(kind, name)
	if _, err := cli.Put(ctx, p, string(value)); err != nil {
		return classify("etcd: write "+p, err)
	}
	return nil
}

// PutHeld grants the record a lease of its own, expiring after expires,
// and writes it in one transaction conditioned on our election key still
// existing with the revision we won it at, so a lease that lost the key
// writes nothing.
func (s store) PutHeld(ctx context.Context, ls locker.Lease, kind records.Kind, name string, value []byte, expires time.Time) error {
	ours, ok := ls.(*lease)
	if !ok || !strings.HasPrefix(ours.key, s.l.dir) {
		return fmt.Errorf("etcd: record run: not a lease of key %q", s.l.opts.Name())
	}
	p := s.path(kind, name)
	ttl := int64((time.Until(expires) + time.Second - 1) / time.Second)
	g, err := ours.cli.Grant(ctx, max(ttl, 1))
	if err != nil {
		return classify("etcd: grant the lease of "+p, err)
	}
	resp, err := ours.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ours.key), "=", ours.rev)).
		Then(clientv3.OpPut(p, string(value), clientv3.WithLease(g.ID))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("election key %s is gone: %w", ours.key, locker.ErrLost)
	}
	if err != nil {
		_, _ = ours.cli.Revoke(context.WithoutCancel(ctx), g.ID)
		return classify("etcd: write "+p, err)
	}
	return nil
}

// RunsExpire: run records are attached to leases that etcd expires.
func (store) RunsExpire() bool { return true }

func (s store) List(ctx context.Context, kind records.Kind, _ bool) ([]records.Entry, error) {
	cli, err := s.l.client(ctx)
	if err != nil {
		return nil, err
	}
	dir := s.dirOf(kind)
	resp, err := cli.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, classify("etcd: read "+dir, err)
	}
	out := make([]records.Entry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, records.Entry{Name: strings.TrimPrefix(string(kv.Key), dir), Value: kv.Value})
	}
	return out, nil
}

func (s store) Delete(ctx context.Context, kind records.Kind, name string) error {
	cli, err := s.l.client(ctx)
	if err != nil {
		return err
	}
	p := s.path(kind, name)
	if _, err := cli.Delete(ctx, p); err != nil {
		return classify("etcd: delete "+p, err)
	}
	return nil
}

// WaitControl reads the record and, while its version is still version,
// watches it from the revision after that read until a write shows
// another version. Whenever the watch ends otherwise (a member without a
// leader, a reconnect, a compaction) it returns an error, and the core
// reads and watches again, so no write between the two is missed.
func (s store) WaitControl(ctx context.Context, version string) ([]byte, string, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, s.l.timeout)
	value, v, ok, rev, err := s.get(rctx, records.Control, "")
	cancel()
	if err != nil || v != version {
		return value, v, ok, err
	}
	cli, err := s.l.client(ctx)
	if err != nil {
		return nil, "", false, err
	}
	p := s.l.controlKey()
	// WithRequireLeader: a member cut off from the leader ends the watch
	// instead of keeping it silently open, so that we read again
	// elsewhere.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range cli.Watch(wctx, p, clientv3.WithRev(rev+1)) {
		if n := len(wr.Events); n > 0 {
			ev := wr.Events[n-1]
			if ev.Type != clientv3.EventTypePut {
				return nil, "", false, nil // deleted: no record
			}
			if v := strconv.FormatInt(ev.Kv.ModRevision, 10); v != version {
				return ev.Kv.Value, v, true, nil
			}
		}
		if err := wr.Err(); err != nil {
			return nil, "", false, classify("etcd: watch "+p, err)
		}
	}
	return nil, "", false, fmt.Errorf("etcd: watch %s ended", p)
}
