// Package zkfence writes to ZooKeeper only as the newest leader: a fence
// znode holds the highest LEADER_EPOCH that wrote, and every write is one
// multi-op that sets the fence with a version check, so ZooKeeper applies
// the write together with the fence or not at all. docs/FENCING.md explains
// the recipe; tests/recipes runs it on a real ensemble.
//
// In a job leaderrun started, the epoch is LEADER_EPOCH. On leaderrun's
// ZooKeeper backend the epoch is the czxid of the leader's znode, and zxids
// only grow over an ensemble's life, so a later leadership always has the
// higher epoch; any other source of epochs with that property serves as
// well.
package zkfence

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/go-zookeeper/zk"
)

// ErrStale is returned when a higher epoch has written through the fence:
// the caller is a stale leader and must stop.
var ErrStale = errors.New("zkfence: stale epoch")

// maxTries bounds how often Write reads the fence again after a rival
// moved it between the read and the multi-op.
const maxTries = 8

// Write applies ops (*zk.CreateRequest, *zk.SetDataRequest,
// *zk.DeleteRequest, *zk.CheckVersionRequest) if epoch is at least the
// highest epoch the fence znode at path holds, in one multi-op with the
// fence set to epoch at the version just read. It creates the fence (with
// acl) when it does not exist. A stale epoch gets an error wrapping
// ErrStale and nothing is written; an op of the caller's that fails rolls
// everything back and its error is returned.
func Write(c *zk.Conn, path string, acl []zk.ACL, epoch uint64, ops ...any) error {
	mine := []byte(strconv.FormatUint(epoch, 10))
	for range maxTries {
		data, st, err := c.Get(path)
		if errors.Is(err, zk.ErrNoNode) {
			// The first writer creates the fence, then writes as any other.
			if _, err := c.Create(path, mine, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return fmt.Errorf("zkfence: create fence %s: %w", path, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("zkfence: read fence %s: %w", path, err)
		}
		highest, err := strconv.ParseUint(string(data), 10, 64)
		if err != nil {
			return fmt.Errorf("zkfence: fence %s holds %q, not an epoch", path, data)
		}
		if highest > epoch {
			return fmt.Errorf("%w: epoch %d, and epoch %d has written through %s", ErrStale, epoch, highest, path)
		}
		// The version check: the fence must still be as we read it.
		all := append([]any{&zk.SetDataRequest{Path: path, Data: mine, Version: st.Version}}, ops...)
		res, err := c.Multi(all...)
		if err == nil {
			for _, r := range res {
				if r.Error != nil {
					err = r.Error
					break
				}
			}
		}
		fenceMoved := errors.Is(err, zk.ErrBadVersion) && len(res) == 0
		if len(res) > 0 {
			fenceMoved = errors.Is(res[0].Error, zk.ErrBadVersion)
		}
		if fenceMoved {
			continue // a rival moved the fence: read it again
		}
		if err != nil {
			return fmt.Errorf("zkfence: write through %s: %w", path, err)
		}
		return nil
	}
	return fmt.Errorf("zkfence: the fence %s keeps moving; giving up", path)
}
