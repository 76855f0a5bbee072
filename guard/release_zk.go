package guard

import (
	"context"
	"fmt"

	"github.com/leaderrun/leaderrun/internal/secretfile"
	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

func init() { releasers["zookeeper"] = releaseZooKeeper }

// releaseZooKeeper names the leader's znode in the key's release record
// and closes its session: the server deletes the ephemeral znode, and the
// next candidate's watch fires at once and finds the release named, so it
// leads at once rather than waiting out the TTL of a holder gone silent.
func releaseZooKeeper(ctx context.Context, hello BackendHello, handle string) error {
	id, passwd, node, err := zkwire.ParseHandle(handle)
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
	if h.AuthFile != "" {
		// The credentials stayed off the pipe; the file is read now, as
		// leaderrun read it (its errors never repeat its contents).
		if h.Auth, err = secretfile.Read(h.AuthFile); err != nil {
			return fmt.Errorf("zookeeper: --zk-auth-file %s: %w", h.AuthFile, err)
		}
	}
	return zkwire.ReleaseSessionAny(ctx, servers, id, passwd, h.Auth, node, h.SessionTimeout, zkwire.DefaultTimeout)
}
