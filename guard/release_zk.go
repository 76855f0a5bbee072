package guard

import (
	"context"
	"fmt"

	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

// releaseZooKeeper closes the leader's session: the server deletes its
// ephemeral znode, and the next candidate's watch fires at once.
func releaseZooKeeper(ctx context.Context, h BackendHello, handle string) error {
	id, passwd, _, err := zkwire.ParseHandle(handle)
	if err != nil {
		return fmt.Errorf("zookeeper: %w", err)
	}
	servers, _, err := zkwire.SplitServers(h.ZKServers)
	if err != nil {
		return fmt.Errorf("zookeeper: servers: %w", err)
	}
	return zkwire.CloseSessionAny(ctx, servers, id, passwd, h.Options.TTL, zkwire.DefaultTimeout)
}
