package etcd

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/locker"
)

// Run records are keys /<prefix>/<key>/~run/<slot> ('~' never occurs in a
// key, and the election keys start with /<prefix>/<key>/@), each attached
// to a lease of its own that etcd expires after the record's lifetime.

var _ locker.RunLog = (*Locker)(nil)

// runPrefix is where the key's run records live.
func (l *Locker) runPrefix() string { return strings.TrimSuffix(l.dir, "@") + "~run/" }

// RecordRun writes the record in one transaction conditioned on our
// election key still existing with the revision we won it at (DESIGN §1.1),
// so a lease that lost the key writes nothing.
func (l *Locker) RecordRun(ctx context.Context, ls locker.Lease, run locker.Run) error {
	if err := locker.ValidateSlot(run.Slot); err != nil {
		return fmt.Errorf("etcd: record run: slot %w", err)
	}
	s, ok := ls.(*lease)
	if !ok || !strings.HasPrefix(s.key, l.dir) {
		return fmt.Errorf("etcd: record run: not a lease of key %q", l.opts.Key)
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	ttl := int64((time.Until(run.Expires) + time.Second - 1) / time.Second)
	g, err := s.cli.Grant(ctx, max(ttl, 1))
	if err != nil {
		return classify("etcd: grant the run record's lease", err)
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.key), "=", s.rev)).
		Then(clientv3.OpPut(l.runPrefix()+run.Slot, string(run.Record()), clientv3.WithLease(g.ID))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("etcd: record run of slot %s: election key %s is gone: %w", run.Slot, s.key, locker.ErrLost)
	}
	if err != nil {
		_, _ = s.cli.Revoke(context.WithoutCancel(ctx), g.ID)
		return classify(fmt.Sprintf("etcd: record run of slot %s", run.Slot), err)
	}
	return nil
}

// LookupRun reads the slot's record linearizably.
func (l *Locker) LookupRun(ctx context.Context, slot string) (locker.Run, error) {
	if err := locker.ValidateSlot(slot); err != nil {
		return locker.Run{}, fmt.Errorf("etcd: look up run: slot %w", err)
	}
	runs, err := l.readRuns(ctx, l.runPrefix()+slot)
	if err != nil {
		return locker.Run{}, err
	}
	for _, r := range runs {
		if r.Slot == slot && r.Live(time.Now()) {
			return r, nil
		}
	}
	return locker.Run{}, fmt.Errorf("etcd: slot %s: %w", slot, locker.ErrNoRun)
}

// LatestRun returns the newest live record of the key.
func (l *Locker) LatestRun(ctx context.Context) (locker.Run, error) {
	runs, err := l.readRuns(ctx, l.runPrefix(), clientv3.WithPrefix())
	if err != nil {
		return locker.Run{}, err
	}
	return locker.LatestOf(runs, time.Now())
}

func (l *Locker) readRuns(ctx context.Context, key string, opts ...clientv3.OpOption) ([]locker.Run, error) {
	cli, err := l.client(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	resp, err := cli.Get(ctx, key, opts...)
	if err != nil {
		return nil, classify(fmt.Sprintf("etcd: read run records of %q", l.opts.Key), err)
	}
	var runs []locker.Run
	for _, kv := range resp.Kvs {
		if r, err := locker.ParseRun(kv.Value); err == nil {
			runs = append(runs, r)
		}
	}
	return runs, nil
}
