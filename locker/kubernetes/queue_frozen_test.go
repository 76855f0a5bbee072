package kubernetes

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestQueueDeepFrozenAsTheQueueMoves: the candidate third in the queue
// (deep, declaring "?") is cut off at the moment the head leaves, so that
// it should have become the one right behind the head but cannot say so.
// Its successor judges it by what it last declared: it passes it over
// within deepSilence of the cut, no later, and then declares at once that
// it is right behind the head.
func TestQueueDeepFrozenAsTheQueueMoves(t *testing.T) {
	srv, key, leader := leading(t)
	p := testsupport.NewTCPProxy(t, strings.TrimPrefix(srv.kube.URL(), "https://"))
	cfg := srv.kube.KubeconfigAt(t, p.Addr, srv.kube.Token(testcluster.KubeAdmin), "")
	headCtx, headLeaves := context.WithCancel(lockertest.Ctx(t, 3*time.Minute))
	for i := range 4 {
		ctx := lockertest.Ctx(t, 3*time.Minute)
		var mods []func(*Config)
		switch i {
		case 0:
			ctx = headCtx
		case 2:
			mods = append(mods, func(c *Config) { c.Kubeconfig = cfg })
		}
		lockertest.AcquireAsync(t, ctx, srv.newLocker(t, key, mods...))
		testsupport.WaitFor(t, 10*time.Second, "the candidate's entry", func() bool { return queued(t, leader) == i+1 })
	}
	entries := func() []coordinationv1.Lease {
		list, err := leader.client.List(lockertest.Ctx(t, 5*time.Second), metav1.ListOptions{LabelSelector: labels.Set{labelQueue: leader.queueLabel()}.String()})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(list.Items, func(a, b coordinationv1.Lease) int {
			return cmp.Or(cmp.Compare(rank(&a), rank(&b)), strings.Compare(a.Name, b.Name))
		})
		return list.Items
	}
	time.Sleep(time.Second) // every candidate has declared its place
	before := entries()
	if got := before[2].Annotations[annAhead]; got != "?" {
		t.Fatalf("the third entry declares %q, want \"?\"", got)
	}
	frozen, next := before[2].Name, before[3].Name
	cutAt := time.Now()
	p.Cut()
	headLeaves()
	bound := leader.queueConfig().DeepBound()
	testsupport.WaitFor(t, bound+3*time.Second, "the frozen deep entry passed over", func() bool {
		_, err := leader.client.Get(lockertest.Ctx(t, 5*time.Second), frozen, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	took := time.Since(cutAt)
	t.Logf("the frozen deep entry was deleted %v after the cut (deep bound %v)", took.Round(time.Millisecond), bound)
	if took > bound+time.Second {
		t.Errorf("passed over %v after the cut, beyond the deep bound %v", took, bound)
	}
	testsupport.WaitFor(t, 2*time.Second, "its successor declaring it is right behind the head", func() bool {
		for _, it := range entries() {
			if it.Name == next {
				return it.Annotations[annAhead] == "1"
			}
		}
		return false
	})
	if n := len(entries()); n != 2 {
		t.Errorf("%d entries, want 2", n)
	}
}
