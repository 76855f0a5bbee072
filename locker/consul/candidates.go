package consul

import (
	"context"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/queue"
)

// Candidates lists the candidates waiting for the key (locker.Candidates):
// the entries of its queue (queue.go), in their order, read with a
// consistent read. An entry whose session ended is left out; a candidate
// that could not join the queue (its token may not write there) or tries
// once (--no-wait) is not listed. The leader left the queue when it won.
func (l *Locker) Candidates(ctx context.Context) ([]locker.Candidate, error) {
	var out []locker.Candidate
	err := l.onEach(ctx, func(ctx context.Context) error {
		var pairs api.KVPairs
		err := l.do(ctx, func(c *api.Client) (err error) {
			pairs, _, err = c.KV().List(l.path+queueDir, l.queryOpts(ctx, true))
			return err
		})
		if err != nil {
			return l.fail("list the candidates' queue "+l.path+queueDir, err)
		}
		listed := make([]queue.Listed, 0, len(pairs))
		for _, p := range pairs {
			id, who, ok := parseEntryValue(string(p.Value))
			listed = append(listed, queue.Listed{Entry: toEntry(p), ID: id, Who: who, Described: ok})
		}
		out = queue.Listing(listed)
		return nil
	})
	return out, err
}
