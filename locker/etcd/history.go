package etcd

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/locker"
)

// Term records are plain keys /<prefix>/<key>/~history/<epoch> (no lease:
// they outlive every term), beside the run records under ~run/; '~' never
// occurs in a key and the election keys start with /<prefix>/<key>/@, so
// nothing collides with them. Every write prunes the oldest beyond keep.

var _ locker.History = (*Locker)(nil)

// historyPrefix is where the key's term records live.
func (l *Locker) historyPrefix() string { return strings.TrimSuffix(l.dir, "@") + "~history/" }

// RecordTerm puts the record of term.Epoch and deletes the records beyond
// the newest keep. It needs no lease.
func (l *Locker) RecordTerm(ctx context.Context, term locker.Term, keep int) error {
	if term.Epoch == 0 {
		return fmt.Errorf("etcd: record term: no epoch")
	}
	cli, err := l.client(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if _, err := cli.Put(ctx, l.historyPrefix()+locker.TermName(term.Epoch), string(term.Record())); err != nil {
		return classify(fmt.Sprintf("etcd: record term %d", term.Epoch), err)
	}
	terms, err := l.readTerms(ctx, cli)
	if err != nil {
		return err
	}
	for _, e := range locker.Pruned(terms, keep) {
		if _, err := cli.Delete(ctx, l.historyPrefix()+locker.TermName(e)); err != nil {
			return classify(fmt.Sprintf("etcd: prune term %d", e), err)
		}
	}
	return nil
}

// Terms reads the key's term records linearizably, newest first.
func (l *Locker) Terms(ctx context.Context, limit int) ([]locker.Term, error) {
	cli, err := l.client(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	terms, err := l.readTerms(ctx, cli)
	if err != nil {
		return nil, err
	}
	return locker.NewestTerms(terms, limit), nil
}

func (l *Locker) readTerms(ctx context.Context, cli *clientv3.Client) ([]locker.Term, error) {
	resp, err := cli.Get(ctx, l.historyPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, classify(fmt.Sprintf("etcd: read the history of %q", l.opts.Key), err)
	}
	terms := []locker.Term{}
	for _, kv := range resp.Kvs {
		if t, err := locker.ParseTerm(kv.Value); err == nil && string(kv.Key) == l.historyPrefix()+locker.TermName(t.Epoch) {
			terms = append(terms, t)
		}
	}
	return terms, nil
}
