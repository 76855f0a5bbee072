package locker

import (
	"context"
	"time"
)

// HolderVersions is implemented by the backends whose Leader keeps naming
// a holder that died without releasing until a candidate takes its key
// over, because nothing on the server expires it (the lease-row backends
// and Kubernetes, DESIGN §1.12). HolderVersion reads the holder as Leader
// does, with the version of its record, which each of its renewals
// changes, and the TTL it declared if it follows the observer-clock
// contract (0 when it does not: it is never taken over on a reader's
// clock). A reader that sees one version unchanged for TTL +
// observe.Allowance(TTL) on its own monotonic clock knows that holder is
// gone. Find it with As[HolderVersions].
type HolderVersions interface {
	HolderVersion(ctx context.Context) (h Holder, version string, ttl time.Duration, err error)
}
