//go:build linux

package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// holdersPair starts two candidates of key with --holders 2 on the local
// backend whose children ignore SIGTERM (they die at --kill-grace), stops
// the one in slot 0 and returns the other, which keeps slot 1 while slot
// 0 stays free.
func holdersPair(t *testing.T, dir, key, mark string, env []string) *Proc {
	t.Helper()
	procs := map[string]*Proc{}
	for _, id := range []string{"h0", "h1"} {
		procs[id] = start(t, id, env, withCommand(append(localArgs(dir, key), "--holders", "2", "--id", id), `trap "" TERM; exec sleep 1000`)...)
	}
	var kids []slotChild
	waitFor(t, 30*time.Second, "2 slots filled", func() bool { kids = slotChildren(mark); return len(kids) == 2 })
	var first, second *Proc
	for _, k := range kids {
		if k.slot == 0 {
			first = procs[k.id]
		} else {
			second = procs[k.id]
		}
	}
	if first == nil || second == nil {
		t.Fatalf("slots: %v", kids)
	}
	first.Signal(syscall.SIGTERM)
	first.Wait(20 * time.Second)
	waitFor(t, 20*time.Second, "slot 0's child gone", func() bool { return len(slotChildren(mark)) == 1 })
	t.Cleanup(func() { second.Signal(syscall.SIGTERM); second.Wait(20 * time.Second) })
	return second
}

// TestPauseWaitsForEverySlot: pause of a --holders key returns 0 only
// once no slot's job runs, also when slot 0 is free and another slot is
// held (pause given no --holders).
func TestPauseWaitsForEverySlot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, mark, env := markedKey("pause-slots")
	holdersPair(t, dir, key, mark, env)
	q := queryArgs(localArgs(dir, key))
	code, _, errOut, _ := runOnce(t, nil, append([]string{"pause", "--reason", "maintenance", "--timeout", "20s"}, q...)...)
	left := slotChildren(mark)
	if code != 0 {
		t.Fatalf("pause: exit %d %s", code, errOut)
	}
	if len(left) != 0 {
		t.Errorf("pause exited 0 while a slot's job still ran: %v (%s)", left, errOut)
	}
}

