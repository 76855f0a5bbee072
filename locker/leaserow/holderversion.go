package leaserow

import (
	"context"
	"fmt"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
)

// HolderVersion reads the row's holder as Leader does, with the row's
// version and the TTL its holder declared (locker.HolderVersions).
func (l *Locker) HolderVersion(ctx context.Context) (locker.Holder, string, time.Duration, error) {
	cur, exists, err := l.read(ctx)
	if err != nil {
		return locker.Holder{}, "", 0, err
	}
	if !exists {
		return locker.Holder{}, "", 0, l.neverUsed()
	}
	if cur.Term == "" {
		return locker.Holder{}, "", 0, fmt.Errorf("%s: %w for key %q", l.name, locker.ErrNoLeader, l.opts.Key)
	}
	h := cur.Holder
	h.Epoch = cur.Epoch
	var ttl time.Duration
	if cur.Contract == observe.Contract {
		ttl = cur.TTL
	}
	return h, cur.Version, ttl, nil
}

var _ locker.HolderVersions = (*Locker)(nil)
