//go:build linux

package recipes

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/examples/zkfence"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestZooKeeperRecipe: examples/zkfence writes in one multi-op that sets a
// fence znode holding the highest epoch, with a version check.
func TestZooKeeperRecipe(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	args := []string{"--backend", "zookeeper", "--zk-servers", strings.Join(z.Addrs(), ","), "--key", "recipe-zk",
		"--ttl", "3s", "--renew-interval", "500ms", "--kill-grace", "1s", "--safety-margin", "500ms"}
	c, _, err := zk.Connect(z.Addrs(), 4*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	acl := zk.WorldACL(zk.PermAll)
	if _, err := c.Create("/recipe-data", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	write := func(t *testing.T, env []string, value string) bool {
		var epoch uint64
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "LEADER_EPOCH="); ok {
				epoch, _ = strconv.ParseUint(v, 10, 64)
			}
		}
		err := zkfence.Write(c, "/recipe-fence", acl, epoch,
			&zk.SetDataRequest{Path: "/recipe-data", Data: []byte(value), Version: -1})
		switch {
		case err == nil:
			return true
		case errors.Is(err, zkfence.ErrStale):
			t.Logf("rejected: %v", err)
			return false
		}
		t.Fatalf("zkfence.Write: %v", err)
		return false
	}
	read := func(t *testing.T) string {
		data, _, err := c.Get("/recipe-data")
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	proveFence(t, args, "", []string{"PATH=" + jobPath(t)}, write, read)
}
