package kubernetes

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

// TestLockContract: the core lock contract (lockertest.LockContract) on
// a real API server; the hand delete removes the Lease object.
func TestLockContract(t *testing.T) {
	srv := startServer(t)
	lockertest.LockContract(t, lockertest.Lock{
		New: func(t *testing.T, key string, noWait bool) locker.Locker {
			return srv.newLocker(t, key, func(c *Config) { c.NoWait = noWait })
		},
		Delete: func(t *testing.T, _ string, holder locker.Locker, _ locker.Lease) {
			l := holder.(*Locker)
			if err := l.client.Delete(lockertest.Ctx(t, 10*time.Second), l.name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		},
	})
}
