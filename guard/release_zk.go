package guard

import (
	"context"
	"fmt"

	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

func init() { releasers["zookeeper"] = releaseZooKeeper }

// releaseZooKeeper closes the leader's session: the server deletes its
// ephemeral znode, and the next candidate's watch fires at once.
func releaseZooKeeper(ctx context.Context, hello BackendHello, handle string) error {
	id, passwd, _, err := zkwire.ParseHandle(handle)
	if err != nil {
		return fmt.Errorf("zookeeper: %w", err)
	}
	var h zkwire.Hello
	if err := settingsOf(hello, &h); err != nil {
		return err
	}
	servers, _, err := zkwire.SplitServers(h.Servers)
	if err != nil {
		return fmt.Errorf("zookeeper: servers: %w", err)
	}
	return zkwire.CloseSessionAny(ctx, servers, id, passwd, h.SessionTimeout, zkwire.DefaultTimeout)
}
