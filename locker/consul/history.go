package consul

import (
	"context"
	"fmt"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
)

// Term records are KV entries <prefix>/<key>/~history/<epoch>, beside the
// run records under ~run/ ('~' never occurs in a key, so no other key's
// entries collide with them). They belong to no session, so they outlive
// every term; every write deletes the oldest beyond keep.

var _ locker.History = (*Locker)(nil)

// historyPrefix is where the key's term records live.
func (l *Locker) historyPrefix() string { return l.path + "/~history/" }

// RecordTerm sets the record of term.Epoch and deletes the records beyond
// the newest keep. It needs no session.
func (l *Locker) RecordTerm(ctx context.Context, term locker.Term, keep int) error {
	if term.Epoch == 0 {
		return fmt.Errorf("record term: no epoch")
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pair := &api.KVPair{Key: l.historyPrefix() + locker.TermName(term.Epoch), Value: term.Record()}
	err := l.do(ctx, func(c *api.Client) error {
		_, err := c.KV().Put(pair, l.writeOpts(ctx))
		return err
	})
	if err != nil {
		return l.fail(fmt.Sprintf("record term %d", term.Epoch), err)
	}
	terms, err := l.readTerms(ctx, false)
	if err != nil {
		return err
	}
	for _, e := range locker.Pruned(terms, keep) {
		err := l.do(ctx, func(c *api.Client) error {
			_, err := c.KV().Delete(l.historyPrefix()+locker.TermName(e), l.writeOpts(ctx))
			return err
		})
		if err != nil {
			return l.fail(fmt.Sprintf("prune term %d", e), err)
		}
	}
	return nil
}

// Terms reads the key's term records with a consistent read, newest first.
func (l *Locker) Terms(ctx context.Context, limit int) ([]locker.Term, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	terms, err := l.readTerms(ctx, true)
	if err != nil {
		return nil, err
	}
	return locker.NewestTerms(terms, limit), nil
}

func (l *Locker) readTerms(ctx context.Context, consistent bool) ([]locker.Term, error) {
	var pairs api.KVPairs
	err := l.do(ctx, func(c *api.Client) (err error) {
		pairs, _, err = c.KV().List(l.historyPrefix(), l.queryOpts(ctx, consistent))
		return err
	})
	if err != nil {
		return nil, l.fail("read the history", err)
	}
	terms := []locker.Term{}
	for _, p := range pairs {
		if t, err := locker.ParseTerm(p.Value); err == nil && p.Key == l.historyPrefix()+locker.TermName(t.Epoch) {
			terms = append(terms, t)
		}
	}
	return terms, nil
}
