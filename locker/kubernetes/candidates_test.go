package kubernetes

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

// Candidates lists the queue's entries; one an older release wrote
// (without annWho) is listed by its holderIdentity alone.
func TestCandidates(t *testing.T) {
	srv := startServer(t)
	lockertest.CandidatesContract(t, lockertest.Waiting[*Locker]{
		New: func(t *testing.T, key string, opts func(*locker.Options)) *Locker {
			return srv.newLocker(t, key, func(c *Config) { opts(&c.Options) })
		},
		Old: func(t *testing.T, l *Locker) string {
			ctx := lockertest.Ctx(t, 5*time.Second)
			e, err := l.enqueue(ctx, newTerm())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.dequeue(e) })
			old := e.cur.DeepCopy()
			delete(old.Annotations, annWho)
			if _, err := l.client.Update(ctx, old, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			return l.opts.ID
		},
	})
}
