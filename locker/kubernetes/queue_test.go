package kubernetes

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/locker/queue"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestQueue runs the candidates' queue (queue.go) on a real kube-apiserver.
func TestQueue(t *testing.T) {
	srv := startServer(t)
	lockertest.QueueContract(t, lockertest.Queue[*Locker]{
		New:      func(t *testing.T, key string) *Locker { return srv.newLocker(t, key) },
		TTL:      srv.newLocker(t, "ttl").ttl,
		Attempts: func(l *Locker) int64 { return l.attempts.Load() },
		Queued:   queued,
		// A stopped entry here is an older leaderrun's, without annAhead,
		// which its successor takes to renew every TTL/2: the contract's
		// bound is TTL + allowance. TestQueueOnlyTheNearRenewOften cuts
		// off candidates that declare their place.
		Stopped: func(t *testing.T, l *Locker) func() bool {
			ctx := lockertest.Ctx(t, 5*time.Second)
			dead, err := l.enqueue(ctx, newTerm())
			if err != nil {
				t.Fatal(err)
			}
			old := dead.cur.DeepCopy()
			delete(old.Annotations, annAhead)
			if _, err := l.client.Update(ctx, old, metav1.UpdateOptions{}); err != nil {
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

// TestQueueJoinRetried: a candidate whose first queue call times out (here
// the server is frozen while it joins; at a hundred candidates starting at
// once, an overloaded server does the same) joins the queue once the
// server answers, instead of campaigning without it: a release then wakes
// only the head, not every candidate that once met a slow server.
func TestQueueJoinRetried(t *testing.T) {
	srv := startServer(t)
	key := lockertest.Key(t)
	ttl := func(c *Config) { c.TTL = 5 * time.Second } // the freeze stays well inside it
	leader := srv.newLocker(t, key, ttl)
	held := mustAcquire(t, leader)
	renewing(t, held)

	head := srv.newLocker(t, key, ttl)
	headWon := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), head)
	testsupport.WaitFor(t, 10*time.Second, "the first standby in the queue", func() bool { return queued(t, leader) == 1 })

	late := srv.newLocker(t, key, ttl, func(c *Config) { c.Timeout = time.Second })
	thawed := make(chan struct{})
	go func() { defer close(thawed); srv.kube.Freeze(2500 * time.Millisecond) }()
	time.Sleep(200 * time.Millisecond)
	lateWon := lockertest.AcquireAsync(t, lockertest.Ctx(t, time.Minute), late) // its first call times out
	<-thawed
	testsupport.WaitFor(t, 15*time.Second, "the standby whose first call timed out in the queue", func() bool { return queued(t, leader) == 2 })

	if err := held.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	renewing(t, lockertest.OnlyTheHeadTakes(t, headWon, lateWon, late.attempts.Load))
}

// TestQueueOrphanDeleted: an entry whose create went through but which
// never got its place (the write of its place and the delete after it
// failed) stands behind everyone; once it is dead, the next candidate to
// read the queue deletes it, where nobody ever moves past it.
func TestQueueOrphanDeleted(t *testing.T) {
	srv, key, leader := leading(t)

	ctx := lockertest.Ctx(t, time.Minute)
	id, secs, then := "gone", leaseSeconds(leader.ttl), metav1.NewMicroTime(time.Now().Add(-time.Hour))
	name := leader.name + entryInfix + newTerm()
	if _, err := leader.client.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: leader.namespace, Labels: map[string]string{labelQueue: leader.queueLabel()}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, RenewTime: &then},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Dead for longer than its ancient bound by the server's clock (its
	// writes' times are whole seconds, and a second is added to the bound).
	time.Sleep(leader.queueConfig().AncientAfter(toEntry(&coordinationv1.Lease{})) + 2500*time.Millisecond)
	lockertest.AcquireAsync(t, ctx, srv.newLocker(t, key))
	testsupport.WaitFor(t, 10*time.Second, "the orphaned entry deleted", func() bool {
		_, err := leader.client.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// TestQueueOnlyTheNearRenewOften: with a leader and six candidates queued,
// only the head and the one behind it renew their entries every TTL/2;
// the deeper ones renew every 2 x TTL, and are never passed over while
// they do. Then the candidate behind the head and a deeper one lose the
// server (their connections are closed, as for a host cut off): the first
// is passed over and deleted within TTL + allowance, the deeper one within
// deepSilence.
func TestQueueOnlyTheNearRenewOften(t *testing.T) {
	const n = 6
	srv, key, leader := leading(t)
	ttl := leader.ttl
	cut := map[int]*testsupport.TCPProxy{}
	for _, i := range []int{1, 3} {
		cut[i] = testsupport.NewTCPProxy(t, strings.TrimPrefix(srv.kube.URL(), "https://"))
	}
	for i := range n {
		var mods []func(*Config)
		if p := cut[i]; p != nil {
			cfg := srv.kube.KubeconfigAt(t, p.Addr, srv.kube.Token(testcluster.KubeAdmin), "")
			mods = append(mods, func(c *Config) { c.Kubeconfig = cfg })
		}
		lockertest.AcquireAsync(t, lockertest.Ctx(t, 3*time.Minute), srv.newLocker(t, key, mods...))
		// One at a time, so the queue's order is known.
		testsupport.WaitFor(t, 10*time.Second, "the candidate's entry", func() bool { return queued(t, leader) == i+1 })
	}
	entries := func() []coordinationv1.Lease {
		list, err := leader.client.List(lockertest.Ctx(t, 5*time.Second), metav1.ListOptions{LabelSelector: labels.Set{labelQueue: leader.queueLabel()}.String()})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(list.Items, func(a, b coordinationv1.Lease) int {
			return cmp.Compare(rank(&a), rank(&b))
		})
		return list.Items
	}
	time.Sleep(time.Second) // every candidate has read the queue and declared its place
	first := entries()
	if len(first) != n {
		t.Fatalf("%d entries, want %d", len(first), n)
	}
	writes := make([]int, n)
	last := make([]string, n)
	for i := range first {
		last[i] = first[i].ResourceVersion
	}
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		for i, it := range entries() {
			if i < n && it.ResourceVersion != last[i] {
				writes[i]++
				last[i] = it.ResourceVersion
			}
		}
	}
	t.Logf("entry writes over %v by place in the queue: %v", 3*ttl, writes)
	now := entries()
	for i, w := range writes {
		if now[i].Name != first[i].Name {
			t.Fatalf("the entry at place %d changed from %s to %s: a live candidate was passed over", i, first[i].Name, now[i].Name)
		}
		want := map[int]string{0: "0", 1: "1"}[i]
		if want == "" {
			want = "?"
		}
		if got := now[i].Annotations[annAhead]; got != want {
			t.Errorf("the entry at place %d declares %s=%q, want %q", i, annAhead, got, want)
		}
		switch {
		case i < 2 && w < 4:
			t.Errorf("the entry at place %d was written %d times in three TTLs, want one per TTL/2: it must prove it is alive", i, w)
		case i >= 2 && w > 2:
			t.Errorf("the entry at place %d was written %d times in three TTLs, want at most 2 (one per 2 x TTL): only the head and the one behind it renew often", i, w)
		}
	}

	behind, deep := now[1].Name, now[3].Name
	gone := func(name string) bool {
		_, err := leader.client.Get(lockertest.Ctx(t, 5*time.Second), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	cutAt := time.Now()
	cut[1].Cut()
	cut[3].Cut()
	fast := ttl + observe.Allowance(ttl)
	testsupport.WaitFor(t, fast+2*time.Second, "the entry behind the head passed over and deleted", func() bool { return gone(behind) })
	t.Logf("the entry behind the head was deleted %v after its candidate was cut off (TTL + allowance %v)", time.Since(cutAt).Round(time.Millisecond), fast)
	slow := leader.queueConfig().DeepBound()
	testsupport.WaitFor(t, slow+2*time.Second, "the deep entry passed over and deleted", func() bool { return gone(deep) })
	t.Logf("the deep entry was deleted %v after its candidate was cut off (deep bound %v)", time.Since(cutAt).Round(time.Millisecond), slow)
	after := entries()
	if len(after) != n-2 {
		t.Fatalf("%d entries after two candidates went, want %d", len(after), n-2)
	}
	for j, i := range []int{0, 2, 4, 5} {
		if after[j].Name != now[i].Name {
			t.Errorf("the live entry at place %d (%s) was replaced by %s: a live candidate was passed over", i, now[i].Name, after[j].Name)
		}
	}
	if got := after[1].Annotations[annAhead]; got != "1" {
		t.Errorf("the candidate now right behind the head declares %s=%q, want \"1\"", annAhead, got)
	}
}

// TestEntryMode: what an entry's annotations declare decides how long
// its successor waits on it, on its own clock and by the server's; the
// queue's own tests check the rules themselves.
func TestEntryMode(t *testing.T) {
	l := &Locker{ttl: 3 * time.Second, log: hclog.NewNullLogger()}
	q := l.queueConfig()
	fast := l.ttl + observe.Allowance(l.ttl)
	deep := 3*l.ttl + observe.Allowance(3*l.ttl)
	for _, tc := range []struct {
		name       string
		ann        map[string]string
		fast, head bool
		bound      time.Duration
	}{
		{"older leaderrun", nil, true, false, fast},
		{"head", map[string]string{annAhead: "0"}, true, true, fast},
		{"right behind", map[string]string{annAhead: "1"}, true, false, fast},
		{"deep", map[string]string{annAhead: "?"}, false, false, deep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := toEntry(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}})
			f, h := queue.Mode(e)
			if f != tc.fast || h != tc.head {
				t.Errorf("Mode = fast %v, head %v; want %v, %v", f, h, tc.fast, tc.head)
			}
			d, judged := q.Silence(e)
			if got := d + observe.Allowance(d); !judged || got != tc.bound {
				t.Errorf("silence bound %v (judged %v), want %v", got, judged, tc.bound)
			}
			if got := q.AncientAfter(e); got != 3*tc.bound {
				t.Errorf("ancient %v, want %v", got, 3*tc.bound)
			}
		})
	}
	if q.DeepBound() != deep {
		t.Errorf("deep bound %v, want %v", q.DeepBound(), deep)
	}
	// A deep candidate on time (a write every 2 x TTL) keeps more slack
	// beyond its beat than a fast one (every TTL/2), and a TTL at least.
	if slack := q.DeepBound() - 2*l.ttl; slack < max(l.ttl, fast-l.ttl/2) {
		t.Errorf("deep slack %v, want at least %v", slack, max(l.ttl, fast-l.ttl/2))
	}
}
