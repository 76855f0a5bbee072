package zookeeper

import (
	"context"
	"errors"
	"time"

	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

// checkMargin learns the ensemble's tickTime, which bounds the relay gap
// (relay.go), and warns when the safety margin is not above tickTime/2: a
// follower cut off right after relaying our renewal lets the ensemble
// expire the session up to half a tick before our deadline (DESIGN §1.2,
// TestRelayGap). ZooKeeper does not tell clients its tickTime; its
// minSessionTimeout is two ticks unless configured otherwise. A session
// that asked for less than that was granted exactly that; otherwise one
// short session asking for 1ms learns it. Configured higher, it makes the
// estimate too large, and the warning errs on the side of caution. When
// nothing answers the probe, the tick is taken as its largest under the
// default configuration, half the granted timeout, and leases claim no
// half tick of allowance (relayBound).
func (l *Locker) checkMargin(ctx context.Context, granted time.Duration) {
	minTimeout, learned := granted, true
	if granted <= l.opts.TTL {
		d, err := l.minSessionTimeout(ctx)
		if err != nil {
			l.log.Debug("cannot learn the ensemble's minimum session timeout; --safety-margin not checked, leases claim no relay allowance", "error", err)
			learned = false
		} else {
			minTimeout = d
		}
	}
	tick := minTimeout / 2
	l.relay = newRelayBound(tick, learned)
	if !learned || l.margin <= 0 || l.margin > tick/2 {
		return
	}
	l.log.Warn("--safety-margin is not above half of ZooKeeper's tickTime: a follower cut off right after passing on a renewal may let the ensemble expire the session, and a standby lead, up to tickTime/2 before this leader's deadline; raise --safety-margin above tickTime/2",
		"safety_margin", l.margin, "tick_time", tick, "suggested", tick*3/4, "min_session_timeout", minTimeout)
}

// minSessionTimeout asks the servers in turn for their minSessionTimeout
// (zkwire.MinSessionTimeout). The whole probe is bounded by one per-call
// timeout, shared out between the servers, so that servers that do not
// answer delay the first campaign by no more than that.
func (l *Locker) minSessionTimeout(ctx context.Context) (time.Duration, error) {
	each := l.timeout / time.Duration(len(l.servers))
	var errs []error
	for _, server := range l.servers {
		sctx, cancel := context.WithTimeout(ctx, each)
		d, err := zkwire.MinSessionTimeout(sctx, server)
		cancel()
		if err == nil {
			return d, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return 0, errors.Join(errs...)
}
