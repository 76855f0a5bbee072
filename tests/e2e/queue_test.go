//go:build linux

package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// frozenPredecessor: a leader a and two standbys, f queued first and c
// behind it. f is frozen (SIGSTOP), then a is killed -9 (its guard
// releases). c still takes over, once f's queue entry has been silent for
// the TTL + allowance, and never while a's child lives; f, resumed, does
// not start its child while c leads.
func frozenPredecessor(t *testing.T, args []string, ttl time.Duration) {
	dir := t.TempDir()
	a := startHost(t, dir, "a", "c", args)
	a.waitStarted(t, 30*time.Second)
	f := startHost(t, dir, "f", "a", args)
	waitFor(t, 10*time.Second, "f to campaign", func() bool { return strings.Contains(f.p.Output(), "waiting for the holder") })
	time.Sleep(time.Second) // f's entry first in the queue
	c := startHost(t, dir, "c", "a", args)
	waitFor(t, 10*time.Second, "c to campaign", func() bool { return strings.Contains(c.p.Output(), "waiting for the holder") })
	time.Sleep(time.Second)

	f.p.Signal(syscall.SIGSTOP)
	frozen := time.Now()
	aPid := readPID(t, a.file("pid"))
	a.p.Signal(syscall.SIGKILL)
	allowance := max(ttl/20, 250*time.Millisecond)
	bound := ttl + allowance + 3*time.Second
	c.waitStarted(t, bound+5*time.Second)
	took := c.stamp(t, "start").Sub(frozen)
	t.Logf("predecessor frozen, leader killed -> c's child started: %v (TTL + allowance %v)", took.Round(time.Millisecond), ttl+allowance)
	if took > bound {
		t.Errorf("c's child started %v after its predecessor froze, want within %v", took, bound)
	}
	if alive(aPid) {
		t.Error("old child still alive")
	}
	c.noOverlap(t)
	if ea, ec := a.epoch(t), c.epoch(t); ec <= ea {
		t.Errorf("epoch after failover %d, want > %d", ec, ea)
	}
	f.p.Signal(syscall.SIGCONT)
	time.Sleep(2 * time.Second)
	if f.started() {
		t.Error("the resumed standby started its child while c leads")
	}
}

func TestConsulQueue(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	frozenPredecessor(t, consulArgs(c.HTTPAddr(0), newKey("queue")), consulTTL)
}

func TestKubernetesQueue(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e, testcluster.KubeUser{Name: "nobody"})
	admin := k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")
	frozenPredecessor(t, kubeArgs(admin, newKey("queue")), kubeTTL)
}
