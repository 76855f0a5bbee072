package kubernetes

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/leaderrun/leaderrun/locker/lockertest"
)

// failQueue answers 500 to every request about a queue entry, and passes
// the rest (the key's Lease) to next.
type failQueue struct{ next http.RoundTripper }

func (f failQueue) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.Path, entryInfix) || r.URL.Query().Has("labelSelector") {
		return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader("injected fault")), Request: r}, nil
	}
	return f.next.RoundTrip(r)
}

// TestQueueFailingLeavesTimeToTake: when every queue call fails in a way
// that may pass, and the key is free, a candidate whose Acquire has less
// time than queueRetryFor (an --acquire-timeout of 10s) must stop retrying
// the queue in time to take the key, not spend its whole deadline on the
// queue and give up on a free key.
func TestQueueFailingLeavesTimeToTake(t *testing.T) {
	srv := startServer(t)
	key := lockertest.Key(t)
	rc, err := clientcmd.BuildConfigFromFlags("", srv.admin)
	if err != nil {
		t.Fatal(err)
	}
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return failQueue{rt} }
	l := srv.newLocker(t, key, func(c *Config) { c.rest = rc })
	if l.queueRetryFor() <= 10*time.Second {
		t.Fatalf("queueRetryFor %v: the test needs it longer than the deadline", l.queueRetryFor())
	}
	start := time.Now()
	lease, err := l.Acquire(lockertest.Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatalf("the free key was not taken within the 10s deadline while only the queue failed: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("took the free key %v after Acquire began, with every queue call failing", time.Since(start).Round(time.Millisecond))
	if err := lease.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}
