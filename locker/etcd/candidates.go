package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/locker"
)

// Candidates lists the candidates waiting for the key (locker.Candidates):
// the election keys after the first, in the order of their CreateRevision,
// which is the order they win in (waitTurn). The first is the leader's, or
// for a moment the key of the one about to lead. Each key's value is its
// candidate's holder record, written when it entered the election.
func (l *Locker) Candidates(ctx context.Context) ([]locker.Candidate, error) {
	cli, err := l.client(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	resp, err := cli.Get(ctx, l.dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, classify(fmt.Sprintf("etcd: list the candidates of %q", l.opts.Name()), err)
	}
	out := []locker.Candidate{}
	for i, kv := range resp.Kvs {
		if i > 0 {
			out = append(out, locker.CandidateOf(kv.Value, i-1))
		}
	}
	return out, nil
}
