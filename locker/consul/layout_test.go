package consul

import (
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// The records lie where, and as, releases before package records kept
// them.
func TestRecordsLayout(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{})
	root := testConfig("k", "").Prefix + "/"
	lockertest.LayoutContract(t, lockertest.Layout{
		NewLocker: func(t *testing.T, key string) locker.Locker { return c.locker(t, key, c.HTTPAddr(0)) },
		Control:   func(key string) string { return root + key + "/~control" },
		Term:      func(key string, epoch uint64) string { return root + key + "/~history/" + locker.TermName(epoch) },
		Run:       func(key, slot string) string { return root + key + "/~run/" + slot },
		Put: func(t *testing.T, place string, value []byte) {
			if _, err := c.admin.KV().Put(&api.KVPair{Key: place, Value: value}, nil); err != nil {
				t.Fatal(err)
			}
		},
		Get: func(t *testing.T, place string) ([]byte, bool) {
			pair, _, err := c.admin.KV().Get(place, &api.QueryOptions{RequireConsistent: true})
			if err != nil {
				t.Fatal(err)
			}
			if pair == nil {
				return nil, false
			}
			return pair.Value, true
		},
	})
}
