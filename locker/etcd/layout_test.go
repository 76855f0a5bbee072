package etcd

import (
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// The records lie where, and as, releases before package records kept
// them.
func TestRecordsLayout(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	cli := rawClient(t, eps)
	root := "/" + testPrefix + "/"
	lockertest.LayoutContract(t, lockertest.Layout{
		NewLocker: func(t *testing.T, key string) locker.Locker { return newLocker(t, eps, key) },
		Control:   func(key string) string { return root + key + "/~control" },
		Term:      func(key string, epoch uint64) string { return root + key + "/~history/" + locker.TermName(epoch) },
		Run:       func(key, slot string) string { return root + key + "/~run/" + slot },
		Put: func(t *testing.T, place string, value []byte) {
			if _, err := cli.Put(lockertest.Ctx(t, 5*time.Second), place, string(value)); err != nil {
				t.Fatal(err)
			}
		},
		Get: func(t *testing.T, place string) ([]byte, bool) {
			resp, err := cli.Get(lockertest.Ctx(t, 5*time.Second), place)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) == 0 {
				return nil, false
			}
			return resp.Kvs[0].Value, true
		},
	})
}
