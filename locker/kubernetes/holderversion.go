package kubernetes

import (
	"context"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// HolderVersion reads the Lease's holder as Leader does, with the Lease's
// resourceVersion (read just before) and the TTL its holder declared
// (locker.HolderVersions). A write between the two reads shows as a new
// version at the next read.
func (l *Locker) HolderVersion(ctx context.Context) (locker.Holder, string, time.Duration, error) {
	ls, err := l.get(ctx)
	if err != nil {
		return locker.Holder{}, "", 0, err
	}
	h, err := l.Leader(ctx)
	if err != nil || ls == nil {
		return h, "", 0, err
	}
	ttl, _ := declaredTTL(ls)
	return h, ls.ResourceVersion, ttl, nil
}

var _ locker.HolderVersions = (*Locker)(nil)
