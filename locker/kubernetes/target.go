package kubernetes

import (
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

var _ locker.Targeter = (*Locker)(nil)

// Target is what a single attempt (--no-wait) talks to and how long it may
// take: the API server, for one call's timeout.
func (l *Locker) Target() (string, time.Duration) { return l.host, l.timeout }
