package kubernetes

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// Leader reads the Lease and describes its holder. The epoch is zero in the
// moment between a takeover and the new holder's first renewal.
// LeaseRemaining is estimated from the holder's renewTime and our wall
// clock: a hint for status output only.
func (l *Locker) Leader(ctx context.Context) (locker.Holder, error) {
	ls, err := l.get(ctx)
	if err != nil {
		return locker.Holder{}, err
	}
	if ls == nil {
		// A release keeps the Lease (holderIdentity cleared), so only a
		// key never campaigned for here, or a Lease deleted by hand, has
		// none.
		return locker.Holder{}, &locker.NeverUsedError{Key: l.opts.Name(),
			Where:  fmt.Sprintf("Lease %s/%s on %s", l.namespace, l.name, l.host),
			Fields: []string{"Namespace", "Context", "Prefix"}}
	}
	id := holderOf(ls)
	if id == "" {
		return locker.Holder{}, fmt.Errorf("kubernetes: %w: Lease %s/%s is free", locker.ErrNoLeader, l.namespace, l.name)
	}
	h := locker.Holder{
		ID:       id,
		Hostname: ls.Annotations[annHost],
		Epoch:    parseEpoch(ls.Annotations[annEpoch]),
		Version:  ls.Annotations[annVersion],
	}
	h.PID, _ = strconv.Atoi(ls.Annotations[annPID])
	h.Holders, _ = strconv.Atoi(ls.Annotations[annHolders])
	h.Priority, _ = strconv.Atoi(ls.Annotations[annPriority])
	if ls.Spec.AcquireTime != nil {
		h.AcquiredAt = ls.Spec.AcquireTime.UTC()
	}
	if ttl, ok := declaredTTL(ls); ok && ls.Spec.RenewTime != nil {
		h.LeaseRemaining = max(0, time.Until(ls.Spec.RenewTime.Add(ttl)))
	}
	return h, nil
}
