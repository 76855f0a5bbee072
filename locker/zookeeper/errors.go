package zookeeper

import (
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/locker"
)

// errClosed is returned by calls on a closed Locker.
var errClosed = errors.New("zookeeper: locker is closed")

// errCandidacyLost means our own session or znode disappeared while we
// waited for our turn. Acquire returns it wrapped; the supervisor retries.
var errCandidacyLost = errors.New("candidacy lost while waiting")

// refusal reports whether err means "retrying is pointless": the ensemble
// denied us by ACL or rejected our credentials.
func refusal(err error) bool {
	return errors.Is(err, zk.ErrNoAuth) || errors.Is(err, zk.ErrAuthFailed) || errors.Is(err, zk.ErrInvalidACL)
}

// sessionGone reports whether err says our session no longer exists.
func sessionGone(err error) bool {
	return errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

// classify wraps err with op, adding locker.ErrRefused when retrying will
// not help, so the supervisor exits 125 instead of retrying.
func classify(op string, err error) error {
	if refusal(err) {
		return fmt.Errorf("%s: %w: %w", op, locker.ErrRefused, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