// TestStatusOfHoldersKey: plain status of a key run with --holders says
// so and how to see every slot; status --holders N shows the pause.
func TestStatusOfHoldersKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, mark, env := markedKey("status-slots")
	var procs []*Proc
	for _, id := range []string{"h0", "h1"} {
		procs = append(procs, start(t, id, env, withCommand(append(localArgs(dir, key), "--holders", "3", "--id", id), "exec sleep 1000")...))
	}
	defer stopAll(procs...)
	waitFor(t, 30*time.Second, "2 slots filled", func() bool { return len(slotChildren(mark)) == 2 })
	q := queryArgs(localArgs(dir, key))
	code, out, errOut, _ := runOnce(t, nil, append([]string{"status"}, q...)...)
	if code != 0 || !strings.Contains(out, "--holders 3") || !strings.Contains(out, "status --holders 3") {
		t.Errorf("plain status of a --holders 3 key: exit %d, no hint of its slots:\n%s%s", code, out, errOut)
	}
	code, out, errOut, _ = runOnce(t, nil, append([]string{"status", "--json"}, q...)...)
	var doc struct {
		Holders int `json:"holders"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || doc.Holders != 3 {
		t.Errorf("status --json of a --holders 3 key: exit %d, holders %d (%v):\n%s%s", code, doc.Holders, err, out, errOut)
	}
	if code, _, errOut, _ := runOnce(t, nil, append([]string{"pause", "--reason", "slot audit", "--timeout", "20s"}, q...)...); code != 0 {
		t.Fatalf("pause: exit %d %s", code, errOut)
	}
	code, out, errOut, _ = runOnce(t, nil, append([]string{"status", "--holders", "3"}, q...)...)
	if code != 0 || !strings.Contains(out, "paused") || !strings.Contains(out, "slot audit") {
		t.Errorf("status --holders 3 of a paused key does not show the pause: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut, _ = runOnce(t, nil, append([]string{"status", "--holders", "3", "--json"}, q...)...)
	var slots struct {
		Paused *struct {
			Reason string `json:"reason"`
		} `json:"paused"`
	}
	if err := json.Unmarshal([]byte(out), &slots); code != 0 || err != nil || slots.Paused == nil || slots.Paused.Reason != "slot audit" {
		t.Errorf("status --holders 3 --json of a paused key: exit %d (%v)\n%s%s", code, err, out, errOut)
	}
}

// TestStepDownToCurrentLeader: step-down --to the candidate that already
// leads has nothing to do: exit 0, saying so, and the term goes on.
func TestStepDownToCurrentLeader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, mark, env := markedKey("sd-to-leader")
	a := start(t, "a", env, withCommand(append(localArgs(dir, key), "--id", "a"), "exec sleep 1000")...)
	defer stopAll(a)
	waitFor(t, 20*time.Second, "a leading", func() bool { id, _ := leaderChild(mark); return id == "a" })
	_, epoch := leaderChild(mark)
	code, out, errOut, _ := runOnce(t, nil, append([]string{"step-down", "--to", "a", "--timeout", "5s"}, queryArgs(localArgs(dir, key))...)...)
	if code != 0 || !strings.Contains(out+errOut, "a already leads") {
		t.Errorf("step-down --to the leader: exit %d %q %q, want 0 saying a already leads", code, out, errOut)
	}
	time.Sleep(time.Second)
	if id, e := leaderChild(mark); id != "a" || e != epoch {
		t.Errorf("step-down --to the leader changed the term: %q epoch %d, was a epoch %d", id, e, epoch)
	}
}

// TestStatusAcquiredIsTakeover: on etcd, status's acquired time of a
// candidate that waited is when it took the key over, not when it began
// to wait.
func TestStatusAcquiredIsTakeover(t *testing.T) {
	t.Parallel()
	e := testcluster.StartEtcd(t, 1)
	eps := e.Endpoints()
	key, mark, env := markedKey("acquired-at")
	a := start(t, "a", env, withCommand(append(etcdArgs(eps, key), "--id", "a"), "exec sleep 1000")...)
	waitFor(t, 20*time.Second, "a leading", func() bool { id, _ := leaderChild(mark); return id == "a" })
	b := start(t, "b", env, withCommand(append(etcdArgs(eps, key), "--id", "b"), "exec sleep 1000")...)
	defer stopAll(b)
	time.Sleep(3 * time.Second) // b waits for a while
	// The record's time is the holder's wall clock at millisecond
	// precision; status shows whole seconds of it in text, all of it in
	// JSON.
	handover := time.Now().Truncate(time.Millisecond)
	a.Signal(syscall.SIGTERM)
	a.Wait(20 * time.Second)
	waitFor(t, 20*time.Second, "b leading", func() bool { id, _ := leaderChild(mark); return id == "b" })
	code, out, errOut, _ := runOnce(t, nil, append([]string{"status", "--json"}, queryArgs(etcdArgs(eps, key))...)...)
	var doc statusJSON
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || doc.Leader == nil || doc.Leader.ID != "b" {
		t.Fatalf("status: exit %d (%v)\n%s%s", code, err, out, errOut)
	}
	if doc.Leader.AcquiredAt.Before(handover) {
		t.Errorf("status says b acquired the key at %s, before a was stopped at %s: that is when b began to wait",
			doc.Leader.AcquiredAt.Format(time.RFC3339Nano), handover.UTC().Format(time.RFC3339Nano))
	}
}

// TestStatusLeaseRowTTL: on PostgreSQL, whose lease row keeps no expiry
// of its own, status says the TTL its holder keeps it by, not "unknown".
func TestStatusLeaseRowTTL(t *testing.T) {
	t.Parallel()
	pg := testcluster.StartPostgres(t)
	key, mark, env := markedKey("pg-ttl")
	a := start(t, "a", env, withCommand(append(pgArgs(pg.DSN(), key), "--id", "a"), "exec sleep 1000")...)
	defer stopAll(a)
	waitFor(t, 30*time.Second, "a leading", func() bool { id, _ := leaderChild(mark); return id == "a" })
	q := append([]string{"status"}, queryArgs(pgArgs(pg.DSN(), key))...)
	code, out, errOut, _ := runOnce(t, nil, q...)
	if code != 0 || strings.Contains(out, "unknown") || !strings.Contains(out, "3s TTL") {
		t.Errorf("status of a PostgreSQL key: exit %d, want the lease's 3s TTL:\n%s%s", code, out, errOut)
	}
	code, out, errOut, _ = runOnce(t, nil, append(q, "--json")...)
	var doc struct {
		Leader *struct {
			TTL *float64 `json:"lease_ttl_seconds"`
		} `json:"leader"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || doc.Leader == nil || doc.Leader.TTL == nil || *doc.Leader.TTL != 3 {
		t.Errorf("status --json of a PostgreSQL key: exit %d (%v), want lease_ttl_seconds 3:\n%s%s", code, err, out, errOut)
	}
}
