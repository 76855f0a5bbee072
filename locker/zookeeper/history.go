package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/locker"
)

// A key's history is kept as persistent znodes
// /<chroot>/<prefix>/<key>/~term/<TermName(epoch)>, next to the run
// records' ~run: '~' never occurs in a key and candidates' znodes start
// with '@', so no election znode or key path can collide with them. Names
// are zero-padded epochs, so the children sort as the terms do. A record
// is a setData (a refused setData and a create for a term's first
// record), a getChildren, and one delete per pruned term, through the
// Locker's own session: it needs no lease.

var _ locker.History = (*Locker)(nil)

// termDir is where the key's term records live.
func (l *Locker) termDir() string { return l.dir + "/~term" }

// RecordTerm creates or replaces the record of term.Epoch, then deletes
// the records beyond the newest keep.
func (l *Locker) RecordTerm(ctx context.Context, term locker.Term, keep int) error {
	if term.Epoch == 0 {
		return fmt.Errorf("zookeeper: record term: epoch 0")
	}
	s, err := l.reader.get(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	what := fmt.Sprintf("zookeeper: record term %d of %q", term.Epoch, l.opts.Key)
	path := l.termDir() + "/" + locker.TermName(term.Epoch)
	data := term.Record()
	for attempt := 0; ; attempt++ {
		_, err := call(ctx, func() (*zk.Stat, error) { return s.conn.Set(path, data, -1) })
		if err == nil {
			break
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return classify(what, err)
		}
		create := func() (string, error) { return s.conn.Create(path, data, 0, l.acl) }
		_, err = call(ctx, create)
		if errors.Is(err, zk.ErrNoNode) { // the key's first record: no ~term yet
			if err := l.ensurePath(ctx, s, l.termDir()); err != nil {
				return err
			}
			_, err = call(ctx, create)
		}
		if err == nil {
			break
		}
		// Created by another writer of the same epoch (its guard) between
		// the two calls: replace it once more.
		if attempt == 0 && errors.Is(err, zk.ErrNodeExists) {
			continue
		}
		return classify(what, err)
	}
	names, err := l.termNames(ctx, s)
	if err != nil {
		return err
	}
	var terms []locker.Term
	for _, n := range names {
		terms = append(terms, locker.Term{Epoch: n})
	}
	for _, epoch := range locker.Pruned(terms, keep) {
		_, err := call(ctx, func() (struct{}, error) {
			return struct{}{}, s.conn.Delete(l.termDir()+"/"+locker.TermName(epoch), -1)
		})
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return classify(fmt.Sprintf("zookeeper: prune term %d of %q", epoch, l.opts.Key), err)
		}
	}
	return nil
}

// Terms reads the newest limit records after a sync, so that the server
// we ask has caught up with the ensemble's leader.
func (l *Locker) Terms(ctx context.Context, limit int) ([]locker.Term, error) {
	s, err := l.reader.get(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if _, err := call(ctx, func() (string, error) { return s.conn.Sync(l.dir) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, classify(fmt.Sprintf("zookeeper: sync before reading the history of %q", l.opts.Key), err)
	}
	epochs, err := l.termNames(ctx, s)
	if err != nil {
		return nil, err
	}
	slices.Reverse(epochs)
	terms := []locker.Term{}
	for _, epoch := range epochs {
		if limit > 0 && len(terms) == limit {
			break
		}
		data, err := call(ctx, func() ([]byte, error) {
			data, _, err := s.conn.Get(l.termDir() + "/" + locker.TermName(epoch))
			return data, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // pruned meanwhile
		}
		if err != nil {
			return nil, classify(fmt.Sprintf("zookeeper: read term %d of %q", epoch, l.opts.Key), err)
		}
		if t, err := locker.ParseTerm(data); err == nil && t.Epoch == epoch {
			terms = append(terms, t)
		}
	}
	return terms, nil
}

// termNames lists the epochs of the key's term records, oldest first;
// children that are not TermNames are left alone.
func (l *Locker) termNames(ctx context.Context, s *zkSession) ([]uint64, error) {
	names, err := call(ctx, func() ([]string, error) {
		names, _, err := s.conn.Children(l.termDir())
		return names, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, classify(fmt.Sprintf("zookeeper: list the history of %q", l.opts.Key), err)
	}
	var epochs []uint64
	for _, n := range names {
		if e, err := strconv.ParseUint(n, 10, 64); err == nil && e > 0 && n == locker.TermName(e) {
			epochs = append(epochs, e)
		}
	}
	slices.Sort(epochs)
	return epochs, nil
}
