package consul

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

func TestControlContract(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{})
	lockertest.ControlContract(t, func(t *testing.T, key string) locker.Locker {
		return c.locker(t, key, c.HTTPAddr(0))
	})
}

// The control record lies where no list of the key's entries miscounts
// it: a key with nothing but a control record is still never used (Leader
// names the path), a queued candidate still moves up and wins after
// control writes, a slot key still wins, and a key used once is "no
// leader" as before. The holder's priority reads back through Leader.
func TestControlLeavesTheKeyAlone(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{})
	addr := c.HTTPAddr(0)
	key := lockertest.Key(t)
	writer := c.locker(t, locker.SlotKey(key, 2), addr)
	v, err := writer.SetControl(lockertest.Ctx(t, 5*time.Second), locker.Control{Pause: &locker.Pause{By: "ops@admin1", Reason: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "leaderrun-test/" + key + "/~control"
	if pair, _, err := c.admin.KV().Get(want, &api.QueryOptions{RequireConsistent: true}); err != nil || pair == nil || pair.Session != "" || fmt.Sprint(pair.ModifyIndex) != v {
		t.Fatalf("the control record of %s: %+v, %v; want the entry %s at %s in no session", locker.SlotKey(key, 2), pair, err, want, v)
	}

	// Consul moves no index for a write that changes nothing: the same
	// record written again must still move the version.
	same, err := writer.SetControl(lockertest.Ctx(t, 5*time.Second), locker.Control{Version: v, Pause: &locker.Pause{By: "ops@admin1", Reason: "test"}})
	if err != nil || same == v {
		t.Fatalf("the same record written again = %q, %v; want a version past %s", same, err, v)
	}
	if _, err := writer.SetControl(lockertest.Ctx(t, 5*time.Second), locker.Control{Version: v}); !errors.Is(err, locker.ErrConflict) {
		t.Fatalf("a write at the version before the unchanged one: %v, want ErrConflict", err)
	}
	v = same

	l := c.locker(t, key, addr)
	lockertest.NeverUsed(t, l, func() {
		a := c.locker(t, key, addr, func(cfg *Config) { cfg.Priority = 3 })
		b := c.locker(t, key, addr)
		first := acquire(t, a)
		h, err := l.Leader(lockertest.Ctx(t, 5*time.Second))
		if err != nil || h.Epoch != first.Epoch() || h.Priority != 3 {
			t.Fatalf("Leader = %+v, %v; want epoch %d, priority 3", h, err, first.Epoch())
		}
		next := lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), b)
		waitFor(t, 10*time.Second, "the second candidate's queue entry", func() bool { return c.queued(t, b) == 1 })
		if v, err = writer.SetControl(lockertest.Ctx(t, 5*time.Second), locker.Control{Version: v}); err != nil {
			t.Fatal(err)
		}
		if n := c.queued(t, b); n != 1 {
			t.Fatalf("%d live queue entries after a control write, want 1", n)
		}
		release(t, first)
		r := <-next
		if r.Err != nil {
			t.Fatalf("the queued candidate after a control write: %v", r.Err)
		}
		lockertest.Release(r.Lease)
		release(t, acquire(t, c.locker(t, locker.SlotKey(key, 2), addr)))
	}, "KV leaderrun-test/"+key+" on Consul ")
}

// WaitControl rides out the loss of the Raft leader: its blocking query on
// a follower fails while the servers elect another, and a write made in
// that time still reaches the waiter, at once or with its next query.
func TestControlSurvivesLeaderLoss(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{Servers: 3})
	raft, err := c.admin.Operator().RaftGetConfiguration(&api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	var followers []int
	for _, s := range raft.Servers {
		var i int
		if _, err := fmt.Sscanf(s.Node, "s%d", &i); err != nil {
			t.Fatalf("raft server node %q: %v", s.Node, err)
		}
		if s.Leader {
			leader = i
		} else {
			followers = append(followers, i)
		}
	}
	if leader < 0 || len(followers) != 2 {
		t.Fatalf("no leader and two followers in %+v", raft.Servers)
	}
	key := lockertest.Key(t)
	writer := c.locker(t, key, c.HTTPAddr(followers[1]))
	v, err := writer.SetControl(lockertest.Ctx(t, 5*time.Second), locker.Control{})
	if err != nil {
		t.Fatal(err)
	}
	waiter := c.locker(t, key, c.HTTPAddr(followers[0]))
	type result struct {
		c   locker.Control
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := waiter.WaitControl(lockertest.Ctx(t, time.Minute), v)
		done <- result{c, err}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter's query is open
	c.Kill(leader)
	rec := locker.Control{Version: v, Pause: &locker.Pause{By: "ops@admin1", Reason: "after the election"}}
	var v2 string
	for end := time.Now().Add(30 * time.Second); ; {
		if v2, err = writer.SetControl(lockertest.Ctx(t, 5*time.Second), rec); err == nil {
			break
		}
		if errors.Is(err, locker.ErrConflict) || time.Now().After(end) {
			t.Fatalf("SetControl while the servers elect a leader: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	wrote := time.Now()
	select {
	case r := <-done:
		if r.err != nil || r.c.Version != v2 || r.c.Pause == nil || r.c.Pause.Reason != "after the election" {
			t.Fatalf("WaitControl after the election = %+v, %v; want the record at %s", r.c, r.err, v2)
		}
		t.Logf("the write made after the leader's loss reached the waiter %v later", time.Since(wrote).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("WaitControl missed the write made while the servers elected a leader")
	}
}

// With ACLs, a token that may not write the control record is refused at
// once on every call, and a wait does not wait a refusal out.
func TestControlRefused(t *testing.T) {
	c := startCluster(t, testcluster.ConsulOptions{Servers: 1, ACL: true})
	addr := c.HTTPAddr(0)
	readOnly := c.CreateToken(t, `key_prefix "" { policy = "read" }`)
	for name, token := range map[string]string{"read-only token": readOnly, "no token": ""} {
		t.Run(name, func(t *testing.T) {
			l := c.locker(t, "ctl", addr, func(cfg *Config) { cfg.Token = token })
			calls := map[string]func(context.Context) error{
				"SetControl": func(ctx context.Context) error { _, err := l.SetControl(ctx, locker.Control{}); return err },
			}
			if token == "" {
				calls["Control"] = func(ctx context.Context) error { _, err := l.Control(ctx); return err }
				calls["WaitControl"] = func(ctx context.Context) error { _, err := l.WaitControl(ctx, ""); return err }
			}
			for name, call := range calls {
				start := time.Now()
				if err := call(lockertest.Ctx(t, 10*time.Second)); !errors.Is(err, locker.ErrRefused) || time.Since(start) > 2*time.Second {
					t.Errorf("%s = %v after %v, want ErrRefused at once", name, err, time.Since(start))
				}
			}
		})
	}
}
