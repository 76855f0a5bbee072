package kubernetes

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

// TestQueue runs the candidates' queue (queue.go) on a real kube-apiserver.
func TestQueue(t *testing.T) {
	srv := startServer(t)
	lockertest.QueueContract(t, lockertest.Queue[*Locker]{
		New:      func(t *testing.T, key string) *Locker { return srv.newLocker(t, key) },
		TTL:      srv.newLocker(t, "ttl").ttl,
		Attempts: func(l *Locker) int64 { return l.attempts.Load() },
		Queued:   queued,
		Stopped: func(t *testing.T, l *Locker) func() bool {
			dead, err := l.enqueue(lockertest.Ctx(t, 5*time.Second), newTerm())
			if err != nil {
				t.Fatal(err)
			}
			return func() bool {
				_, err := l.client.Get(lockertest.Ctx(t, 5*time.Second), dead.name, metav1.GetOptions{})
				return err == nil
			}
		},
		Hold: renewing,
	})
}

// renewing renews lease every 500ms, as the supervisor would, until it is
// lost or the test ends.
func renewing(t *testing.T, lease locker.Lease) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-lease.Lost():
				return
			case <-time.After(500 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = lease.Renew(ctx)
			cancel()
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
}

// queued counts the entries in the queue of l's Lease.
func queued(t *testing.T, l *Locker) int {
	t.Helper()
	list, err := l.client.List(lockertest.Ctx(t, 5*time.Second), metav1.ListOptions{LabelSelector: labels.Set{labelQueue: l.queueLabel()}.String()})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}
