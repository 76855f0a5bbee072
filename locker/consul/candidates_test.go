package consul

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Candidates lists the queue's entries; one an older release wrote
// ("<id> <beat> ahead=<place>") is listed by its ID alone.
func TestCandidates(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{Servers: 1})
	addr := c.HTTPAddr(0)
	lockertest.CandidatesContract(t, lockertest.Waiting[*Locker]{
		New: func(t *testing.T, key string, opts func(*locker.Options)) *Locker {
			return c.locker(t, key, addr, func(c *Config) { opts(&c.Options) })
		},
		Old: func(t *testing.T, l *Locker) string {
			sid, _, err := c.admin.Session().Create(&api.SessionEntry{TTL: l.ttlString(), Behavior: api.SessionBehaviorRelease, Checks: []string{}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			stop, done := make(chan struct{}), make(chan struct{})
			go func() { // renewed as its candidate would, until the test ends
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(l.opts.TTL / 3):
					}
					c.admin.Session().Renew(sid, nil)
				}
			}()
			t.Cleanup(func() { close(stop); <-done; c.admin.Session().Destroy(sid, nil) })
			if ok, _, err := c.admin.KV().Acquire(&api.KVPair{Key: l.entryKey(sid), Session: sid, Value: []byte("old node 4 ahead=?")}, nil); !ok || err != nil {
				t.Fatalf("an older release's entry: %v %v", ok, err)
			}
			return "old node"
		},
	})
}
