package zookeeper

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// The records lie where, and as, releases before package records kept
// them.
func TestRecordsLayout(t *testing.T) {
	servers := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1}).Addrs()
	conn := rawConn(t, servers, "")
	root := "/" + testPrefix + "/"
	lockertest.LayoutContract(t, lockertest.Layout{
		NewLocker: func(t *testing.T, key string) locker.Locker { return newLocker(t, servers, key) },
		Control:   func(key string) string { return root + key + "/~control" },
		Term:      func(key string, epoch uint64) string { return root + key + "/~term/" + locker.TermName(epoch) },
		Run:       func(key, slot string) string { return root + key + "/~run/" + slot },
		Put: func(t *testing.T, place string, value []byte) {
			parts := strings.Split(strings.TrimPrefix(place, "/"), "/")
			p := ""
			for i, seg := range parts {
				p += "/" + seg
				var data []byte
				if i == len(parts)-1 {
					data = value
				}
				if _, err := conn.Create(p, data, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
					t.Fatal(err)
				}
			}
		},
		Get: func(t *testing.T, place string) ([]byte, bool) {
			data, _, err := conn.Get(place)
			if errors.Is(err, zk.ErrNoNode) {
				return nil, false
			}
			if err != nil {
				t.Fatal(err)
			}
			return data, true
		},
	})
}
