package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

// zkServerTimeout bounds the exchange with each ZooKeeper server, as
// locker/zookeeper's default dial timeout does.
const zkServerTimeout = 5 * time.Second

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
	return zkwire.CloseSessionAny(ctx, servers, id, passwd, h.Options.TTL, zkServerTimeout)
}
