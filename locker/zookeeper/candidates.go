package zookeeper

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/locker"
)

// Candidates lists the candidates waiting for the key (locker.Candidates):
// the candidate znodes after the first, in the order of their sequence
// number, which is the order they win in (waitTurn). The first is the
// leader's, or for a moment that of the one about to lead. Each znode
// holds its candidate's holder record, written when it entered the
// election; a znode gone between the list and its read is left out.
func (l *Locker) Candidates(ctx context.Context) ([]locker.Candidate, error) {
	s, err := l.reader.get(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	what := fmt.Sprintf("zookeeper: list the candidates of %q", l.opts.Name())
	if _, err := call(ctx, func() (string, error) { return s.conn.Sync(l.dir) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, classify(what, err)
	}
	kids, err := call(ctx, func() ([]string, error) {
		names, _, err := s.conn.Children(l.dir)
		return names, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return []locker.Candidate{}, nil
	}
	if err != nil {
		return nil, classify(what, err)
	}
	out := []locker.Candidate{}
	names := candidates(kids)
	for i := 1; i < len(names); i++ {
		data, err := call(ctx, func() ([]byte, error) {
			data, _, err := s.conn.Get(l.dir + "/" + names[i])
			return data, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // it left, or the leader left and it leads now
		}
		if err != nil {
			return nil, classify(what, err)
		}
		out = append(out, locker.CandidateOf(data, len(out)))
	}
	return out, nil
}
