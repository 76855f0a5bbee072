package zookeeper

import (
	"strings"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

var _ locker.Targeter = (*Locker)(nil)

// Target is what a single attempt (--no-wait) talks to and how long it may
// take: the ensemble's servers, each tried for at most the dial timeout.
func (l *Locker) Target() (string, time.Duration) {
	return strings.Join(l.servers, ","), time.Duration(len(l.servers)) * l.timeout
}
